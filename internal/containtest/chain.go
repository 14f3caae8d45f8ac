package containtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"freeze/internal/priority"
	"freeze/internal/testenv"
)

// Shape is the form of a runaway chain; see fixture/chain.c.
type Shape string

const (
	Tree   Shape = "tree"   // every process keeps forking
	Line   Shape = "line"   // each hop execs the next one and waits for it
	Churn  Shape = "churn"  // each process starts two children and exits
	Bomb   Shape = "bomb"   // tree with no pause, spinning at the cap
	Escape Shape = "escape" // leaves a grandchild in its own session
	Run    Shape = "run"    // runs Spec.Command, capped like any chain
)

// killDeadline bounds how long a kill may take to empty a chain before the
// harness reports a leak. An idle chain of 12,000 empties in about 1.5 s
// here, but 3,000 processes spinning on fork at their cap took over 15 s
// to die (every exit and every fork of one binary takes the same file's
// mapping lock), and a harness that gives up early leaks its cgroup.
const killDeadline = 60 * time.Second

// Spec describes one chain. Cap, HopCap and Timeout are required and must
// be literals in the test: never values read from the code under test.
type Spec struct {
	Shape    Shape
	Cap      int           // pids.max of the chain's own cgroup
	HopCap   int           // the fixture refuses to start hop HopCap (exit 42)
	Timeout  time.Duration // the harness kills the chain when it passes
	Interval time.Duration // pause between forks; 0 means 100ms (bomb: none)
	Exec     bool          // children exec the binary again (tree, churn)
	Name     string        // file name of the copy; default "chain"
	Dir      string        // the test cache to copy into; default a new temp dir
	// Command, with Shape Run: a program and its arguments. The program
	// is copied into the test cache as Name and run from there, after the
	// gate, inside the capped cgroup; Path is then the copy.
	Command []string
	Env     []string // added to the test process's environment
	// V2Group also puts the leader, before the gate opens, into a cgroup
	// v2 group of its own, so that group holds exactly the chain: a
	// benchmark's floor is cgroup.kill of it. Skips where there is no v2.
	V2Group bool
	// Lifted starts the program of a Shape Run at SCHED_RR 1, as from a
	// shell lifted with 'chrt -r -p 1 $$' (the runbook's advice), so a
	// test can watch freeze run lifted from its first instruction. Never
	// for a chain: Start refuses it for any other shape.
	Lifted bool
	// Reap, with Shape Run: the program is a runaway of its own (an
	// interpreter's fork bomb), and the reaper reaps the zombies it
	// inherits by its Name, as it does a fixture's. Off by default: a
	// Run program's name may be one a test also runs and waits for
	// itself (freeze, sh), whose zombie the reaper would take from it.
	// Give such a chain a name no test runs (the bench's "pybomb"): a
	// python fork bomb of 2,000 left its zombies unreaped, and 16 runs of
	// it exhausted pid_max.
	Reap bool
	// Held, with Shape Run: Start returns with the program installed,
	// capped and started, but held at its gate; Release lets it run. A
	// test sets it up before the chain it acts on has grown: at ordinary
	// priority beside a churning chain of 3,000, the copy and the fork
	// took the test 20 s and more, and Release is one write.
	Held bool
}

// A Chain is a running fixture under the harness's control.
type Chain struct {
	Path   string // the copy that runs: the exact path tests target
	Dir    string // the disposable test cache holding the copy
	Leader int

	t        testing.TB
	cap      *pidsCap
	stdout   string
	stderr   string
	exited   chan unix.WaitStatus
	status   unix.WaitStatus
	reaped   atomic.Bool
	timedOut atomic.Bool
	timer    *time.Timer
	killMu   sync.Mutex
	// Control tests only: leave out one mechanism to prove the others.
	noCgroup atomic.Bool // the cgroup sweep (and pids.max = 0)
	noDir    atomic.Bool // the sweep of the test cache

	v2dir string // with Spec.V2Group

	gate *os.File // the held gate's write end (Spec.Held), until Release
}

// V2Dir is the chain's own cgroup v2 group (Spec.V2Group), or "".
func (c *Chain) V2Dir() string { return c.v2dir }

