package live

import (
	"bytes"
	"encoding/xml"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"freeze/internal/exefile"
	"freeze/internal/show"
	"freeze/internal/testenv"
)

// hostileDir is a directory name a chain's owner chooses: ESC and BEL
// (a terminal's title), C1's CSI, markdown's and HTML's structure, a
// workflow command on a line of its own after CR and LF, and the
// toolkit's own escape.
const hostileDir = "h\x1b]0;pwned\x07\u009b31m|`<b>[l](u)%0A\r\n::error::forged"

// One hostile string through every output freeze run has (the third
// audit's S4 and S7, and the one escaper's reason to be): a leftover
// whose path is hostileDir/sleep, reported on stderr, as text and as
// JSON, as GitHub annotations and step summary, as JUnit, and its
// timeline rendered as text, markdown and SVG. No output holds a raw
// control character (but the lines' own newlines and tabs) or bytes
// that are not UTF-8, and none holds structure the string forged: a
// workflow command of its own, a table cell, an XML element.
func TestEveryOutputShowsAHostileNameAsText(t *testing.T) {
	nestsInHarness(t)
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash to start the leftover")
	}
	bin := buildFreeze(t)
	dir := t.TempDir()
	hd := filepath.Join(dir, hostileDir)
	if err := os.Mkdir(hd, 0o755); err != nil {
		t.Fatal(err)
	}
	sleep := filepath.Join(hd, "sleep")
	if err := exefile.Copy("/bin/sleep", sleep); err != nil {
		t.Fatal(err)
	}
	junit, summary, tl := filepath.Join(dir, "run.xml"), filepath.Join(dir, "summary.md"), filepath.Join(dir, "run.jsonl")
	script := "setsid " + show.Shell(sleep) + " 60 & exit 0"
	cmd := []string{"/bin/sh", "-c", "GITHUB_ACTIONS=true GITHUB_STEP_SUMMARY=" + summary + " exec " + bin + " run -t " + tl + " --junit " + junit + " -- bash -c " + show.Shell(script)}
	c, code := runUnder(t, cmd, 60*time.Second)
	if code != 122 {
		t.Fatalf("exit %d, want 122 (a leftover); stderr:\n%s", code, c.Stderr())
	}
	outputs := map[string]string{"stdout": c.Stdout(), "stderr": c.Stderr()}
	for name, p := range map[string]string{"summary": summary, "junit": junit} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		outputs[name] = string(b)
	}
	for _, format := range []string{"text", "markdown", "svg"} {
		out, err := exec.Command(bin, "timeline", tl, "--format", format).Output()
		if err != nil {
			t.Fatalf("freeze timeline --format %s: %v", format, err)
		}
		outputs["timeline "+format] = string(out)
	}
	// The stop order's own words about the same file, and its timeline.
	order := exec.Command(bin, "--dry-run", "--no-guard", "--path", sleep, "-t", filepath.Join(dir, "order.jsonl"))
	var oout, oerr bytes.Buffer
	order.Stdout, order.Stderr = &oout, &oerr
	order.Run()
	outputs["order stdout"], outputs["order stderr"] = oout.String(), oerr.String()
	if out, err := exec.Command(bin, "timeline", filepath.Join(dir, "order.jsonl"), "--format", "text").Output(); err == nil {
		outputs["order timeline text"] = string(out)
	} else {
		t.Errorf("freeze timeline of the order's record: %v", err)
	}
	if !strings.Contains(outputs["order timeline text"], "pwned") {
		t.Errorf("the stop order's record does not name the hostile path, so its check proves nothing:\n%s", outputs["order timeline text"])
	}
	if !strings.Contains(outputs["stderr"], "pwned") {
		t.Fatalf("the leftover's hostile path is not in freeze run's report, so this test proves nothing:\n%s", outputs["stderr"])
	}
	for name, out := range outputs {
		if !utf8.ValidString(out) {
			t.Errorf("%s holds bytes that are not UTF-8", name)
		}
		for i, r := range out {
			if r != '\n' && r != '\t' && (unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) || r == '\u2028' || r == '\u2029') {
				t.Errorf("%s holds a raw %q at byte %d: ...%q...", name, r, i, out[max(0, i-40):min(len(out), i+40)])
				break
			}
		}
	}
	for _, line := range strings.Split(outputs["stdout"], "\n") {
		if strings.HasPrefix(line, "::") && !strings.HasPrefix(line, "::error title=left behind%3A pid ") {
			t.Errorf("stdout holds a workflow command the path forged: %q", line)
		}
	}
	cell := regexp.MustCompile(`(^|[^\\])\|`)
	for _, line := range strings.Split(outputs["summary"], "\n") {
		if strings.HasPrefix(line, "| left behind") && len(cell.FindAllString(line, -1)) != 3 {
			t.Errorf("a summary row has other than 2 cells: %q", line)
		}
	}
	for _, name := range []string{"junit", "timeline svg"} {
		d := xml.NewDecoder(strings.NewReader(outputs[name]))
		elements := 0
		for {
			tok, err := d.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Errorf("%s is not XML: %v", name, err)
				break
			}
			if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "b" {
				t.Errorf("%s holds a <b> element the path forged", name)
			}
			elements++
		}
		if elements == 0 {
			t.Errorf("%s is empty", name)
		}
	}
	if strings.Contains(outsideCode(outputs["timeline markdown"]), "<b>") {
		t.Errorf("the markdown timeline holds the path's <b> tag raw, outside a code span")
	}
}

