package live

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/containtest"
	"freeze/internal/proc"
	"freeze/internal/runtest"
	"freeze/internal/testenv"
)

// Two runs against one chain do not fight: while the first is mid-run,
// a second is refused with exit 3 and told the first's pid and start
// time, and changes nothing. When the first dies without releasing the
// lock (SIGKILL), the next run takes the stale lock over, says so, and
// finishes the job.
//
// The first run stops itself at its match step, lock in hand
// (FREEZE_PAUSE_AT). Before, the test stopped it with SIGSTOP once its
// output said "1/4 match"; lifted to SCHED_RR, freeze could finish the
// whole run (a gate's kill of 300 takes milliseconds) before the test, at
// ordinary priority, sent the stop. In rehearsal 36 (stress-ng beside
// it) it did: the second run found no chain and no lock, and exited 0.
func TestConcurrentRunsAndAStaleLock(t *testing.T) {
	testenv.RequireLive(t, "the chain is capped by a pids cgroup")
	bin := buildFreeze(t)
	chain := treeAtCap(t, 300, 100*time.Millisecond)
	run := func(name string, env ...string) *containtest.Chain {
		return containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 100, HopCap: 1, Timeout: 90 * time.Second, Env: env,
			Command: []string{bin, "--path", chain.Path, "--timeline", filepath.Join(t.TempDir(), name+".jsonl")}})
	}
	first := run("first", "FREEZE_PAUSE_AT=match")
	st := waitPaused(t, first, 30*time.Second)
	second := run("second")
	ws, ok := second.Exit(30 * time.Second)
	if !ok || ws.ExitStatus() != 3 {
		t.Fatalf("second run while the first holds the lock: exit %d, want 3\n%s", ws.ExitStatus(), second.Stderr())
	}
	want := fmt.Sprintf("pid %d (start time %d ticks", first.Leader, st.Start)
	if !strings.Contains(second.Stderr(), want) {
		t.Fatalf("the refusal does not name the holder (%q):\n%s", want, second.Stderr())
	}
	if strings.Contains(second.Stderr(), "1/4 match") {
		t.Fatalf("the refused run went on to match:\n%s", second.Stderr())
	}

	// The first run dies holding the lock.
	if err := unix.Kill(first.Leader, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, ok := first.Exit(30 * time.Second); !ok {
		t.Fatal("the first run did not die of SIGKILL")
	}
	third := run("third")
	ws, ok = third.Exit(60 * time.Second)
	if !ok || ws.ExitStatus() != 0 {
		t.Fatalf("run after the holder died: exit %d, want 0\n%s", ws.ExitStatus(), third.Stderr())
	}
	if !strings.Contains(third.Stderr(), fmt.Sprintf("took over the run lock from a run that ended without releasing it: pid %d", first.Leader)) {
		t.Fatalf("the takeover is not reported:\n%s", third.Stderr())
	}
	if left := chain.Survivors(); len(left) > 0 {
		t.Fatalf("%d processes of the chain alive after the third run", len(left))
	}
}

// waitPaused waits until freeze, started with FREEZE_PAUSE_AT, has
// stopped itself at that step (state T), and returns its stat. A freeze
// that exits first fails the test: it never reached the step.
func waitPaused(t *testing.T, fz *containtest.Chain, within time.Duration) proc.Stat {
	t.Helper()
	end := time.Now().Add(within)
	for {
		st, err := proc.Default.ReadStat(fz.Leader)
		if err == nil && st.State == 'T' {
			return st
		}
		if ws, done := fz.Exit(time.Millisecond); done {
			t.Fatalf("freeze exited (%v) before it paused at its step:\n%s", ws, fz.Stderr())
		}
		if time.Now().After(end) {
			t.Fatalf("freeze did not pause at its step in %v (state %c, %v):\n%s", within, st.State, err, fz.Stderr())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// treeAtCap starts a tree chain through the harness, capped at cap (a
// literal at the caller) and forking every interval, waits until it
// fills its cap, and removes at cleanup the group a freeze run may have
// left for it.
func treeAtCap(t *testing.T, cap int, interval time.Duration) *containtest.Chain {
	t.Helper()
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Tree, Cap: cap, HopCap: 1000000, Timeout: 300 * time.Second, Interval: interval})
	if n := c.WaitPopulation(cap, 30*time.Second); n != cap {
		t.Fatalf("chain reached %d of %d", n, cap)
	}
	runtest.RemoveAtCleanup(t, c.Path)
	return c
}
