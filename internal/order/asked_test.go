package order

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"freeze/internal/freeze"
	"freeze/internal/proc"
	"freeze/internal/say"
	"freeze/internal/testenv"
)

// A request's relative --timeline is refused by the guard, which cannot
// know the asker's directory (#24, finding 9: it was written in the
// guard's own). The CLI resolves it before handing over.
func TestRelativeTimelineOfARequest(t *testing.T) {
	for words, relative := range map[string]bool{
		"--path /tmp/x/tool --timeline t.jsonl":         true,
		"--path /tmp/x/tool -t sub/t.jsonl":             true,
		"--path /tmp/x/tool --timeline /var/tmp/t.json": false,
		"--path /tmp/x/tool":                            false,
	} {
		var stderr bytes.Buffer
		// /tmp/x/tool does not exist: a request that passes the check
		// is refused next, as a usage error, before anything runs.
		res := Asked(context.Background(), say.Out{Stdout: &stderr, Stderr: &stderr}, strings.Fields(words), nil, nil)
		said := strings.Contains(stderr.String(), "is relative: the guard does not know your directory")
		if res.Code() != 2 || said != relative {
			t.Errorf("%q: exit %d, refused as relative %v, want exit 2 and %v; said:\n%s", words, res.Code(), said, relative, stderr.String())
		}
	}
}

// An automatic request carries the identity of the file the guard
// judged; a path whose file was replaced since is refused, and nothing
// runs (#24, finding 4: the words alone named a path its owner could
// swap between the judging and the run).
func TestAutoRequestRefusesAReplacedFile(t *testing.T) {
	dir := t.TempDir()
	tool := filepath.Join(dir, "tool")
	if err := os.WriteFile(tool, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	judged, err := proc.StatFile(tool)
	if err != nil {
		t.Fatal(err)
	}
	words := []string{"--path", tool, "--hold", "--timeline", filepath.Join(dir, "t.jsonl")}
	var said bytes.Buffer
	if res := Asked(context.Background(), say.Out{Stdout: &said, Stderr: &said}, words, &judged, nil); res.Code() != 0 || res.Outcome != "nothing-matched" {
		t.Fatalf("the judged file itself: exit %d (%s):\n%s", res.Code(), res.Outcome, said.String())
	}
	// The swap: another file renamed over the path (made while the
	// judged one still exists, so its inode differs).
	other := filepath.Join(dir, "other")
	if err := os.WriteFile(other, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(other, tool); err != nil {
		t.Fatal(err)
	}
	said.Reset()
	res := Asked(context.Background(), say.Out{Stdout: &said, Stderr: &said}, words, &judged, nil)
	if res.Code() != 3 || !strings.Contains(said.String(), "no longer the file the guard judged") {
		t.Fatalf("after the swap: exit %d (%s):\n%s", res.Code(), res.Outcome, said.String())
	}
}

// --cgroup takes a group as /proc/PID/cgroup names it, or its directory
// under /sys/fs/cgroup (v2's, or a v1 hierarchy's); the root group, a
// relative path or one that climbs are usage errors.
func TestCgroupScopeForms(t *testing.T) {
	var said bytes.Buffer
	o := say.Out{Stdout: &said, Stderr: &said}
	for in, want := range map[string]string{
		"/system.slice/app.service":                "/system.slice/app.service",
		"/system.slice/app.service/":               "/system.slice/app.service",
		"/sys/fs/cgroup/system.slice/app.service/": "/system.slice/app.service",
	} {
		if got, code := cgroupScope(o, in); code != 0 || got != want {
			t.Errorf("cgroupScope(%q) = %q, %d; want %q", in, got, code, want)
		}
	}
	for _, bad := range []string{"system.slice/app.service", "/", "/sys/fs/cgroup", "/a/../b", "/a/.."} {
		if got, code := cgroupScope(o, bad); code == 0 {
			t.Errorf("cgroupScope(%q) = %q, accepted", bad, got)
		}
	}
	if _, err := os.Stat("/sys/fs/cgroup/pids/cgroup.procs"); err == nil {
		if got, _ := cgroupScope(o, "/sys/fs/cgroup/pids/test-group"); got != "/test-group" {
			t.Errorf("a v1 pids hierarchy's directory reads as %q, want /test-group", got)
		}
	}
}

// A guard's spare is taken before a request's checks (its task iterator
// resolves a deleted --path); a request the checks refuse unloads it,
// where it would otherwise hold its programs until the guard ends. The
// two refusals: a usage error, and a judged file replaced since.
func TestARefusedRequestUnloadsTheSpareItTook(t *testing.T) {
	testenv.RequireRoot(t, "a spare gate")
	if ok, why := freeze.GateLoads(); !ok {
		t.Skipf("the gate does not load here: %s", why)
	}
	dir := t.TempDir()
	tool := filepath.Join(dir, "tool")
	if err := os.WriteFile(tool, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	judged := proc.File{Dev: 1, Ino: 1} // not the tool's: refused as replaced
	for name, words := range map[string][]string{
		"usage":    {"--path", filepath.Join(dir, "none")},
		"replaced": {"--path", tool, "--timeline", filepath.Join(dir, "t.jsonl")},
	} {
		sp, err := freeze.LoadSpare()
		if err != nil {
			t.Fatalf("%s: load a spare: %v", name, err)
		}
		t.Cleanup(sp.Close)
		var j *proc.File
		if name == "replaced" {
			j = &judged
		}
		var said bytes.Buffer
		res := Asked(context.Background(), say.Out{Stdout: &said, Stderr: &said}, words, j, func() *freeze.Spare { return sp })
		if res.Code() == 0 {
			t.Fatalf("%s: exit 0, want a refusal:\n%s", name, said.String())
		}
		if _, err := sp.Tasks(nil); err == nil {
			t.Errorf("%s: the request was refused (exit %d) and the spare it took still answers: not unloaded", name, res.Code())
		}
	}
}
