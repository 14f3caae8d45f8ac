// Package drill is freeze's fire drill: it starts a disposable, capped
// runaway chain of its own (a copy of the freeze binary in a temporary
// "test cache", in a pids-capped cgroup, or under RLIMIT_NPROC for a
// non-root user), runs the real stop order against it by exact path, and
// checks that nothing is left: no process, no cgroup, no temporary file.
//
// It must never touch a process it did not start: its cleanup kills only
// members of its own capped cgroup and processes running its own copy.
package drill

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/cgroups/v3"
	"golang.org/x/sys/unix"

	"freeze/internal/exefile"
	"freeze/internal/freeze"
	"freeze/internal/gate"
	"freeze/internal/interrupt"
	"freeze/internal/match"
	"freeze/internal/priority"
	"freeze/internal/proc"
	"freeze/internal/safedir"
	"freeze/internal/stop"
	"freeze/internal/timeline"
)

// Limits of the drill, as literals: they bound the drill's own chain
// whatever the stop order does.
const (
	MaxSize      = 2000             // a Go process per hop: ~2,000 is the most a drill should start
	hopCap       = 100000           // the fixture's own hop cap
	growDeadline = 60 * time.Second // to reach the chosen size
	lifetime     = 5 * time.Minute  // every chain process exits by itself after this
	cleanupWait  = 15 * time.Second
	// threadsPerProcess: pids.max counts tasks, and each Go process of
	// the fixture runs up to 5 threads (GOMAXPROCS=1); the cap is sized
	// so the chain can pass --size processes and still hit a ceiling.
	threadsPerProcess = 6
)

// Config is one drill.
type Config struct {
	// Via, if set, hands the stop order to the running guard (freeze
	// drill --guard fifo|socket) instead of running it here: Ask asks it
	// (cmd/freeze gives it: the guard's client), saying first how.
	Via string
	Ask func(words []string, say func(string)) (Answer, error)
	// Timeline is where the drill records, "" for a new file in the
	// caller's state directory; the guard's run writes its own beside it.
	Timeline string
	Size     int
	Shape    string // tree, line, churn
	Method   freeze.Method
	Timeout  time.Duration
	// Out takes what the run says while it runs, as an incident's would.
	Out stop.Output
}

// Report is what the drill found.
type Report struct {
	Support  []string // what this machine supports
	WouldUse freeze.Method
	Root     bool
	Cap      string // how the chain was capped
	Reached  int    // population when the stop order started
	// Ended is how the stop order ended, in the timeline's words; Outcome
	// is the run's own report of it (empty through a guard).
	Ended       timeline.Step
	Outcome     stop.Outcome
	Guard       *Answer // the guard's answer, with Config.Via
	Passed      bool    // zero reached, nothing left behind
	Timeline    string  // the drill's record
	Leftovers   []string
	StopErr     error
	Incident    time.Duration
	FixturePath string
	// CapSample is what the chain's pids cap saw during the stop order
	// (root only: a non-root drill is capped by RLIMIT_NPROC).
	CapSample *CapSample
}

// Supports describes this machine for an incident, without changing it.
func Supports() (lines []string, use freeze.Method) {
	mode := map[cgroups.CGMode]string{cgroups.Unified: "unified (cgroup v2 only)", cgroups.Hybrid: "hybrid (v1 controllers, v2 at /sys/fs/cgroup/unified)", cgroups.Legacy: "v1 only", cgroups.Unavailable: "none mounted"}[cgroups.Mode()]
	lines = append(lines, "cgroups: "+mode)
	var uts unix.Utsname
	unix.Uname(&uts)
	release := unix.ByteSliceToString(uts.Release[:])
	var major, minor int
	fmt.Sscanf(release, "%d.%d", &major, &minor)
	lines = append(lines, fmt.Sprintf("kernel %s: cgroup.freeze %s, cgroup.kill %s", release,
		ifElse(major > 5 || major == 5 && minor >= 2, "yes (5.2+)", "no (before 5.2)"),
		ifElse(major > 5 || major == 5 && minor >= 14, "yes (5.14+)", "no (before 5.14): kills fall back to pidfd signals")))
	for _, s := range freeze.Probe("") {
		lines = append(lines, fmt.Sprintf("method %s: %s (%s)", s.Method, yesNo(s.OK), s.Why))
		for _, k := range s.Kinds[min(1, len(s.Kinds)):] {
			lines = append(lines, fmt.Sprintf("  BPF %s: %s (%s)", k.Name, k.Says(), k.Why))
		}
		if s.OK && use == "" {
			use = s.Method
		}
	}
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err == nil {
		unix.Close(fd)
	}
	lines = append(lines, "pidfd: "+ifElse(err == nil, "yes", "no ("+fmt.Sprint(err)+"): signals fall back to racy pids"))
	lines = append(lines, "root: "+yesNo(os.Geteuid() == 0))
	return lines, use
}

