package stop

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/containtest"
	"freeze/internal/freeze"
	"freeze/internal/match"
	"freeze/internal/proc"
	"freeze/internal/timeline"
)

// restoreMode puts the copy's mode back at the end, so no file with its
// execute bits removed outlives the test.
func restoreMode(t *testing.T, path string) {
	t.Cleanup(func() { os.Chmod(path, 0o755) })
}

// A chain that execs at every hop stops growing once exec is revoked, and
// --method none (kill rounds alone) then reaches zero: the original
// incident's order.
func TestRevokeExecStopsAnExecChain(t *testing.T) {
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Tree, Exec: true, Cap: 3000, HopCap: 1000000,
		Timeout: 120 * time.Second, Interval: time.Second})
	restoreMode(t, c.Path)
	// A fork a second: each process doubles the chain every second, and a
	// child that fails its execve is gone within a millisecond, so the
	// count is not blurred by children in flight.
	if n := c.WaitPopulation(60, 30*time.Second); n < 60 {
		t.Fatalf("chain reached %d, want 60", n)
	}
	r, err := freeze.CheckRevoke(c.Path, freeze.DisposableRoots(nil), false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := freeze.Revoke(r); err != nil {
		t.Fatal(err)
	}
	// Hops already past execve finish: wait (bounded) until two counts
	// 50 ms apart agree.
	at := c.Population()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
		time.Sleep(50 * time.Millisecond)
		n := c.Population()
		if n == at {
			break
		}
		at = n
	}
	// Processes still fork, but every child dies at its execve. A claim
	// that something does not happen needs a window to watch: two
	// seconds, in which the chain (a fork a second each) would have grown
	// fourfold. It fails the moment the count reaches double: the
	// children in flight count until their failed execve returns, and on
	// a machine busy with other test packages' chains one child per
	// process was seen waiting that long (89 grew to 151 with exec
	// revoked; a 10% bound failed there), never two.
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if n := c.Population(); n > 2*at+5 {
			st, _ := os.Stat(c.Path)
			t.Fatalf("population grew from %d to %d with exec revoked (mode %v); stderr %.300s", at, n, st.Mode(), c.Stderr())
		}
	}
	raise(t)
	cfg := config(t, freeze.None, c.Path)
	cfg.RevokeExec = true // already revoked: the guard passes, the mode is recorded
	os.Chmod(c.Path, 0o755)
	tl := filepath.Join(t.TempDir(), "t.jsonl")
	rec, _ := timeline.New(tl, nil)
	out, err := Run(cfg, rec)
	rec.Close()
	if err != nil || out.Kind != Zero {
		t.Fatalf("--method none after revoking exec: %+v %v", out, err)
	}
	if len(out.Revoked) != 1 {
		t.Fatalf("revoked %d files, want 1", len(out.Revoked))
	}
	// Write-ahead: the intent, with the original mode, before the
	// revocation in the file.
	events, err := timeline.ReadFile(tl)
	if err != nil {
		t.Fatal(err)
	}
	intent, done := -1, -1
	for i, e := range events {
		switch e.Step {
		case timeline.StepRevokeIntent:
			intent = i
		case timeline.StepRevoke:
			done = i
		}
	}
	if intent < 0 || done < 0 || intent > done {
		t.Fatalf("revoke-intent at %d, revoke at %d: want the intent first", intent, done)
	}
	if left := c.Survivors(); len(left) > 0 {
		t.Fatalf("%d alive", len(left))
	}
	if st, _ := os.Stat(c.Path); st.Mode().Perm()&0o111 != 0 {
		t.Fatalf("exec bits back on after the run: %v (they stay revoked by default)", st.Mode())
	}
}

// Revoking exec alone does not stop a chain that only forks: it is an
// addition to freezing, not a replacement. The chain must go on starting
// processes after the revocation; how fast is the benchmark's business.
func TestRevokeExecDoesNotStopAForkOnlyChain(t *testing.T) {
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Tree, Cap: 1000, HopCap: 1000000,
		Timeout: 90 * time.Second, Interval: 300 * time.Millisecond})
	restoreMode(t, c.Path)
	if n := c.WaitPopulation(8, 30*time.Second); n < 8 {
		t.Fatalf("the chain reached %d of 8", n)
	}
	r, err := freeze.CheckRevoke(c.Path, freeze.DisposableRoots(nil), false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := freeze.Revoke(r); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(c.Path); st.Mode().Perm()&0o111 != 0 {
		t.Fatalf("exec bits still on after Revoke: %v", st.Mode())
	}
	at := c.Population()
	if n := c.WaitPopulation(at+50, 60*time.Second); n < at+50 {
		t.Fatalf("a fork-only chain went from %d to only %d in 60 s with exec revoked; forks need no exec bit, so it should keep growing", at, n)
	}
}

// The audit's move against --revoke-exec: the chain's owner swaps a
// directory of the matched path for a symlink to a directory holding a
// root file of the same name (RENAME_EXCHANGE), between the match and the
// revocation. The check resolves the path again and finds the root file:
// it is refused as not the file that was matched, and its mode is kept.
// And a file of another owner than the chain's is refused too.
func TestRevokeRefusesAFileSwappedInAfterTheMatch(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the victim file is root's, the attacker's another uid's")
	}
	base := t.TempDir()
	att := filepath.Join(base, "att")
	os.MkdirAll(filepath.Join(att, "d"), 0o755)
	tool := filepath.Join(att, "d", "tool")
	if err := os.WriteFile(tool, []byte("#!/bin/false\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	victimDir := filepath.Join(base, "victim")
	os.Mkdir(victimDir, 0o755)
	victim := filepath.Join(victimDir, "tool")
	if err := os.WriteFile(victim, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tg, err := match.Resolve(tool)
	if err != nil {
		t.Fatal(err)
	}
	// The swap: att/d and a symlink to the victim's directory exchange
	// places, in one step.
	link := filepath.Join(att, "link")
	if err := os.Symlink(victimDir, link); err != nil {
		t.Fatal(err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, link, unix.AT_FDCWD, filepath.Join(att, "d"), unix.RENAME_EXCHANGE); err != nil {
		t.Fatal(err)
	}
	c := Config{Spec: match.Spec{Targets: []match.Target{tg}}, FS: proc.Default, Disposable: []string{base}}
	revs, refused := checkRevocations(c, match.Result{})
	if len(revs) != 0 || len(refused) != 1 || !strings.Contains(refused[0].Error(), "is not the file that was matched") {
		t.Fatalf("after the swap: revocations %+v, refusals %v; want the one refused as not the matched file", revs, refused)
	}
	if st, _ := os.Stat(victim); st.Mode().Perm() != 0o755 {
		t.Fatalf("the root file's mode is %v", st.Mode().Perm())
	}

	// Swapped back, the matched file is revocable only by its owner's
	// chain: owned by uid 4242, who runs nothing of it, it is refused.
	unix.Renameat2(unix.AT_FDCWD, link, unix.AT_FDCWD, filepath.Join(att, "d"), unix.RENAME_EXCHANGE)
	os.Chown(tool, 4242, 4242)
	if revs, refused := checkRevocations(c, match.Result{}); len(revs) != 0 || len(refused) != 1 || !strings.Contains(refused[0].Error(), "runs no process of the chain") {
		t.Fatalf("another user's file: revocations %+v, refusals %v", revs, refused)
	}
	os.Chown(tool, 0, 0)
	if revs, refused := checkRevocations(c, match.Result{}); len(revs) != 1 || len(refused) != 0 {
		t.Fatalf("root's matched file: revocations %+v, refusals %v", revs, refused)
	}
}