// Start copies the fixture into the test's cache, makes its capped cgroup,
// and starts it there. It skips the test when no cap can be put in place.
// It is long on purpose: the safety steps (cap, own process group,
// leader registered with the reaper before it can exit, ordinary
// priority checked, timeout armed, then the gate) read in their order in
// one place.
func Start(t testing.TB, s Spec) *Chain {
	t.Helper()
	testenv.RequireChains(t, "a live chain")
	s = checkSpec(t, s)
	src, err := fixture()
	if err != nil {
		t.Skipf("containtest: %v", err)
	}
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c := &Chain{Path: filepath.Join(s.Dir, s.Name), Dir: s.Dir, t: t, exited: make(chan unix.WaitStatus, 1)}
	leader := c.install(t, s, src)
	rlimit := c.makeCap(t, s)
	gateW := c.launch(t, s, leader)
	c.confine(t, s, rlimit)
	if s.Held {
		c.gate = gateW
		t.Cleanup(func() { gateW.Close() }) // a closed gate: the leader exits
		return c
	}
	defer gateW.Close()
	if _, err := gateW.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	return c
}

// Release lets a program started with Spec.Held run.
func (c *Chain) Release() {
	c.t.Helper()
	if c.gate == nil {
		c.t.Fatal("containtest: Release of a chain that was not started Held")
	}
	_, err := c.gate.Write([]byte{1})
	c.gate.Close()
	c.gate = nil
	if err != nil {
		c.t.Fatal(err)
	}
}

// checkSpec refuses a Spec without its literal bounds and fills in the
// defaults.
func checkSpec(t testing.TB, s Spec) Spec {
	t.Helper()
	reaper.Lock()
	started := reaper.started
	reaper.Unlock()
	if !started {
		t.Fatal("containtest: call os.Exit(containtest.Main(m)) from TestMain before starting chains")
	}
	if s.Cap <= 0 || s.HopCap <= 0 || s.Timeout <= 0 {
		t.Fatal("containtest: Spec needs Cap, HopCap and Timeout, as literals")
	}
	if s.Shape == Run && len(s.Command) == 0 {
		t.Fatal("containtest: Shape Run needs a Command")
	}
	if s.Held && s.Shape != Run {
		t.Fatal("containtest: only a Shape Run program may be Held")
	}
	if s.Lifted && s.Shape != Run {
		t.Fatal("containtest: only a Shape Run program may start lifted, never a runaway chain")
	}
	if s.Name == "" {
		// A name no other test's chain, and no process of the machine's,
		// has: a look-alike line, a census row or a hint that goes by a
		// file's name sees only this chain (a comm keeps 15 bytes).
		s.Name = fmt.Sprintf("chain%d-%d", os.Getpid()%100000, seq.Add(1))
		if s.Shape == Run {
			s.Name = filepath.Base(s.Command[0])
		}
	}
	if s.Dir == "" {
		s.Dir = filepath.Join(t.TempDir(), "cache")
	}
	if s.Interval == 0 {
		s.Interval = 100 * time.Millisecond
	}
	return s
}

// install copies the fixture (and a Run's program) into the chain's
// directory and returns the path the leader starts from.
func (c *Chain) install(t testing.TB, s Spec, src string) string {
	t.Helper()
	leader := c.Path
	if s.Shape == Run {
		// The fixture is the gate; it execs the copy of the program.
		leader = filepath.Join(s.Dir, s.Name+".gate")
		if err := copyExecutable(s.Command[0], c.Path); err != nil {
			t.Fatal(err)
		}
	}
	if err := copyExecutable(src, leader); err != nil {
		t.Fatal(err)
	}
	// Should the test binary die without its cleanups, the sentinel
	// kills what runs these files (each in the test's own directory).
	note("exe", leader)
	if leader != c.Path {
		note("exe", c.Path)
	}
	if s.Shape != Run || s.Reap {
		// Not for a command unless asked (Spec.Reap): its name may be
		// that of a program another test runs and waits for itself.
		registerComm(s.Name)
	}
	return leader
}