// Run runs a drill, recorded from its start to its verdict (drill-end).
// ctx ended (the command's SIGINT, SIGTERM or SIGHUP) ends the set-up,
// or the practice run between two steps, and the drill cleans up.
func Run(ctx context.Context, c Config) (Report, error) {
	// The drill's words never hold its run up (stop.Output.Detached).
	var flush func()
	c.Out, flush = c.Out.Detached()
	defer flush()
	var rec *timeline.Recorder
	if c.Timeline == "" {
		rec = stop.DefaultTimeline("drill", c.Out)
	} else {
		rec = stop.OpenTimeline(c.Timeline, c.Out)
	}
	c.Timeline = rec.Path()
	say := func(s string) { rec.Record(timeline.StageNone, timeline.StepDrill, s, nil) }
	rep, err := run(ctx, c, rec, say)
	rep.Passed = err == nil && rep.StopErr == nil && rep.Ended == timeline.StepZero && len(rep.Leftovers) == 0
	rec.RecordOf(timeline.StageNone, timeline.StepDrillEnd, fmt.Sprintf("drill %s", map[bool]string{true: "passed", false: "failed"}[rep.Passed]),
		timeline.DrillEnd{Passed: rep.Passed, Reached: rep.Reached, Leftovers: rep.Leftovers})
	stop.CloseTimeline(rec, c.Out)
	rep.Timeline = rec.Path()
	return rep, err
}

// run sets the drill's chain up, practises on it and cleans up. rec
// records the incident part; say records and prints a line.
func run(ctx context.Context, c Config, rec *timeline.Recorder, say func(string)) (rep Report, err error) {
	// A drill ended by a signal before its run (Ctrl-C during the set-up,
	// or its output piped to head, which closes the pipe) still removes
	// its chain: the command ignores SIGPIPE (a write then fails instead
	// of killing the drill), and SIGINT, SIGTERM and SIGHUP end ctx, and
	// with it the set-up, through the same cleanup as a drill that
	// finished. Before, such a drill died with its chain running until
	// the chain's own deadline, and its cgroup stayed.
	rep.Root = os.Geteuid() == 0
	rep.Support, rep.WouldUse = Supports()
	// The machine in a few lines first, then the drill; the gate's
	// programs one by one come after it (#52: 30 lines of them came
	// first, five "does not load here ... operation not permitted",
	// which a newcomer read as failures). The matrix reads them
	// wherever they are in the drill's output.
	var programs []string
	for _, l := range rep.Support {
		if strings.HasPrefix(l, "  BPF ") {
			programs = append(programs, l)
			continue
		}
		say("machine: " + l)
	}
	if len(programs) > 0 {
		loads := 0
		for _, l := range programs {
			if strings.Contains(l, ": loads") {
				loads++
			}
		}
		say(fmt.Sprintf("machine: the gate's programs: %d of %d load on this kernel (one that does not is a stronger form freeze does without here, not a failure); each is listed after the drill", loads, len(programs)))
		defer func() {
			say("machine: the gate's programs on this kernel, one by one:")
			for _, l := range programs {
				say("machine: " + l)
			}
		}()
	}
	if c.Size < 1 || c.Size > MaxSize {
		return rep, fmt.Errorf("--size %d: choose 1 to %d", c.Size, MaxSize)
	}
	self, ch, err := newChain()
	if err != nil {
		return rep, err
	}
	rep.FixturePath = ch.path
	stopReap := reapChildren()
	defer func() {
		rep.Leftovers = append(rep.Leftovers, ch.cleanup()...)
		stopReap()
		if len(rep.Leftovers) > 0 && err == nil {
			err = errors.New("the drill left things behind")
		}
	}()
	if err := ch.install(self); err != nil {
		return rep, err
	}
	if err := ch.start(c.Shape, c.Size); err != nil {
		return rep, err
	}
	rep.Cap = ch.capDesc
	say(fmt.Sprintf("drill: started a %s chain from %s, capped by %s", c.Shape, ch.path, ch.capDesc))
	var sig os.Signal
	rep.Reached, sig = ch.waitPopulation(ctx, c.Size, growDeadline)
	if sig != nil {
		return rep, fmt.Errorf("drill: %v during the set-up: its chain is removed, nothing was practised", sig)
	}
	say(fmt.Sprintf("drill: the chain holds %d processes (size %d); starting the stop order by exact path", rep.Reached, c.Size))

	tg, err := match.Resolve(ch.path)
	if err != nil {
		return rep, err
	}
	spec := match.Spec{Targets: []match.Target{tg}}
	var stopWatch func() CapSample
	if ch.capDir != "" {
		stopWatch = WatchCap(ch.capDir)
	}
	practise(ctx, c, spec, ch.path, rec, &rep, say)
	if stopWatch != nil {
		cs := stopWatch()
		rep.CapSample = &cs
		say("drill: " + cs.String())
	}
	rep.Leftovers = append(rep.Leftovers, ch.leftovers(spec, rep.Outcome.GatePrograms)...)
	return rep, nil
}

