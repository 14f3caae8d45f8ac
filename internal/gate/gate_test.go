package gate

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/containtest"
	"freeze/internal/exefile"
	"freeze/internal/proc"
	"freeze/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(containtest.Main(m)) }

// testForm is the form the tests ask for: FREEZE_GATE_FORM, as freeze
// reads it (the VM matrix runs the suite once per form on one kernel),
// else auto.
func testForm(t *testing.T) Form {
	t.Helper()
	w := os.Getenv("FREEZE_GATE_FORM")
	if w == "" {
		return FormAuto
	}
	f, err := ParseForm(w)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// attach loads and attaches a gate for files, exempting the test and its
// ancestors as freeze exempts itself, and detaches it at cleanup. It
// checks that nothing of it is left loaded after Close.
func attach(t *testing.T, files ...File) *Gate {
	t.Helper()
	return attachConfig(t, Config{Files: files, Form: testForm(t)})
}

func attachConfig(t *testing.T, c Config) *Gate {
	t.Helper()
	testenv.RequireRoot(t, "loading BPF programs")
	c.Exempt = Exempt(proc.Default)
	g, err := Load(c)
	if err != nil {
		testenv.GateMissing(t, Explain(err))
	}
	// Lineage, exec, and the form's: one program (stopping) or two
	// (refusing, with the stop before them where it loads); the identity
	// reader where it loads.
	want := 2 + len(g.Form.programs())
	if g.Form.Refuses() && g.stop != nil {
		want++
	}
	if g.ident != nil {
		want++
	}
	if ids := g.ProgramIDs(); len(ids) != want {
		t.Fatalf("program ids %v, want %d (form %s)", ids, want, g.Form)
	}
	if err := g.Attach(); err != nil {
		g.Close()
		t.Fatalf("attach: %v", err)
	}
	g.LoadExtras()
	ids := g.ProgramIDs()
	t.Logf("gate: form %s, %d programs, missing %v", g.Form, len(ids), g.Missing)
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

func fileOf(t *testing.T, path string) File {
	t.Helper()
	f, err := proc.StatFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return File{Path: path, Stat: f}
}

// The waits below are 60 s: a process of a spinning chain preempted in
// the middle of a fork (copying its address space) returns to be stopped
// only when it is scheduled again, and in an emulated VM whose host is
// busy that took over 10 s for 81 of 300 (seen once in CI). Without the
// gate they would never stop, so the bound is loose, not weak.

// held waits until the gate holds every process of c, and returns them:
// each stopped (state T), under either form (the refusing form stops the
// caller of a refused fork too).
func held(t *testing.T, g *Gate, c *containtest.Chain, within time.Duration) []int {
	t.Helper()
	return waitStopped(t, c, within)
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
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Bomb, Cap: 300, HopCap: 1000000, Timeout: 300 * time.Second})
	decoy := containtest.Start(t, containtest.Spec{Shape: containtest.Bomb, Cap: 50, HopCap: 1000000, Timeout: 300 * time.Second, Name: "chain-2", Dir: c.Dir})
	if n := c.WaitPopulation(300, 90*time.Second); n < 300 {
		t.Fatalf("chain reached %d processes, want 300", n)
	}
	if n := decoy.WaitPopulation(50, 90*time.Second); n < 50 {
		t.Fatalf("decoy reached %d processes, want 50", n)
	}
	g := attach(t, fileOf(t, c.Path))
	pids := held(t, g, c, 60*time.Second)

	// Held, the chain no longer gets past the gate: its fork attempts stop at the
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
	if cnt.Forks() == 0 {
		t.Errorf("the gate counted no stopped or refused forks: %+v", cnt)
	}
	// Held for good, in every form: continued, as someone might a stopped
	// chain, each process tries again and is stopped again (the kernel
	// restarts a fork that a pending stop interrupted, so in the refusing
	// form too the stop, attached first, takes nearly every retry), and
	// the chain does not grow. In the refusing form, its programs are
	// loaded and attached beside the stop (auto loads them in the
	// background; Attach waits for them).
	if g.Form.Refuses() {
		// Lineage, exec, the stop, and the form's own.
		if want := 3 + len(g.Form.programs()); len(g.core) != want || len(g.links) != want {
			t.Errorf("form %s: %d programs loaded and %d attached of the gate's core, want %d: the refusal is not in place", g.Form, len(g.core), len(g.links), want)
		}
	}
	for _, pid := range pids {
		unix.Kill(pid, unix.SIGCONT)
	}
	time.Sleep(300 * time.Millisecond)
	if now := c.Survivors(); !slices.Equal(now, pids) {
		t.Errorf("the continued chain changed: %d processes, then %d", len(pids), len(now))
	}
	waitStopped(t, c, 30*time.Second)
	// The counts once every process is stopped again: the exempt test's
	// own fork below must not move them.
	time.Sleep(100 * time.Millisecond)
	if cnt, err = g.Counters(); err != nil {
		t.Fatal(err)
	}
	t.Logf("chain: %d held (form %s); gate: %+v", len(pids), g.Form, cnt)

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
	if after, _ := g.Counters(); after.Forks() != cnt.Forks() {
		t.Errorf("the exempt test's fork was counted by the gate (%d, then %d)", cnt.Forks(), after.Forks())
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
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Name: "alt-a", Cap: 20, HopCap: 1000000, Timeout: 300 * time.Second,
		Command: []string{"/bin/sh", "-c", script}})
	g := attach(t, fileOf(t, c.Path))
	release(t, fifo)
	if g.Form.Refuses() {
		// Refused, the exec fails (EACCES) and the shell is stopped
		// still running its own file: nothing ever runs the other one.
		refusedExec(t, g, c, other, func(c Counters) uint64 { return c.ExecsRefused })
		waitStopped(t, c, 60*time.Second)
		return
	}

	pids := waitStopped(t, c, 60*time.Second)
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
	waitStopped(t, c, 60*time.Second)
	if n := len(c.Survivors()); n != 1 {
		t.Errorf("the chain has %d processes: a fork got through", n)
	}
}