// makeCap makes the kernel's cap before anything starts: a pids group
// as root, else the RLIMIT_NPROC it returns for the leader. No cap, no
// chain: the test skips.
func (c *Chain) makeCap(t testing.TB, s Spec) *unix.Rlimit {
	t.Helper()
	if os.Geteuid() == 0 {
		var err error
		c.cap, err = newPidsCap(fmt.Sprintf("containtest-%d-%s-%d", os.Getpid(), s.Name, seq.Add(1)), s.Cap)
		if err != nil {
			t.Skipf("containtest: not running a runaway chain uncapped: %v", err)
		}
		return nil
	}
	// RLIMIT_NPROC counts every process of the user (setrlimit(2)), so
	// the cap sits just above what the user already runs.
	n := userProcesses(os.Getuid())
	return &unix.Rlimit{Cur: uint64(n + s.Cap), Max: uint64(n + s.Cap)}
}

// fixtureArgs are the fixture's words for s.
func (c *Chain) fixtureArgs(s Spec) []string {
	args := []string{"-g", "-s", string(s.Shape), "-i", strconv.FormatInt(s.Interval.Microseconds(), 10),
		"-H", strconv.Itoa(s.HopCap),
		// The fixture's own lifetime: every process dies of SIGALRM a
		// little after the harness's timeout, even if the harness is gone.
		"-D", strconv.FormatInt(time.Now().Add(s.Timeout+30*time.Second).Unix(), 10)}
	if s.Exec {
		args = append(args, "-x")
	}
	if s.Shape == Run {
		args = append(append(args, "--", c.Path), s.Command[1:]...)
	}
	return args
}