// practise runs the stop order on the drill's chain, as an incident would
// (or hands it to the guard c.Ask reaches), and records how it ended.
func practise(ctx context.Context, c Config, spec match.Spec, path string, rec *timeline.Recorder, rep *Report, say func(string)) {
	method := c.Method
	if method == "" {
		method = freeze.Auto
	}
	t0 := time.Now()
	defer func() { rep.Incident = time.Since(t0) }()
	if c.Via != "" {
		rep.Ended, rep.StopErr = askGuard(c, path, method, rep, say)
		return
	}
	// The incident's own path, with the incident's refusals, lift,
	// lock and record: the drill practises what an incident runs.
	r := stop.RunOn(ctx, stop.Request{
		Spec: spec, Method: method,
		Limits:  stop.Limits{Rounds: stop.Defaults.Rounds, Timeout: c.Timeout, RoundWait: stop.Defaults.RoundWait},
		Command: []string{"freeze", "--path", path, "(drill)"},
	}, rec, c.Out)
	rep.Ended, rep.Outcome, rep.StopErr = r.Outcome, r.Stop, r.Err
	if r.Outcome != timeline.StepZero && r.Err == nil {
		rep.StopErr = fmt.Errorf("the run ended %s", r.Outcome)
	}
}

// leftovers says what the stop order left of the drill's chain: live
// processes, freeze's groups, and gate programs still loaded.
func (c *chain) leftovers(spec match.Spec, programs []uint32) []string {
	var out []string
	if left := c.live(); len(left) > 0 {
		out = append(out, fmt.Sprintf("%d chain processes alive after the stop order: %v", len(left), head(left, 10)))
	}
	for _, dir := range freeze.GroupDirs(freeze.GroupName(spec)) {
		out = append(out, "freeze group left: "+dir)
	}
	for _, id := range gate.StillLoaded(programs, 5*time.Second) {
		out = append(out, fmt.Sprintf("BPF program %d still loaded (bpftool prog show id %d)", id, id))
	}
	return out
}

// Method is how a drill freezes its chain: auto, bpf, cgroup2, cgroup1 or
// sigstop, as freeze --method takes them.
type Method = freeze.Method

// ParseMethod reads a drill's --method (a drill never revokes exec).
func ParseMethod(s string) (Method, error) { return freeze.ParseMethod(s, false) }

// Answer is a guard's answer to the drill's request. Over the FIFO the
// guard's log gives all three; over the socket the answer is the exit
// code alone, and the drill reads the outcome off the guard's timeline.
type Answer struct {
	Exit     int
	Outcome  timeline.Step
	Timeline string
}

