package gate

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"freeze/internal/containtest"
	"freeze/internal/exefile"
	"freeze/internal/proc"
)

func TestMain(m *testing.M) { os.Exit(containtest.Main(m)) }

// attach loads and attaches a gate for files, exempting the test and its
// ancestors as freeze exempts itself, and detaches it at cleanup. It
// checks that nothing of it is left loaded after Close.
func attach(t *testing.T, files ...proc.File) *Gate {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: loading BPF programs")
	}
	g, err := Load(Config{Files: files, Exempt: Exempt(proc.Default)})
	if err != nil {
		t.Skipf("the gate does not load here: %s", Explain(err))
	}
	ids := g.ProgramIDs()
	if len(ids) != 3 {
		t.Fatalf("program ids %v, want 3", ids)
	}
	if err := g.Attach(); err != nil {
		g.Close()
		t.Fatalf("attach: %v", err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		if left := StillLoaded(ids, 5*time.Second); len(left) > 0 {
			t.Errorf("programs %v still loaded 5s after Close", left)
		}
	})
	return g
}

func fileOf(t *testing.T, path string) proc.File {
	t.Helper()
	f, err := proc.StatFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// states reads the state of each pid; gone ones are left out.
func states(pids []int) map[int]byte {
	out := map[int]byte{}
	for _, pid := range pids {
		if st, err := proc.Default.ReadStat(pid); err == nil {
			out[pid] = st.State
		}
	}
	return out
}

// waitStopped waits until every pid of c is stopped (state T), and
// returns the pids.
func waitStopped(t *testing.T, c *containtest.Chain, within time.Duration) []int {
	t.Helper()
	end := time.Now().Add(within)
	for {
		pids := c.Survivors()
		running := 0
		for _, s := range states(pids) {
			if s != 'T' {
				running++
			}
		}
		if running == 0 && len(pids) > 0 {
			return pids
		}
		if time.Now().After(end) {
			t.Fatalf("%d of the chain's %d processes are not stopped %v after the gate was attached", running, len(pids), within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestGateStopsASpinningChainAndNotItsDecoy(t *testing.T) {
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Bomb, Cap: 300, HopCap: 1000000, Timeout: 120 * time.Second})
	decoy := containtest.Start(t, containtest.Spec{Shape: containtest.Bomb, Cap: 50, HopCap: 1000000, Timeout: 120 * time.Second, Name: "chain-2", Dir: c.Dir})
	if n := c.WaitPopulation(300, 30*time.Second); n < 300 {
		t.Fatalf("chain reached %d processes, want 300", n)
	}
	if n := decoy.WaitPopulation(50, 30*time.Second); n < 50 {
		t.Fatalf("decoy reached %d processes, want 50", n)
	}
	g := attach(t, fileOf(t, c.Path))
	pids := waitStopped(t, c, 10*time.Second)

	// Stopped, the chain no longer tries: its fork attempts stop at the
	// gate before the pids charge, so pids.events stops rising, and its
	// population stays the same set.
	failed := c.ForkFailures()
	dfailed := decoy.ForkFailures()
	time.Sleep(300 * time.Millisecond)
	if now := c.ForkFailures(); now != failed {
		t.Errorf("the chain's refused forks rose from %d to %d with the gate on", failed, now)
	}
	if now := c.Survivors(); !slices.Equal(now, pids) {
		t.Errorf("the chain changed with the gate on: %d processes, then %d", len(pids), len(now))
	}
	cnt, err := g.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if cnt.ForksStopped == 0 {
		t.Errorf("the gate counted no stopped forks: %+v", cnt)
	}
	t.Logf("chain: %d stopped; gate: %+v", len(pids), cnt)

	// The decoy, the same bytes at another path, keeps forking at its
	// cap, and nothing of it is stopped.
	if now := decoy.ForkFailures(); now <= dfailed {
		t.Errorf("the decoy's fork attempts stopped (%d refused by its cap, then %d): the gate reached a copy at another path", dfailed, now)
	}
	for pid, s := range states(decoy.Survivors()) {
		if s == 'T' {
			t.Errorf("decoy pid %d is stopped", pid)
		}
	}
	// And the test itself, which is exempt as freeze's shell is, forks.
	if err := exec.Command("/bin/true").Run(); err != nil {
		t.Errorf("the exempt test process could not fork: %v", err)
	}
	if after, _ := g.Counters(); after.ForksStopped != cnt.ForksStopped {
		t.Errorf("the exempt test's fork was counted by the gate (%d, then %d)", cnt.ForksStopped, after.ForksStopped)
	}
}

// shellAndSignal copies /bin/sh into the test's directory as name, and
// makes a FIFO there that a chain's leader can wait on with the read
// builtin, without forking, until release.
func shellAndSignal(t *testing.T, name string) (fifo, sh string) {
	t.Helper()
	dir := t.TempDir()
	fifo, sh = filepath.Join(dir, "go"), filepath.Join(dir, name)
	if err := exefile.Copy("/bin/sh", sh); err != nil {
		t.Fatal(err)
	}
	if err := mkfifo(fifo); err != nil {
		t.Fatal(err)
	}
	return fifo, sh
}

// release lets the leader waiting on fifo go on.
func release(t *testing.T, fifo string) {
	t.Helper()
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.WriteString("go\n")
	w.Close()
}

// TestGateFollowsAChainThatExecsAnotherBinary: a process of the target
// that execs another file is stopped at the exec, and stays gated as the
// other file: continued, it is stopped again at its first fork.
func TestGateFollowsAChainThatExecsAnotherBinary(t *testing.T) {
	fifo, other := shellAndSignal(t, "alt-b")
	// read is a builtin: the leader waits without forking, then execs
	// the other copy, which forks in a loop.
	script := "read x < " + fifo + "; exec " + other + " -c 'while :; do /bin/true; done'"
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Name: "alt-a", Cap: 20, HopCap: 1000000, Timeout: 60 * time.Second,
		Command: []string{"/bin/sh", "-c", script}})
	g := attach(t, fileOf(t, c.Path))
	release(t, fifo)

	pids := waitStopped(t, c, 10*time.Second)
	if len(pids) != 1 {
		t.Fatalf("the chain has %d processes, want its leader alone: %v", len(pids), pids)
	}
	exe, _, err := proc.Default.ExePath(pids[0])
	if err != nil || exe != other {
		t.Fatalf("the leader runs %q (%v), want %s: it was stopped before its exec", exe, err, other)
	}
	cnt, _ := g.Counters()
	if cnt.ExecsStopped != 1 {
		t.Errorf("execs stopped: %d, want 1", cnt.ExecsStopped)
	}
	// Continue it: running alt-b, a file the gate does not know, it is
	// still gated through its mark and stops again at its first fork.
	if err := kill(pids[0], sigcont); err != nil {
		t.Fatal(err)
	}
	end := time.Now().Add(10 * time.Second)
	for {
		after, _ := g.Counters()
		if after.ForksStopped > cnt.ForksStopped {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the continued process forked without being stopped: %+v", after)
		}
		time.Sleep(10 * time.Millisecond)
	}
	waitStopped(t, c, 10*time.Second)
	if n := len(c.Survivors()); n != 1 {
		t.Errorf("the chain has %d processes: a fork got through", n)
	}
}

// TestGateStopsAnExecOfTheTarget: whoever execs a target file is stopped
// before its first instruction, and then gated.
func TestGateStopsAnExecOfTheTarget(t *testing.T) {
	fifo, target := shellAndSignal(t, "target")
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Name: "launcher", Cap: 20, HopCap: 1000000, Timeout: 60 * time.Second,
		Command: []string{"/bin/sh", "-c", "read x < " + fifo + "; exec " + target + " -c 'while :; do /bin/true; done'"}})
	g := attach(t, fileOf(t, target))
	release(t, fifo)
	pids := waitStopped(t, c, 10*time.Second)
	cnt, _ := g.Counters()
	if cnt.TargetExecs != 1 || cnt.ExecsStopped != 0 {
		t.Errorf("counters %+v: want one exec of the target, by a process not gated before", cnt)
	}
	if exe, _, _ := proc.Default.ExePath(pids[0]); exe != target || len(pids) != 1 {
		t.Errorf("chain %v runs %q, want the target alone", pids, exe)
	}
}

