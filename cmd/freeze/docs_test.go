package main

import (
	"bytes"
	"context"
	"os/exec"
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
	got := owned(t, nil, "bash", "-c", script.String()+`
try() { COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); _freeze; echo "${COMPREPLY[*]}"; }
try freeze ru
try freeze run --max
try freeze --dry
try freeze census --form
try freeze guard --metrics-`)
	want := []string{"run runbook", "--max-procs", "--dry-run", "--format", "--metrics-file --metrics-every"}
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

// The man page is every command's usage in roff that groff reads
// without a warning.
func TestManPageHasEveryCommand(t *testing.T) {
	var page bytes.Buffer
	if code := run([]string{"man"}, &page, &bytes.Buffer{}); code != 0 {
		t.Fatalf("freeze man: exit %d", code)
	}
	for _, c := range helpable() {
		if !strings.Contains(page.String(), ".SH FREEZE "+strings.ToUpper(c)+"\n") {
			t.Errorf("no section for freeze %s", c)
		}
	}
	if out := owned(t, page.Bytes(), "groff", "-man", "-ww", "-z"); out != "" {
		t.Errorf("groff warns:\n%s", out)
	}
}
