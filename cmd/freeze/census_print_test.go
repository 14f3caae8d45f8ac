package main

import (
	"bytes"
	"strings"
	"testing"
	"unicode"

	"freeze/internal/census"
)

// hostileDir is a directory name that carries terminal escapes, HTML,
// markdown, a newline and a forged GitHub annotation (as in
// live/hostile_test.go).
const hostileDir = "h\x1b]0;pwned\x07\u009b31m|`<b>[l](u)%0A\r\n::error::forged"

// The third audit's S4: a census suspect's reason carries the path as
// census built it (a container's path that is not the file its
// processes run); printed raw, its ESC and BEL reached root's terminal
// and set its title. Every field of the printed census is text.
func TestCensusPrintsAHostileSuspectAsText(t *testing.T) {
	p := "/tmp/x/" + hostileDir + "/runaway"
	r := &census.Report{Verdict: "verdict", PidLine: "pids", Total: 400, Rows: []census.Row{{
		Exe: p, Count: 400, Suspect: true, Owners: "1000 x400", Runtime: "podman", Container: "44547caed35c" + hostileDir,
		Reasons: "400 copies; " + p + " inside podman 44547caed35c is not the file these processes run",
	}}, Notes: []string{"note " + hostileDir}}
	var stdout, stderr bytes.Buffer
	printCensus(out{Stdout: &stdout, Stderr: &stderr}, r)
	for name, s := range map[string]string{"stdout": stdout.String(), "stderr": stderr.String()} {
		if !strings.Contains(s, "pwned") && name == "stdout" {
			t.Fatalf("the suspect is not printed, so this test proves nothing:\n%s", s)
		}
		for _, c := range s {
			if c != '\n' && (unicode.IsControl(c) || c == '\u2028') {
				t.Errorf("census's %s holds a raw %q:\n%q", name, c, s)
				break
			}
		}
	}
}

// #52: the last line census prints is the one an operator copies. With a
// container's chain in a group at its cap and a larger chain of another
// user's elsewhere, each suspect has its own command under it, and the
// last line names the capped one's.
func TestCensusEndsWithTheCappedSuspectsCommand(t *testing.T) {
	r := &census.Report{Verdict: "v", PidLine: "p", Total: 1300,
		Tightest: &census.PidsCgroup{Path: "/sys/fs/cgroup/libpod_parent/libpod-44547caed35c", Current: 400, Max: 400, Ratio: 1, Holds: []string{"/bin/runaway in podman 44547caed35c: 400"}},
		Rows: []census.Row{
			{Exe: "/tmp/u/chain", Count: 900, Suspect: true, Reasons: "900 copies", Command: "freeze --path /tmp/u/chain"},
			{Exe: "/bin/runaway", Count: 400, Suspect: true, Reasons: "400 copies", Runtime: "podman", Container: "44547caed35c", InTightest: true, Command: "freeze --container 44547caed35c --path /bin/runaway"},
		},
		Command: "freeze --container 44547caed35c --path /bin/runaway"}
	var stdout bytes.Buffer
	printCensus(out{Stdout: &stdout, Stderr: &bytes.Buffer{}}, r)
	s := stdout.String()
	for _, want := range []string{
		"is at its cap: 400 of pids.max 400 -- every fork in it fails; in it: /bin/runaway in podman 44547caed35c: 400",
		"    stop it: freeze --path /tmp/u/chain",
		"; in the pids cgroup at its cap",
		"    stop it: freeze --container 44547caed35c --path /bin/runaway",
		"to stop the suspect in the pids cgroup at its cap:\n  freeze --container 44547caed35c --path /bin/runaway\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("census does not print %q:\n%s", want, s)
		}
	}
}