// askGuard hands the stop order to a running guard: the request as an
// operator would make it, through its FIFO (as 'echo ... > ask' would)
// or its socket (as 'freeze --path' does); the guard's own timeline, beside
// the drill's, has the run.
func askGuard(c Config, path string, method freeze.Method, rep *Report, say func(string)) (timeline.Step, error) {
	words := []string{"--path", path, "--method", string(method), "--timeout", c.Timeout.String()}
	tl := ""
	if c.Timeline != "" {
		tl = strings.TrimSuffix(c.Timeline, ".jsonl") + "-guard.jsonl"
		words = append(words, "--timeline", tl)
	}
	if c.Ask == nil {
		return "", fmt.Errorf("a drill handed to the guard (%s) needs a way to ask it", c.Via)
	}
	res, err := c.Ask(words, say)
	if res.Timeline == "" {
		// Over the socket the answer is the exit code: the outcome is
		// the guard's timeline's.
		res.Timeline = tl
		if events, rerr := timeline.ReadFile(tl); rerr == nil {
			res.Outcome = timeline.Step(timeline.Summarize("", tl, events).Outcome)
		}
	}
	rep.Guard = &res
	if err != nil {
		return "", err
	}
	// Over the socket the outcome is the guard's timeline's; exit 0
	// with no timeline read is taken as the exit code says.
	if res.Exit != 0 || res.Outcome != timeline.StepZero && res.Outcome != "" {
		return res.Outcome, fmt.Errorf("the guard's run ended %q, exit %d (its timeline: %s)", res.Outcome, res.Exit, res.Timeline)
	}
	if events, err := timeline.ReadFile(res.Timeline); err == nil {
		rep.Outcome.GatePrograms = timeline.GatePrograms(events)
	}
	return timeline.StepZero, nil
}

// newChain makes the chain's temporary directory, and says what this
// freeze is (the chain runs a copy of it).
func newChain() (self string, ch *chain, err error) {
	if self, err = os.Executable(); err != nil {
		return "", nil, err
	}
	tmp, err := os.MkdirTemp("", "freeze-drill-")
	if err != nil {
		return "", nil, err
	}
	return self, &chain{dir: tmp, path: filepath.Join(tmp, "cache", "runaway")}, nil
}

// chain is the drill's runaway chain and its cap.
type chain struct {
	dir, path string
	capDir    string // pids cgroup, when root
	capDesc   string
	leader    int
}

// install copies the drill's own binary to the chain's path, the
// disposable executable the stop order matches.
func (c *chain) install(self string) error {
	if err := os.MkdirAll(filepath.Dir(c.path), 0o755); err != nil {
		return err
	}
	return exefile.Copy(self, c.path)
}

func (c *chain) start(shape string, size int) error {
	cmd := exec.Command(c.path, FixtureArg, "--gate", "--shape", shape, "--hop-cap", strconv.Itoa(hopCap),
		"--deadline", strconv.FormatInt(time.Now().Add(lifetime).Unix(), 10), "--interval", "100ms")
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1", "GOGC=400")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	held, err := cmd.StdinPipe() // the fixture waits on it (--gate) until it is in its group
	if err != nil {
		return err
	}
	if err := c.makeCap(size); err != nil {
		return err
	}
	if err := priority.Start(cmd); err != nil {
		return err
	}
	c.leader = cmd.Process.Pid
	cmd.Process.Release()
	if c.capDir != "" {
		err = safedir.Knob(filepath.Join(c.capDir, "cgroup.procs"), strconv.Itoa(c.leader))
	} else {
		n := userProcesses()
		err = unix.Prlimit(c.leader, unix.RLIMIT_NPROC, &unix.Rlimit{Cur: uint64(n + size), Max: uint64(n + size)}, nil)
	}
	if err != nil {
		unix.Kill(c.leader, unix.SIGKILL)
		held.Close()
		return fmt.Errorf("cap the drill's chain: %w", err)
	}
	_, err = held.Write([]byte{1})
	held.Close()
	return err
}

// makeCap makes a pids cgroup for the chain: in freeze's own v1 pids
// group on a v1 or hybrid host; on a unified host beside freeze's own
// group, in its parent (freeze.PidsParentV2: under systemd freeze's own
// group is a unit's or a session's, which holds processes and so hands
// out no controller), else at the root. A non-root user gets
// RLIMIT_NPROC instead (set on the leader).
func (c *chain) makeCap(size int) error {
	if os.Geteuid() != 0 {
		c.capDesc = fmt.Sprintf("RLIMIT_NPROC (your processes + %d)", size)
		return nil
	}
	const v1 = "/sys/fs/cgroup/pids"
	rel, err := freeze.OwnV1("pids", v1)
	dir := filepath.Join(v1, rel)
	if err != nil {
		var v2err error
		if dir, _, v2err = freeze.PidsParentV2(); v2err != nil {
			return fmt.Errorf("no pids cgroup can be made here (cgroup v1: %v; cgroup v2: %v), and the drill never runs a chain uncapped", err, v2err)
		}
	}
	c.capDir = filepath.Join(dir, filepath.Base(c.dir))
	if err := os.Mkdir(c.capDir, 0o755); err != nil {
		return fmt.Errorf("make the drill's pids cgroup: %w", err)
	}
	max := size * threadsPerProcess
	if err := safedir.Knob(filepath.Join(c.capDir, "pids.max"), strconv.Itoa(max)); err != nil {
		return err
	}
	c.capDesc = fmt.Sprintf("pids.max=%d (tasks: about %d threads for each of %d processes) in %s", max, threadsPerProcess, size, c.capDir)
	return nil
}

