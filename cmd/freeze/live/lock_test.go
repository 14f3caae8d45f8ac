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

// Two runs against one chain do not fight: while the first is mid-run
// (held there with SIGSTOP), a second is refused with exit 3 and told the
// first's pid and start time, and changes nothing. When the first dies
// without releasing the lock (SIGKILL), the next run takes the stale
// lock over, says so, and finishes the job.
func TestConcurrentRunsAndAStaleLock(t *testing.T) {
	testenv.RequireLive(t, "the chain is capped by a pids cgroup")
	bin := buildFreeze(t)
	chain := treeAtCap(t, 300, 100*time.Millisecond)
	run := func(name string) *containtest.Chain {
		return containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 100, HopCap: 1, Timeout: 90 * time.Second,
			Command: []string{bin, "--path", chain.Path, "--timeline", filepath.Join(t.TempDir(), name+".jsonl")}})
	}
	first := run("first")
	end := time.Now().Add(30 * time.Second)
	for !strings.Contains(first.Stderr(), "1/4 match") {
		if time.Now().After(end) {
			t.Fatalf("the first run did not reach its match step:\n%s", first.Stderr())
		}
		time.Sleep(time.Millisecond)
	}
	if err := unix.Kill(first.Leader, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	st, err := proc.Default.ReadStat(first.Leader)
	if err != nil {
		t.Fatal(err)
	}
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