// launch starts the leader in its own process group, held at its gate
// (it reads one byte before it does anything), registered with the
// reaper and with the test's cleanup. It returns the gate's write end.
func (c *Chain) launch(t testing.TB, s Spec, leader string) *os.File {
	t.Helper()
	gateR, gateW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer gateR.Close()
	c.stdout = filepath.Join(s.Dir, s.Name+".stdout")
	c.stderr = filepath.Join(s.Dir, s.Name+".stderr")
	outF, err := os.Create(c.stdout)
	if err != nil {
		gateW.Close()
		t.Fatal(err)
	}
	defer outF.Close()
	errF, err := os.Create(c.stderr)
	if err != nil {
		gateW.Close()
		t.Fatal(err)
	}
	defer errF.Close()

	cmd := exec.Command(leader, c.fixtureArgs(s)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = gateR, outF, errF
	cmd.Env = append(os.Environ(), s.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// The reaper, not cmd.Wait, collects the leader: register before it
	// can exit. It cannot exit before the gate opens.
	reaper.Lock()
	// priority.Start: a test process may have lifted itself to real-time
	// priority (as freeze does); a runaway chain must never inherit it.
	start := priority.Start
	if s.Lifted {
		start = startLifted
	}
	if err := start(cmd); err != nil {
		reaper.Unlock()
		gateW.Close()
		t.Fatal(err)
	}
	c.Leader = cmd.Process.Pid
	reaper.leaders[c.Leader] = c.exited
	reaper.Unlock()
	cmd.Process.Release()
	t.Cleanup(c.cleanup)
	return gateW
}

// confine puts the gated leader under its cap (and its v2 group), checks
// it runs at no raised class, and arms the harness's timeout.
func (c *Chain) confine(t testing.TB, s Spec, rlimit *unix.Rlimit) {
	t.Helper()
	var err error
	if c.cap != nil {
		err = c.cap.add(c.Leader)
	} else {
		err = unix.Prlimit(c.Leader, unix.RLIMIT_NPROC, rlimit, nil)
	}
	if err == nil && s.V2Group {
		if c.v2dir, err = newV2Group(fmt.Sprintf("containtest-%d-%s-v2-%d", os.Getpid(), s.Name, seq.Add(1))); err == nil {
			err = os.WriteFile(filepath.Join(c.v2dir, "cgroup.procs"), []byte(strconv.Itoa(c.Leader)), 0)
		}
	}
	if err != nil {
		c.Kill()
		t.Fatalf("containtest: cap the chain: %v", err)
	}
	if pol := policyOf(c.Leader); pol != 0 && !s.Lifted {
		c.Kill()
		t.Fatalf("containtest: the chain's leader starts at scheduling policy %d, not SCHED_OTHER: a runaway chain never runs at a raised class", pol)
	}
	c.timer = time.AfterFunc(s.Timeout, func() {
		c.timedOut.Store(true)
		c.Kill()
	})
}

var seq atomic.Int64

// Population counts the live (non-zombie) members of the chain's capped
// cgroup: the ground truth, whatever the code under test did.
func (c *Chain) Population() int {
	if c.cap == nil {
		return len(c.sweepDir())
	}
	pids, _ := c.cap.members()
	n := 0
	for _, pid := range pids {
		if _, st, ok := commState(pid); ok && st != 'Z' {
			n++
		}
	}
	return n
}

// InGroup lists the pids in the chain's capped group, without the sweep
// of the test cache that Survivors adds (a benchmark whose decoys run
// the chain's own file counts the chain by its group alone).
func (c *Chain) InGroup() []int {
	if c.cap == nil {
		return nil
	}
	pids, _ := c.cap.members()
	return pids
}

// CapDir is the chain's capped pids group ("" under RLIMIT_NPROC).
func (c *Chain) CapDir() string {
	if c.cap == nil {
		return ""
	}
	return c.cap.dir
}

// Members counts the tasks listed in the chain's cgroup (zombies are not
// listed): cheaper than Population, for polling under load.
func (c *Chain) Members() int {
	if c.cap == nil {
		return len(c.sweepDir())
	}
	pids, _ := c.cap.members()
	return len(pids)
}

// Peak is the most tasks the chain's cgroup has held (pids.peak), or -1.
func (c *Chain) Peak() int {
	if c.cap == nil {
		return -1
	}
	b, err := os.ReadFile(filepath.Join(c.cap.dir, "pids.peak"))
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return -1
	}
	return n
}

// WaitPopulation waits until at least n processes are alive, or within
// passes, and returns the last population seen. It polls Members: a chain
// at its cap keeps the CPU busy, and reading the stat file of each member
// at ordinary priority took over 20 s at 1,500 here.
func (c *Chain) WaitPopulation(n int, within time.Duration) int {
	return waitAtLeast(c.Members, n, within)
}

// waitAtLeast polls count every 20 ms until it gives at least n or
// within passes, and returns the last count.
func waitAtLeast(count func() int, n int, within time.Duration) int {
	end := time.Now().Add(within)
	for {
		got := count()
		if got >= n || time.Now().After(end) {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// FreezeV2 freezes the chain's own v2 group (Spec.V2Group) and waits
// until the kernel reports it frozen: for 12,000 tasks that took 5.5 s
// here, and a measurement taken before then competes with the freezing.
func (c *Chain) FreezeV2(within time.Duration) error {
	if c.v2dir == "" {
		return errors.New("the chain has no v2 group of its own (Spec.V2Group)")
	}
	if err := os.WriteFile(filepath.Join(c.v2dir, "cgroup.freeze"), []byte("1"), 0); err != nil {
		return err
	}
	end := time.Now().Add(within)
	for {
		ev, err := os.ReadFile(filepath.Join(c.v2dir, "cgroup.events"))
		if err != nil {
			return err
		}
		if strings.Contains(string(ev), "frozen 1") {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("%s: not frozen after %v", c.v2dir, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// StartFrozenTree starts a tree chain capped at n in its own v2 group,
// waits until it has n processes and freezes it: n real processes on a
// quiet machine, for a benchmark to time its work beside. It fails tb
// if the chain does not get there.
func StartFrozenTree(tb testing.TB, n int) *Chain {
	tb.Helper()
	c := Start(tb, Spec{Shape: Tree, Cap: n, HopCap: 1000000, Timeout: 300 * time.Second,
		Interval: 100 * time.Millisecond, V2Group: true})
	if got := c.WaitPopulation(n, 200*time.Second); got < n {
		tb.Fatalf("the chain reached %d of %d", got, n)
	}
	if err := c.FreezeV2(60 * time.Second); err != nil {
		tb.Fatal(err)
	}
	return c
}

// Survivors lists every live process of the chain: members of its cgroup,
// and anything running from its test cache wherever it has been moved.
//
// A member with no memory left (its statm all zeros) is past exit_mm in
// its exit: it can run no code of the chain and will be a zombie soon, but
// /proc shows it R or D until then, and under load that lasted past a
// confirmed zero (seen in CI: one process of a churning chain, killed or
// exiting by itself, with the gate's lineage count at 0). Such members
// get exitGrace to finish; one still there after it is a survivor. A
// member with its memory is a survivor at once.
func (c *Chain) Survivors() []int {
	deadline := time.Now().Add(exitGrace)
	for said := false; ; {
		live, exiting := c.survivors()
		if len(live) > 0 || len(exiting) == 0 || time.Now().After(deadline) {
			return append(live, exiting...)
		}
		if !said {
			c.t.Logf("containtest: %d member(s) of the chain still exiting (no memory left): %v; waiting up to %v", len(exiting), exiting, exitGrace)
			said = true
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// exitGrace bounds the wait for a memoryless member to finish exiting.
const exitGrace = 5 * time.Second

// survivors is one look: the live processes, and the members that are
// exiting (no memory).
func (c *Chain) survivors() (live, exiting []int) {
	seen := map[int]bool{}
	if c.cap != nil {
		pids, _ := c.cap.members()
		for _, pid := range pids {
			if _, st, ok := commState(pid); ok && st != 'Z' && !seen[pid] {
				seen[pid] = true
				if hasMemory(pid) {
					live = append(live, pid)
				} else {
					exiting = append(exiting, pid)
				}
			}
		}
	}
	for _, pid := range c.sweepDir() {
		if !seen[pid] {
			seen[pid] = true
			live = append(live, pid)
		}
	}
	return live, exiting
}

// hasMemory: the process still has its address space (statm's size is not
// 0). A user process loses it only in its exit.
func hasMemory(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	return len(f) > 0 && f[0] != "0"
}

// ForkFailures is how many forks the pids cap refused (pids.events max).
func (c *Chain) ForkFailures() int {
	if c.cap == nil {
		return 0
	}
	return c.cap.forkFailures()
}

// Exit waits up to within for the leader to exit and returns its status.
func (c *Chain) Exit(within time.Duration) (unix.WaitStatus, bool) {
	if c.reaped.Load() {
		return c.status, true
	}
	select {
	case ws := <-c.exited:
		c.status = ws
		c.reaped.Store(true)
		return ws, true
	case <-time.After(within):
		return 0, false
	}
}

// TimedOut reports whether the harness's timeout fired.
func (c *Chain) TimedOut() bool { return c.timedOut.Load() }

// WaitStderr waits until the leader's process tree has written s to its
// stderr, and fails the test, with what it wrote, if it has not within
// the deadline.
func (c *Chain) WaitStderr(s string, within time.Duration) {
	c.t.Helper()
	end := time.Now().Add(within)
	for !strings.Contains(c.Stderr(), s) {
		if time.Now().After(end) {
			c.t.Fatalf("%s did not say %q in %v:\n%s", filepath.Base(c.Path), s, within, c.Stderr())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Stdout and Stderr return what the leader's process tree wrote so far.
func (c *Chain) Stdout() string { b, _ := os.ReadFile(c.stdout); return string(b) }
func (c *Chain) Stderr() string { b, _ := os.ReadFile(c.stderr); return string(b) }

// Kill ends the whole chain: the leader's process group, every member of
// the capped cgroup, and anything running from the test cache; it waits
// until none is left, then removes the cgroup. It returns an error naming
// the survivors when the chain did not empty within killDeadline.
func (c *Chain) Kill() error {
	c.killMu.Lock()
	defer c.killMu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
	}
	end := time.Now().Add(killDeadline)
	if c.cap != nil && !c.noCgroup.Load() {
		// Stop growth first, as systemd does before a unit's final kill: a
		// kill loop alone loses against a chain that refills the cap.
		c.cap.setMax(0)
	}
	if c.v2dir != "" {
		// One write kills every member of the chain's own v2 group in the
		// kernel; the sweeps below then only have stragglers to find
		// (processes the code under test moved to a group of its own).
		// Wait for the group to empty before sweeping: a sweep reads
		// several /proc files of every member, and thousands of them
		// take the CPU from the exits they wait for.
		os.WriteFile(filepath.Join(c.v2dir, "cgroup.kill"), []byte("1"), 0)
		waitEmpty(c.v2dir, time.Now().Add(killDeadline/2))
	}
	for {
		c.killGroup()
		left := 0
		if c.cap != nil && !c.noCgroup.Load() {
			left += c.killCgroup()
		}
		if !c.noDir.Load() {
			left += c.killDir()
		}
		if left == 0 {
			break
		}
		if time.Now().After(end) {
			return fmt.Errorf("containtest: %d processes of %s still alive after %v", left, c.Path, killDeadline)
		}
		// Let the killed exit before sweeping again: the exits of one
		// binary serialize (12,000 took seconds here), and a sweep of
		// thousands back to back keeps the CPU from them, the more so at
		// real-time priority (a test that raised its own), where one
		// sweep after another without sleeping ran into RLIMIT_RTTIME.
		time.Sleep(min(10*time.Millisecond+time.Duration(left)*10*time.Microsecond, 200*time.Millisecond))
	}
	return c.removeGroups(end)
}

// removeGroups removes the chain's own v2 group and its cap, once the
// sweeps have emptied them, by end.
func (c *Chain) removeGroups(end time.Time) error {
	if c.v2dir != "" {
		for {
			err := unix.Rmdir(c.v2dir)
			if err == nil || errors.Is(err, unix.ENOENT) {
				break
			}
			// Members the other sweeps killed may take a moment to leave.
			if time.Now().After(end) {
				return fmt.Errorf("containtest: remove %s: %w", c.v2dir, err)
			}
			os.WriteFile(filepath.Join(c.v2dir, "cgroup.kill"), []byte("1"), 0)
			time.Sleep(10 * time.Millisecond)
		}
	}
	if c.cap != nil && !c.noCgroup.Load() {
		for {
			err := c.cap.remove()
			if err == nil {
				break
			}
			if time.Now().After(end) {
				return fmt.Errorf("containtest: remove %s: %w", c.cap.dir, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// killGroup sends SIGKILL to the leader's process group. It holds the
// reaper's lock so the leader cannot be reaped meanwhile: an unreaped
// leader keeps its pid, and so the group id, from being reused.
func (c *Chain) killGroup() {
	reaper.Lock()
	defer reaper.Unlock()
	if _, waiting := reaper.leaders[c.Leader]; waiting {
		unix.Kill(-c.Leader, unix.SIGKILL)
	}
}

// killCgroup signals every live member of the chain's cgroup through a
// pidfd opened and then checked to still be in the group, and returns how
// many were alive.
func (c *Chain) killCgroup() int {
	pids, _ := c.cap.members()
	left := 0
	for _, pid := range pids {
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		if _, st, ok := commState(pid); ok && st != 'Z' {
			if cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid)); err == nil && c.cap.holds(cg) {
				left++
				unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
				thawV1(cg)
			}
		}
		unix.Close(fd)
	}
	return left
}

// killDir signals every process running this chain's copy.
func (c *Chain) killDir() int {
	left := 0
	for _, pid := range c.sweepDir() {
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		if c.runsFromDir(pid) {
			left++
			unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
			if cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid)); err == nil {
				thawV1(cg)
			}
		}
		unix.Close(fd)
	}
	return left
}

// newV2Group makes a v2 group beside the test process's own.
func newV2Group(name string) (string, error) {
	mount := "/sys/fs/cgroup"
	var st unix.Statfs_t
	if unix.Statfs(mount, &st) != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
		mount = "/sys/fs/cgroup/unified"
		if unix.Statfs(mount, &st) != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
			return "", errors.New("no cgroup v2 hierarchy")
		}
	}
	self, _ := os.ReadFile("/proc/self/cgroup")
	_, v2 := ownCgroups(self)
	dir := filepath.Join(mount, v2, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return dir, err
	}
	note("group", dir)
	return dir, nil
}

// waitEmpty waits until the v2 group dir reports no live member
// (cgroup.events "populated 0"), or until end.
func waitEmpty(dir string, end time.Time) {
	for time.Now().Before(end) {
		ev, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
		if err != nil || strings.Contains(string(ev), "populated 0") {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// thawV1 thaws the v1 freezer group that a process with the given
// /proc/PID/cgroup sits in, if any: a task frozen by the v1 freezer acts
// on SIGKILL only once thawed. The group can only be one the code under
// test made for this chain.
func thawV1(cgroup []byte) {
	v1, _ := ownCgroups(cgroup)
	if g, ok := v1["freezer"]; ok && g != "/" {
		os.WriteFile(filepath.Join("/sys/fs/cgroup/freezer", g, "freezer.state"), []byte("THAWED"), 0)
	}
}

// sweepDir scans /proc for live processes running this chain's own copy
// (or a file that replaced it): a decoy beside it in the same test cache
// is another chain.
func (c *Chain) sweepDir() []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if c.runsFromDir(pid) {
			out = append(out, pid)
		}
	}
	return out
}

func (c *Chain) runsFromDir(pid int) bool {
	exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil {
		return false
	}
	return strings.TrimSuffix(exe, " (deleted)") == c.Path
}

// cleanup runs at the end of the test, passed or failed: kill everything,
// then fail the test if anything of the chain is left.
func (c *Chain) cleanup() {
	c.noCgroup.Store(false)
	c.noDir.Store(false)
	if err := c.Kill(); err != nil {
		c.t.Errorf("%v: leaked processes: %v", err, c.Survivors())
	}
	if c.cap != nil {
		if _, err := os.Stat(c.cap.dir); !errors.Is(err, os.ErrNotExist) {
			c.t.Errorf("containtest: cgroup %s left behind", c.cap.dir)
		}
	}
	// Give the reaper a moment to collect the last zombies.
	c.Exit(time.Second)
	reap()
}

// userProcesses counts the tasks of uid: RLIMIT_NPROC counts threads
// too (the kernel's ucounts count every task), so a cap set above the
// processes alone left a multi-threaded test binary's threads eating the
// chain's share, and a chain capped at 100 stopped near 90.
func userProcesses(uid int) int {
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if info, err := e.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok && int(st.Uid) == uid {
				tasks, _ := os.ReadDir("/proc/" + e.Name() + "/task")
				n += max(1, len(tasks))
			}
		}
	}
	return n
}

// policyOf reads the scheduling policy of a process (field 41 of its
// stat), or -1. Through procfs directly: package proc's own tests use
// this harness, so it cannot import proc.
func policyOf(pid int) int {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return -1
	}
	st, err := p.Stat()
	if err != nil {
		return -1
	}
	return int(st.Policy)
}

// startLifted starts cmd from a thread at SCHED_RR 1 without
// SCHED_RESET_ON_FORK, so the child inherits the class (sched(7)), and
// puts the thread's class back after.
func startLifted(cmd *exec.Cmd) error {
	restore, err := LiftThread(false)
	if err != nil {
		return fmt.Errorf("take SCHED_RR to start %s lifted: %w", cmd.Path, err)
	}
	defer restore()
	return cmd.Start()
}

// LiftThread locks the calling goroutine to its thread and puts the
// thread at SCHED_RR 1, as freeze's threads are; with resetOnFork, no
// thread or child cloned from it inherits the class. restore (safe to
// call twice) puts the thread's class back and unlocks it.
func LiftThread(resetOnFork bool) (restore func(), err error) {
	const schedRR, resetOnForkFlag = 2, 0x40000000
	runtime.LockOSThread()
	var was struct{ prio int32 }
	pol, _, e := unix.RawSyscall(unix.SYS_SCHED_GETSCHEDULER, 0, 0, 0)
	if e == 0 {
		_, _, e = unix.RawSyscall(unix.SYS_SCHED_GETPARAM, 0, uintptr(unsafe.Pointer(&was)), 0)
	}
	policy := uintptr(schedRR)
	if resetOnFork {
		policy |= resetOnForkFlag
	}
	rr := struct{ prio int32 }{1}
	if e == 0 {
		_, _, e = unix.RawSyscall(unix.SYS_SCHED_SETSCHEDULER, 0, policy, uintptr(unsafe.Pointer(&rr)))
	}
	if e != 0 {
		runtime.UnlockOSThread()
		return nil, e
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			unix.RawSyscall(unix.SYS_SCHED_SETSCHEDULER, 0, pol, uintptr(unsafe.Pointer(&was)))
			runtime.UnlockOSThread()
		})
	}, nil
}