// refusedExec checks, under the refusing form, that the exec the test
// set up was refused (counted by which) and that nothing runs file: the
// caller goes on in its own file (a shell whose exec failed exits).
func refusedExec(t *testing.T, g *Gate, c *containtest.Chain, file string, which func(Counters) uint64) {
	t.Helper()
	end := time.Now().Add(10 * time.Second)
	for {
		cnt, _ := g.Counters()
		if which(cnt) >= 1 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("no exec refused in 10s: %+v", cnt)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	for _, pid := range c.Survivors() {
		if exe, _, _ := proc.Default.ExePath(pid); exe == file {
			t.Errorf("pid %d runs %s: the exec got through the refusing gate", pid, file)
		}
	}
	if cnt, _ := g.Counters(); which(cnt) != 1 {
		t.Errorf("counters %+v: want the one exec refused", cnt)
	}
}

// TestGateStopsAnExecOfTheTarget: whoever execs a target file is stopped
// before its first instruction, and then gated.
func TestGateStopsAnExecOfTheTarget(t *testing.T) {
	fifo, target := shellAndSignal(t, "target")
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Name: "launcher", Cap: 20, HopCap: 1000000, Timeout: 300 * time.Second,
		Command: []string{"/bin/sh", "-c", "read x < " + fifo + "; exec " + target + " -c 'while :; do /bin/true; done'"}})
	g := attach(t, fileOf(t, target))
	release(t, fifo)
	if g.Form.Refuses() {
		refusedExec(t, g, c, target, func(c Counters) uint64 { return c.TargetExecs })
		if cnt, _ := g.Counters(); cnt.Execs() != 0 {
			t.Errorf("counters %+v: the launcher is not of the chain, its exec is not the chain's", cnt)
		}
		return
	}
	pids := waitStopped(t, c, 60*time.Second)
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
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Name: "loop", Cap: 20, HopCap: 1000000, Timeout: 300 * time.Second, Command: loop})
	decoy := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Name: "loop", Cap: 20, HopCap: 1000000, Timeout: 300 * time.Second, Command: loop, Dir: t.TempDir()})
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
	// The marked leader stops at its next fork. A child forked just
	// before the mark was never gated (lineage marks only children born
	// after), so the test waits on the leader alone (seen once in a VM:
	// such a child still running /bin/true 10 s later, under TCG).
	// Or the mark landed while a fork of the leader was past the gate's
	// check: the child, marked by lineage, is stopped at its exec, and
	// the leader waits for it for good (seen once in the 6.12 VM, on
	// a06b417: the leader in state S 30 s on). Either way the leader
	// forks no more.
	end := time.Now().Add(30 * time.Second)
	for !heldOrWaitingOnHeld(c.Leader) {
		if time.Now().After(end) {
			t.Fatalf("the marked leader %d is not stopped 30s after its mark (state %q), nor waiting on a stopped child", c.Leader, states([]int{c.Leader})[c.Leader])
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s := states([]int{decoy.Leader})[decoy.Leader]; s == 'T' || s == 0 {
		t.Errorf("the unmarked decoy is stopped or gone (state %q)", s)
	}
	cnt, _ := g.Counters()
	if cnt.Forks()+cnt.Execs() == 0 {
		t.Errorf("counters %+v: no fork or exec stopped", cnt)
	}
}

// heldOrWaitingOnHeld reports whether pid is stopped (T), or sleeps with
// a child of its own that is stopped.
func heldOrWaitingOnHeld(pid int) bool {
	st := states([]int{pid})[pid]
	if st == 'T' {
		return true
	}
	if st != 'S' {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return false
	}
	for _, f := range strings.Fields(string(b)) {
		if child, err := strconv.Atoi(f); err == nil && states([]int{child})[child] == 'T' {
			return true
		}
	}
	return false
}

// With Kill, the chain kills itself at its next fork: a spinning chain
// empties with no signal from anyone else, and its decoy copy lives on.
func TestGateKillEmptiesASpinningChain(t *testing.T) {
	testenv.RequireLive(t, "loading BPF programs")
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Bomb, Cap: 300, HopCap: 1000000, Timeout: 300 * time.Second})
	decoy := containtest.Start(t, containtest.Spec{Shape: containtest.Bomb, Cap: 50, HopCap: 1000000, Timeout: 300 * time.Second, Name: "chain-2", Dir: c.Dir})
	if n := c.WaitPopulation(300, 90*time.Second); n < 300 {
		t.Fatalf("chain reached %d processes, want 300", n)
	}
	if n := decoy.WaitPopulation(50, 90*time.Second); n < 50 {
		t.Fatalf("decoy reached %d processes, want 50", n)
	}
	// The killing action is the stopping form's.
	g, err := Load(Config{Files: []File{fileOf(t, c.Path)}, Exempt: Exempt(proc.Default), Kill: true, Form: FormStop})
	if err != nil {
		testenv.GateMissing(t, Explain(err))
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
	testenv.RequireLive(t, "loading BPF programs")
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Tree, Cap: 300, HopCap: 1000000, Timeout: 300 * time.Second})
	decoy := containtest.Start(t, containtest.Spec{Shape: containtest.Tree, Cap: 20, HopCap: 1000000, Timeout: 300 * time.Second, Name: "chain-2", Dir: c.Dir})
	c.WaitPopulation(300, 90*time.Second)
	decoy.WaitPopulation(20, 90*time.Second)
	g := attach(t, fileOf(t, c.Path))
	if !g.CanKill() {
		t.Skipf("the kill iterator does not load here: %v", g.Missing)
	}
	pids := c.Survivors()
	live := len(pids)
	n, err := g.KillAll()
	if err != nil {
		t.Fatalf("the kill iterator loaded but did not run: %v", err)
	}
	// At least the chain as it was: more when forks that were past the
	// gate's check at attach (preempted mid-fork, seen under the suite's
	// load: 305 and 323 of 300) complete as the killed free their slots;
	// the iterator reaches their higher pids later in the same pass.
	// Killing what is not the chain is what the decoy's check below
	// catches.
	// Seen once in a suite (299 of 300), before the iterator counted a
	// process it signalled but could not note (its task storage not
	// created). Should it happen again, the message says what the count
	// missed: unnoted kills, and which of the chain was not dying.
	if n < live {
		cnt, _ := g.Counters()
		time.Sleep(100 * time.Millisecond)
		t.Errorf("KillAll signalled %d, fewer than the chain's %d (unnoted kills %d; 100 ms later, of the chain: %s)", n, live, cnt.KillUnnoted, statesOf(pids))
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

// An --arg chain is held by its file, decoys included, until freeze has
// read every argv: then the chain is held by mark, the file forgotten,
// and the decoy freed. Freed, the decoy is continued and forks again;
// the marked chain stays stopped; a process that starts the file after
// Forget is not gated.
func TestFreeLetsADecoyOfTheFileGoAndForgetEndsTheFile(t *testing.T) {
	loop := "while :; do /bin/true; done"
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Name: "sh", Cap: 20, HopCap: 1000000, Timeout: 300 * time.Second,
		Command: []string{"/bin/sh", "-c", loop}})
	decoy := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Name: "launcher", Cap: 20, HopCap: 1000000, Timeout: 300 * time.Second,
		Command: []string{"/bin/sh", "-c", "exec " + c.Path + " -c '" + loop + "'"}})
	// A process of the chain's file that never forks: the stop never
	// holds it, the mark iterator must mark it.
	fifo := filepath.Join(t.TempDir(), "never")
	if err := mkfifo(fifo); err != nil {
		t.Fatal(err)
	}
	idle := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Name: "idler", Cap: 20, HopCap: 1000000, Timeout: 300 * time.Second,
		Command: []string{"/bin/sh", "-c", "exec " + c.Path + " -c 'read x < " + fifo + "'"}})
	// The decoy's and the idler's exec of the file must be done before
	// the gate, or the gate stops them there as a new hop of the chain.
	end := time.Now().Add(30 * time.Second)
	for {
		exe, _, _ := proc.Default.ExePath(decoy.Leader)
		idleExe, _, _ := proc.Default.ExePath(idle.Leader)
		if exe == c.Path && idleExe == c.Path {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the decoy and the idler did not exec the chain's file in 30 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	g := attach(t, fileOf(t, c.Path))
	if !g.Stops() {
		t.Skip("this gate has no stop (tp_btf/sys_enter): an --arg chain is gated by mark alone")
	}
	end = time.Now().Add(60 * time.Second)
	for !heldOrWaitingOnHeld(c.Leader) || !heldOrWaitingOnHeld(decoy.Leader) {
		if time.Now().After(end) {
			t.Fatalf("the file's processes are not both held 60 s after the gate attached: %v", states([]int{c.Leader, decoy.Leader}))
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The decoy and what it started (a /bin/true born after the attach
	// is marked by lineage and stopped at its exec) go first, as freeze
	// lets them go: then what the gate holds by file is the chain.
	// The leader first, as freeze frees a decoy before what it started:
	// a child it forks once freed is born freed. What it forked before
	// (a fork in flight when the gate attached completes later) is found
	// by looking again, as freeze scans again while the gate's lineage
	// count moves.
	var heldFor time.Duration
	freed := map[int]bool{}
	for round := range 5 {
		if round > 0 {
			time.Sleep(20 * time.Millisecond)
		}
		for _, pid := range append([]int{decoy.Leader}, decoy.Survivors()...) {
			if freed[pid] {
				continue
			}
			freed[pid] = true
			st, err := proc.Default.ReadStat(pid)
			if err != nil {
				continue // gone: a /bin/true continued in an earlier round
			}
			h, err := proc.Default.Open(st.ID())
			if err != nil {
				continue
			}
			defer h.Close()
			if pid == decoy.Leader && !g.Gated(h) && states([]int{pid})[pid] == 'T' {
				t.Errorf("the stopped decoy is not marked in the gate")
			}
			d, err := g.Free(h)
			if err != nil && !errors.Is(err, proc.ErrGone) {
				t.Fatal(err)
			}
			heldFor = max(heldFor, d)
		}
	}
	if heldFor <= 0 {
		t.Errorf("Free reports no time held for a decoy the gate stopped")
	}
	// The chain's processes of the file, marked in one pass; where the
	// mark iterator is missing, one by one.
	if n, err := g.MarkByFile(); errors.Is(err, ErrMissing) {
		for _, pid := range c.Survivors() {
			if err := g.Mark(pin(t, pid)); err != nil {
				t.Fatal(err)
			}
		}
	} else if err != nil {
		t.Fatal(err)
	} else if h := pin(t, c.Leader); !g.Gated(h) || !g.Gated(pin(t, idle.Leader)) || n < 1 {
		// The leader, held by the stop, was marked then; the idler only
		// by the iterator.
		t.Fatalf("the mark iterator marked %d; the chain's leader marked %v, the idler %v", n, g.Gated(h), g.Gated(pin(t, idle.Leader)))
	}
	if err := g.Forget(); err != nil {
		t.Fatal(err)
	}
	// Freed, the decoy forks again: its children keep changing.
	seen := map[int]bool{}
	for _, pid := range decoy.Survivors() {
		seen[pid] = true
	}
	end = time.Now().Add(30 * time.Second)
	for fresh := 0; fresh < 5; {
		for _, pid := range decoy.Survivors() {
			if !seen[pid] {
				seen[pid] = true
				fresh++
			}
		}
		if time.Now().After(end) {
			var who []string
			for _, pid := range decoy.Survivors() {
				st, _ := proc.Default.ReadStat(pid)
				exe, _, _ := proc.Default.ExePath(pid)
				h := pin(t, pid)
				var fr uint32
				var at uint64
				fe := g.ld.maps["freed"].Lookup(uint32(h.FD()), &fr)
				g.ld.maps["stopped_at"].Lookup(uint32(h.FD()), &at)
				who = append(who, fmt.Sprintf("%d (ppid %d, %c, %s, seen %v, gated %v, freed %v, stopped_at %d)", pid, st.PPID, st.State, exe, seen[pid], g.Gated(h), fe == nil, at))
			}
			t.Fatalf("the freed decoy started %d processes in 30 s: still held; its group: %s; freed %v", fresh, strings.Join(who, "; "), freed)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !heldOrWaitingOnHeld(c.Leader) {
		t.Errorf("the marked chain runs again after the decoy was freed: %v", states([]int{c.Leader}))
	}
	// The file is forgotten: a new process of it runs free.
	after := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Name: "late", Cap: 20, HopCap: 1000000, Timeout: 300 * time.Second,
		Command: []string{"/bin/sh", "-c", "exec " + c.Path + " -c 'for i in 1 2 3 4 5; do /bin/true; done'"}})
	if ws, ok := after.Exit(30 * time.Second); !ok || ws.ExitStatus() != 0 {
		t.Fatalf("a process of the forgotten file did not run to its end: exit %d, finished %v", ws.ExitStatus(), ok)
	}
}

// statesOf says the state of each pid still in /proc, and how many are
// gone: what a count that fell short missed.
func statesOf(pids []int) string {
	var alive []string
	for _, pid := range pids {
		if st, err := proc.Default.ReadStat(pid); err == nil {
			alive = append(alive, fmt.Sprintf("%d %c", pid, st.State))
		}
	}
	return fmt.Sprintf("%d gone, alive: %v", len(pids)-len(alive), alive)
}
