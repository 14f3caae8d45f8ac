package live

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"freeze/internal/containtest"
	"freeze/internal/exefile"
	"freeze/internal/testenv"
	"freeze/internal/timeline"
)

// A binary deleted under its processes (the test cache removed under
// its chain) can still be named: --path takes the identity its processes
// run, from /proc/PID/exe. On 52cc04d it was "no such file", exit 2.
func TestPathOfADeletedBinary(t *testing.T) {
	testenv.RequireLive(t, "the harness's pids cgroup")
	bin := buildFreeze(t)
	cache := filepath.Join(t.TempDir(), "cache")
	os.Mkdir(cache, 0o755)
	sleep := filepath.Join(cache, "sleep")
	if err := exefile.Copy("/bin/sleep", sleep); err != nil {
		t.Fatal(err)
	}
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 50, HopCap: 1, Timeout: 120 * time.Second,
		Command: []string{"/bin/sh", "-c", sleep + " 60 & " + sleep + " 60 & " + sleep + " 60 & wait"}})
	// Wait for three processes that run the copy, not for four tasks: a
	// forked shell that has not exec'd yet counts as a task, and deleting
	// the cache under it left 2 matched in CI.
	for end := time.Now().Add(20 * time.Second); runningExe(sleep) < 3 && time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
	}
	if err := os.RemoveAll(cache); err != nil {
		t.Fatal(err)
	}
	tl := filepath.Join(t.TempDir(), "t.jsonl")
	run := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 50, HopCap: 1, Timeout: 120 * time.Second,
		Command: []string{bin, "--no-guard", "--path", sleep, "--timeline", tl}})
	ws, ok := run.Exit(90 * time.Second)
	if !ok || ws.ExitStatus() != 0 || !strings.Contains(run.Stderr(), "was deleted: matching the file its processes still run") || !strings.Contains(run.Stderr(), "zero remain (3 matched)") {
		t.Fatalf("exit %d (finished %v):\n%s", ws.ExitStatus(), ok, run.Stderr())
	}
	if n := c.Members(); n > 1 {
		t.Fatalf("%d members of the harness's group alive, want the shell alone (or none)", n)
	}
	// Where the gate attached, it held the deleted file itself, opened
	// through one of its processes: the chain stops in one step, not as
	// the scan reaches each process (#51: 1.49x from the guard).
	if e, ok := event(t, tl, timeline.StepGateAttached); ok {
		var a timeline.GateAttached
		if e.Decode(&a); !a.ByFile || a.Files != 1 {
			t.Errorf("the gate attached without the deleted file (files %d, by file %v): %s", a.Files, a.ByFile, e.Msg)
		}
	} else {
		t.Log("the gate did not attach here: the deleted file's gating is not checked")
	}
}

// A dry run lists the processes a run would act on, and names a process
// of the same name that runs from another file (left alone: the match is
// by file). On 2e67e63 it printed a count and nothing else.
func TestDryRunListsTheSetAndLookAlikes(t *testing.T) {
	testenv.RequireLive(t, "the harness's pids cgroup")
	bin := buildFreeze(t)
	// A name of this test's own: the look-alike line goes by name.
	idle := filepath.Join(t.TempDir(), "dryidle")
	if err := exefile.Copy("/bin/sleep", idle); err != nil {
		t.Fatal(err)
	}
	// The harness runs its own copy of sleep, in its test cache.
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Name: "dryidle", Cap: 20, HopCap: 1, Timeout: 120 * time.Second, Command: []string{"/bin/sleep", "60"}})
	running := c.Path
	for end := time.Now().Add(20 * time.Second); runningExe(running) < 1 && time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
	}
	dry := func(path string) string {
		r := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 50, HopCap: 1, Timeout: 120 * time.Second,
			Command: []string{bin, "--no-guard", "--dry-run", "--path", path}})
		if ws, ok := r.Exit(60 * time.Second); !ok || ws.ExitStatus() != 0 {
			t.Fatalf("dry run of %s: exit %d (finished %v):\n%s", path, ws.ExitStatus(), ok, r.Stderr())
		}
		return r.Stderr()
	}
	if out := dry(running); !strings.Contains(out, "would act on pid "+strconv.Itoa(c.Leader)+" (parent ") || !strings.Contains(out, "by path): "+running) {
		t.Errorf("the dry run of %s does not list pid %d:\n%s", running, c.Leader, out)
	}
	if out := dry(idle); !strings.Contains(out, "not matched: dryidle also runs as "+running+" (1 process), a different file: left alone") {
		t.Errorf("the dry run of %s does not name the look-alike at %s:\n%s", idle, running, out)
	}
	if n := runningExe(running); n != 1 {
		t.Errorf("%d processes run %s after two dry runs, want the 1 it started", n, running)
	}
}