func (c *chain) waitPopulation(ctx context.Context, n int, within time.Duration) (int, os.Signal) {
	end := time.Now().Add(within)
	for {
		p := len(c.live())
		if p >= n || time.Now().After(end) {
			return p, nil
		}
		select {
		case <-ctx.Done():
			return p, interrupt.Signal(ctx)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// live lists live processes running the drill's copy, by the same
// readers the scan uses.
func (c *chain) live() []int {
	pids, _ := proc.Default.PIDs(nil)
	var out []int
	for _, pid := range pids {
		if path, _, err := proc.Default.ExePath(pid); err == nil && path == c.path {
			out = append(out, pid)
		}
	}
	return out
}

// ours reports whether pid runs the drill's copy or is in its cgroup.
func (c *chain) ours(pid int) bool {
	if path, _, err := proc.Default.ExePath(pid); err == nil && path == c.path {
		return true
	}
	if c.capDir == "" {
		return false
	}
	b, _ := os.ReadFile(filepath.Join(c.capDir, "cgroup.procs"))
	for _, f := range strings.Fields(string(b)) {
		if f == strconv.Itoa(pid) {
			return true
		}
	}
	return false
}

// cleanup ends whatever of the chain is left (its own cgroup's members
// and processes running its own copy), then removes the cgroup and the
// temporary directory. It returns what it could not clean.
func (c *chain) cleanup() []string {
	var left []string
	end := time.Now().Add(cleanupWait)
	if c.capDir != "" {
		safedir.Knob(filepath.Join(c.capDir, "pids.max"), "0")
	}
	for {
		pids := c.live()
		if c.capDir != "" {
			b, _ := os.ReadFile(filepath.Join(c.capDir, "cgroup.procs"))
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					pids = append(pids, pid)
				}
			}
		}
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			// Pinned first, then checked: a chain process that exited
			// after the listing may have left its pid to another process
			// (#24, finding 10). Once the pidfd holds it, a pid that is
			// still the chain's (its copy, or its cgroup) is the pinned
			// process: the cap is at 0, so the cgroup has no births.
			if fd, err := unix.PidfdOpen(pid, 0); err == nil {
				if c.ours(pid) {
					unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
				}
				unix.Close(fd)
			}
		}
		if time.Now().After(end) {
			left = append(left, fmt.Sprintf("%d chain processes could not be killed: %v", len(pids), head(pids, 10)))
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if c.capDir != "" {
		for unix.Rmdir(c.capDir) != nil {
			if time.Now().After(end) {
				left = append(left, "cgroup left: "+c.capDir)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if err := os.RemoveAll(c.dir); err != nil {
		left = append(left, "temporary directory left: "+c.dir)
	}
	return left
}

// reapChildren makes the drill a child subreaper and reaps every child it
// gets: the drill starts no other children, and PID 1 may not reap.
func reapChildren() (stop func()) {
	unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			for {
				var ws unix.WaitStatus
				pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
				if err != nil || pid <= 0 {
					break
				}
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		close(done)
		// The last zombies: wait for them, with a bound.
		end := time.Now().Add(2 * time.Second)
		for time.Now().Before(end) {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if err != nil { // ECHILD: no child left
				return
			}
			if pid == 0 {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
}

func userProcesses() int {
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		if info, err := e.Info(); err == nil && e.IsDir() {
			if st, ok := info.Sys().(*syscall.Stat_t); ok && int(st.Uid) == os.Getuid() {
				n++
			}
		}
	}
	return n
}

func head(p []int, n int) []int {
	if len(p) > n {
		return p[:n]
	}
	return p
}

func yesNo(b bool) string { return ifElse(b, "yes", "no") }

func ifElse(b bool, y, n string) string {
	if b {
		return y
	}
	return n
}
