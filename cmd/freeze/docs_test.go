package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// owned runs a system tool on trusted input (no chain), in a process
// group of its own, killed as one if it overruns; it skips where the tool
// is missing.
func owned(t *testing.T, stdin []byte, name string, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("no %s here", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", name, err, out)
	}
	return string(out)
}

// The bash completion completes subcommands and each one's options, as
// the usage texts define them.
func TestBashCompletionFromTheUsage(t *testing.T) {
	var script bytes.Buffer
	if code := run([]string{"completion", "bash"}, &script, &bytes.Buffer{}); code != 0 {
		t.Fatalf("freeze completion bash: exit %d", code)
	}
	// A command of the test's own, for 'freeze run -- CMD'.
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "zzfreezecmd"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	got := owned(t, nil, "bash", "-c", "PATH="+bin+":$PATH\n"+script.String()+`
try() { COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); _freeze; echo "${COMPREPLY[*]}"; }
try freeze ru
try freeze run --max
try freeze --dry
try freeze census --form
try freeze guard --metrics-
try freeze --method c
try freeze census --format ""
try freeze timeline x.jsonl --format js
try freeze runbook ""
try freeze run --max-procs 5 -- zzfreeze
try freeze drill --shape ""`)
	// Values too: they completed nothing before (#37).
	want := []string{"run runbook", "--max-procs", "--dry-run", "--format", "--metrics-file --metrics-every",
		"cgroup2 cgroup1", "text json prometheus", "json jsonl", "incident no-cgroup prevention", "zzfreezecmd", "tree line churn"}
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if len(lines) != len(want) {
		t.Fatalf("completions:\n%s", got)
	}
	for i, w := range want {
		if lines[i] != w {
			t.Errorf("completion %d: %q, want %q", i, lines[i], w)
		}
	}
}

// The man page has the standard sections in their order, every
// command's usage, every option of freeze's as an item, and groff and
// mandoc read it without a warning (it was one preformatted dump of the
// usage text under "SYNOPSIS AND OPTIONS").
func TestManPageHasTheStandardSectionsAndEveryCommand(t *testing.T) {
	var page bytes.Buffer
	if code := run([]string{"man"}, &page, &bytes.Buffer{}); code != 0 {
		t.Fatalf("freeze man: exit %d", code)
	}
	p := page.String()
	at := -1
	for _, sec := range []string{"NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "COMMANDS", "EXIT STATUS", "ENVIRONMENT", "FILES", "EXAMPLES", "SEE ALSO"} {
		i := strings.Index(p, "\n.SH "+sec+"\n")
		if i < 0 || i < at {
			t.Errorf("section %s missing or out of order", sec)
		}
		at = i
	}
	for _, c := range helpable() {
		if !strings.Contains(p, ".SS freeze "+c+"\n") {
			t.Errorf("no section for freeze %s", c)
		}
	}
	for _, f := range []string{`\-\-path PATH`, `\-\-container ID`, `\-\-hold`, `\-\-revoke\-exec`} {
		if !strings.Contains(p, ".TP\n.B "+f) && !strings.Contains(p, ".TP\n.B \\-p, "+f) {
			t.Errorf("option %s is not an item of OPTIONS", f)
		}
	}
	if !strings.Contains(p, ".TP\n.B 3\nrefused by a safety rule") {
		t.Errorf("EXIT STATUS does not list exit 3")
	}
	if out := owned(t, page.Bytes(), "groff", "-man", "-ww", "-z"); out != "" {
		t.Errorf("groff warns:\n%s", out)
	}
	if out := owned(t, page.Bytes(), "mandoc", "-T", "lint", "-W", "warning"); out != "" {
		t.Errorf("mandoc warns:\n%s", out)
	}
}