// outsideCode is markdown with its code spans taken out (a run of n
// backticks to the next run of exactly n): what a renderer reads as
// markup.
func outsideCode(md string) string {
	var b strings.Builder
	for i := 0; i < len(md); {
		if md[i] != '`' {
			b.WriteByte(md[i])
			i++
			continue
		}
		n := 0
		for i+n < len(md) && md[i+n] == '`' {
			n++
		}
		fence := strings.Repeat("`", n)
		end := -1
		for j := i + n; j < len(md); {
			k := strings.Index(md[j:], fence)
			if k < 0 {
				break
			}
			k += j
			if (k+n >= len(md) || md[k+n] != '`') && md[k-1] != '`' {
				end = k
				break
			}
			j = k + 1
		}
		if end < 0 {
			b.WriteString(fence)
			i += n
			continue
		}
		i = end + n
	}
	return b.String()
}

// The third audit's S1, as its proof of concept ran it: under GitHub
// Actions, the step summary's directory belongs to the runner's user (an
// ordinary uid), who swaps in a link to a root-only file while freeze
// run, as root, runs a suite that leaves a process whose argv names a
// library path. Root appended the table, argv and all, to the file the
// link named. Now the one writer refuses the runner's directory: the
// file stays as it was, the run says that no summary was written and
// why, and keeps its outcome.
func TestRunAppendsNoStepSummaryThroughAUsersLink(t *testing.T) {
	nestsInHarness(t)
	testenv.RequireRoot(t, "a directory owned by another user, and a root-only file")
	bin := buildFreeze(t)
	dir := t.TempDir()
	sleep := copyTool(t, dir, "sleep")
	// The runner's user reaches its directory (go test's are 0700).
	os.Chmod(filepath.Dir(dir), 0o711)
	os.Chmod(dir, 0o711)
	runner := filepath.Join(dir, "file_commands")
	if err := os.Mkdir(runner, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(runner, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(dir, "ld.so.preload")
	if err := os.WriteFile(victim, []byte("root's own\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	summary := filepath.Join(runner, "step_summary")
	// The runner's user plants the link, as that user.
	ln := exec.Command("ln", "-s", victim, summary)
	ln.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, err := ln.CombinedOutput(); err != nil {
		t.Fatalf("ln -s as uid 65534: %v\n%s", err, out)
	}
	evil := filepath.Join(dir, "evil.so")
	// The library path is a word of the leftover's argv: the shell's $0
	// (not 'exec -a', which a busybox sleep, the kernel matrix's, reads
	// as the name of an applet).
	script := "setsid /bin/sh -c '" + sleep + " 60; true' " + evil + " & exit 0"
	cmd := []string{"/bin/sh", "-c", "GITHUB_ACTIONS=true GITHUB_STEP_SUMMARY=" + summary + " exec " + bin + " run -t " + filepath.Join(dir, "run.jsonl") + " -- /bin/sh -c " + show.Shell(script)}
	c, code := runUnder(t, cmd, 60*time.Second)
	if code != 122 {
		t.Fatalf("exit %d, want 122 (a leftover); stderr:\n%s", code, c.Stderr())
	}
	if !strings.Contains(c.Stderr(), "evil.so") {
		t.Fatalf("the leftover's argv is not in the report, so the table would not have carried it:\n%s", c.Stderr())
	}
	b, err := os.ReadFile(victim)
	st, _ := os.Stat(victim)
	if err != nil || string(b) != "root's own\n" || st.Mode().Perm() != 0o600 {
		t.Fatalf("the root-only file the runner's link named changed: %q, %v, %v", b, st.Mode(), err)
	}
	if !strings.Contains(c.Stderr(), "GITHUB_STEP_SUMMARY: no summary written") || !strings.Contains(c.Stderr(), "belongs to uid 65534") {
		t.Errorf("the run does not say that it wrote no summary, and why:\n%s", c.Stderr())
	}
}