// TestMarkGatesAProcessByPid is --arg's gate: no file is known, and a
// process marked by pidfd is stopped at its next fork; an identical
// process that is not marked keeps forking.
func TestMarkGatesAProcessByPid(t *testing.T) {
	loop := []string{"/bin/sh", "-c", "while :; do /bin/true; done"}
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Name: "loop", Cap: 20, HopCap: 1000000, Timeout: 60 * time.Second, Command: loop})
	decoy := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Name: "loop", Cap: 20, HopCap: 1000000, Timeout: 60 * time.Second, Command: loop, Dir: t.TempDir()})
	g := attach(t)
	st, err := proc.Default.ReadStat(c.Leader)
	if err != nil {
		t.Fatal(err)
	}
	h, err := proc.Default.Open(st.ID())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := g.Mark(h); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, c, 10*time.Second)
	if s := states([]int{decoy.Leader})[decoy.Leader]; s == 'T' {
		t.Errorf("the unmarked decoy is stopped")
	}
	cnt, _ := g.Counters()
	if cnt.ForksStopped == 0 {
		t.Errorf("counters %+v: no fork stopped", cnt)
	}
}

// With Kill, the chain kills itself at its next fork: a spinning chain
// empties with no signal from anyone else, and its decoy copy lives on.
func TestGateKillEmptiesASpinningChain(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: loading BPF programs")
	}
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Bomb, Cap: 300, HopCap: 1000000, Timeout: 120 * time.Second})
	decoy := containtest.Start(t, containtest.Spec{Shape: containtest.Bomb, Cap: 50, HopCap: 1000000, Timeout: 120 * time.Second, Name: "chain-2", Dir: c.Dir})
	if n := c.WaitPopulation(300, 30*time.Second); n < 300 {
		t.Fatalf("chain reached %d processes, want 300", n)
	}
	if n := decoy.WaitPopulation(50, 30*time.Second); n < 50 {
		t.Fatalf("decoy reached %d processes, want 50", n)
	}
	g, err := Load(Config{Files: []proc.File{fileOf(t, c.Path)}, Exempt: Exempt(proc.Default), Kill: true})
	if err != nil {
		t.Skipf("the gate does not load here: %s", Explain(err))
	}
	defer g.Close()
	if err := g.Attach(); err != nil {
		t.Fatal(err)
	}
	end := time.Now().Add(20 * time.Second)
	for len(c.Survivors()) > 0 {
		if time.Now().After(end) {
			t.Fatalf("%d processes of the chain alive 20s after a killing gate was attached", len(c.Survivors()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	cnt, _ := g.Counters()
	if cnt.ForksStopped < 300 {
		t.Errorf("counters %+v: fewer refused forks than the chain's 300 processes", cnt)
	}
	if n := len(decoy.Survivors()); n != 50 {
		t.Errorf("the decoy has %d processes, want its 50", n)
	}
}

// KillAll kills the chain in one pass in the kernel: a tree of 300
// empties, its decoy copy lives, and the count is the chain's.
func TestKillAllKillsTheChainAndNotItsDecoy(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: loading BPF programs")
	}
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Tree, Cap: 300, HopCap: 1000000, Timeout: 120 * time.Second})
	decoy := containtest.Start(t, containtest.Spec{Shape: containtest.Tree, Cap: 20, HopCap: 1000000, Timeout: 120 * time.Second, Name: "chain-2", Dir: c.Dir})
	c.WaitPopulation(300, 30*time.Second)
	decoy.WaitPopulation(20, 30*time.Second)
	g := attach(t, fileOf(t, c.Path))
	live := len(c.Survivors())
	n, err := g.KillAll()
	if err != nil {
		t.Skipf("the kill iterator does not run here: %v", err)
	}
	// At least the chain as it was: more when forks that were past the
	// gate's check at attach (preempted mid-fork, seen under the suite's
	// load: 305 and 323 of 300) complete as the killed free their slots;
	// the iterator reaches their higher pids later in the same pass.
	// Killing what is not the chain is what the decoy's check below
	// catches.
	if n < live {
		t.Errorf("KillAll signalled %d, fewer than the chain's %d", n, live)
	}
	// One pass misses a child whose fork was past the gate when it was
	// attached and that the iterator had passed by when it appeared (seen
	// once under load: 3 of 300); the kill rounds call KillAll again
	// while anything is alive, and so does this, at most twice more.
	end := time.Now().Add(20 * time.Second)
	passes := 1
	for len(c.Survivors()) > 0 {
		if time.Now().After(end) {
			t.Fatalf("%d processes of the chain alive 20s after %d passes of KillAll", len(c.Survivors()), passes)
		}
		time.Sleep(10 * time.Millisecond)
		if passes < 3 && time.Now().After(end.Add(-15*time.Second)) {
			if _, err := g.KillAll(); err != nil {
				t.Fatal(err)
			}
			passes++
			end = time.Now().Add(15 * time.Second)
		}
	}
	if n := len(decoy.Survivors()); n != 20 {
		t.Errorf("the decoy has %d processes, want its 20", n)
	}
}
