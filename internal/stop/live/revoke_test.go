package live_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"freeze/internal/containtest"
	"freeze/internal/freeze"
	"freeze/internal/stop"
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
	out, err := stop.Order(context.Background(), cfg, rec)
	rec.Close()
	if err != nil || out.Kind != stop.Zero {
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
