// Package bench holds the containment benchmark: every responder against
// every scenario, in one run on one machine, through the containment
// harness. It runs only when asked (it takes tens of minutes):
//
//	go test ./bench -run Containment -timeout 90m -args -containment
package bench

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"freeze/internal/containtest"
	"freeze/internal/freeze"
	"freeze/internal/guard"
	"freeze/internal/match"
	"freeze/internal/priority"
	"freeze/internal/runlock"
	"freeze/internal/testenv"
	"freeze/internal/timeline"
)

var (
	enabled = flag.Bool("containment", false, "run the containment benchmark (root, tens of minutes)")
	reps    = flag.Int("reps", 3, "repetitions of each pair")
	only    = flag.String("only", "", "run only scenarios whose name contains this (or one of these, comma-separated; a part ending in $ must match the whole name)")
	outJSON = flag.String("json", "results.json", "where to write every measurement")
	onlyR   = flag.String("responders", "", "run only responders whose name contains this (or one of these, comma-separated; a part ending in $ must match the whole name)")
	showLog = flag.Bool("show", false, "log what freeze printed")
	keep    = flag.String("keep", "", "copy each freeze responder's timeline into this directory, as SCENARIO_RESPONDER_REP.jsonl")
	perfCtl = flag.String("perf", "", "a directory with the FIFOs ctl and ack of a 'perf record -D -1 --control fifo:DIR/ctl,DIR/ack' that runs this benchmark: its events are enabled at each measurement's time zero and disabled when the chains reach zero, so the profile holds only those windows")
	render  = flag.String("render", "", "comma-separated JSON files of earlier runs: print their table, run nothing")
)

// picked reports whether name contains one of the comma-separated
// parts of sel, or equals a part that ends in "$" (so "freeze$" picks
// freeze alone, not freeze-sigstop); an empty sel picks everything.
func picked(sel, name string) bool {
	if sel == "" {
		return true
	}
	for _, part := range strings.Split(sel, ",") {
		if exact, ok := strings.CutSuffix(part, "$"); ok {
			if name == exact {
				return true
			}
		} else if part != "" && strings.Contains(name, part) {
			return true
		}
	}
	return false
}

// responderDeadline: each responder gets 30 s, as the issue sets.
const responderDeadline = 30 * time.Second

func TestMain(m *testing.M) { os.Exit(containtest.Main(m)) }

type scenario struct {
	name   string
	chains []containtest.Spec
	want   int // total population to reach before the responder starts
	// interp: the chain is a script of an interpreter copy, named by
	// --path and --arg, and its decoys run the very same copy with
	// another script (chains then holds the chain's cap alone).
	interp bool
	// deleted: the chain's file is removed once the chain is grown, as a
	// test cache rebuilt under its chain: freeze --path matches the file
	// its processes still run (match.ResolveDeleted).
	deleted bool
}

func scenarios() []scenario {
	tree := func(n int) containtest.Spec {
		return containtest.Spec{Shape: containtest.Tree, Cap: n, HopCap: 1000000, Timeout: 10 * time.Minute, Interval: 100 * time.Millisecond, V2Group: true}
	}
	line := func(name string) containtest.Spec {
		return containtest.Spec{Shape: containtest.Line, Cap: 500, HopCap: 1000000, Timeout: 10 * time.Minute, Interval: time.Millisecond, Name: name, V2Group: true}
	}
	return []scenario{
		{name: "tree-3000", chains: []containtest.Spec{tree(3000)}, want: 3000},
		{name: "tree-12000", chains: []containtest.Spec{tree(12000)}, want: 12000},
		{name: "deleted-3000", chains: []containtest.Spec{tree(3000)}, want: 3000, deleted: true},
		{name: "line-3x500", chains: []containtest.Spec{line("line-a"), line("line-b"), line("line-c")}, want: 1500},
		{name: "churn-3000", chains: []containtest.Spec{{Shape: containtest.Churn, Cap: 3000, HopCap: 1000000, Timeout: 10 * time.Minute, Interval: 50 * time.Millisecond, V2Group: true}}, want: 2700},
		{name: "bomb-2000", chains: []containtest.Spec{{Shape: containtest.Bomb, Cap: 2000, HopCap: 1000000, Timeout: 10 * time.Minute, V2Group: true}}, want: 2000},
		{name: "bomb-4000", chains: []containtest.Spec{{Shape: containtest.Bomb, Cap: 4000, HopCap: 1000000, Timeout: 10 * time.Minute, V2Group: true}}, want: 4000},
		// A python script forking with no pause, spinning at its cap,
		// named by --arg, beside 20 decoys running the same copy.
		{name: "arg-2000", chains: []containtest.Spec{{Shape: containtest.Run, Cap: 2000, HopCap: 1000000, Timeout: 10 * time.Minute, V2Group: true}}, want: 1800, interp: true},
	}
}

// A responder is started against the chains' paths; it returns the
// process to wait for, or nil when it acts in-process (the floor).
type responder struct {
	name string
	run  func(bin string, chains []*containtest.Chain, stop <-chan struct{})
	// prepare, if set, runs before the scenario's chains start: what the
	// responder has in place before an incident (an armed guard).
	prepare func(t *testing.T, bin string)
	// auto: the responder acts unasked, as the chains grow.
	auto bool
}

// benchArgs are added to every freeze responder's arguments: --arg of an
// interpreter scenario.
var benchArgs []string

// guardDir is the run directory of the guard that prepareGuard armed for
// the current measurement.
var guardDir string

// prepareGuard arms a 'freeze guard' through the harness (capped, owned,
// killed at the end of the measurement), as systemd would have started it
// before the incident, and waits until it says so.
func prepareGuard(t *testing.T, bin string) { startGuard(t, bin, nil) }

// prepareGuardProcScan arms a guard whose runs scan /proc as before the
// gate's task iterator (FREEZE_SCAN=proc): the before of that change.
func prepareGuardProcScan(t *testing.T, bin string) { startGuard(t, bin, []string{"FREEZE_SCAN=proc"}) }

// prepareGuardAuto arms a guard in automatic mode, killing (the chains
// run from the measurement's temporary directory, which is disposable),
// and limited to that directory.
func prepareGuardAuto(t *testing.T, bin string) {
	startGuard(t, bin, nil, "--auto", "300", "--auto-kill", "--auto-under", filepath.Dir(t.TempDir()))
}

// awaitAuto is an automatic guard's part in a pair: nobody asks; at the
// end, the timelines its runs wrote to the default place are removed.
func awaitAuto(bin string, cs []*containtest.Chain, stop <-chan struct{}) {
	<-stop
	b, _ := os.ReadFile(filepath.Join(guardDir, "guard.log"))
	for _, line := range strings.Split(string(b), "\n") {
		var e struct{ Timeline string }
		if json.Unmarshal([]byte(line), &e) == nil && strings.HasPrefix(e.Timeline, "/var/tmp/freeze/") {
			os.Remove(e.Timeline)
		}
	}
}

func startGuard(t *testing.T, bin string, env []string, extra ...string) {
	startGuardFor(t, 10*time.Minute, bin, env, extra...)
}

// startGuardFor is startGuard with the harness's bound on the guard's
// life: past it the harness kills the guard, and the FIFO it leaves
// blocks every writer's open (the first 20 of the FIFO bench lost their
// last requests to that bound, not to the guard).
func startGuardFor(t *testing.T, life time.Duration, bin string, env []string, extra ...string) {
	guardDir = filepath.Join(t.TempDir(), "run")
	g := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Lifted: true, Cap: 200, HopCap: 1, Timeout: life,
		Command: append([]string{bin, "guard", "--run-dir", guardDir}, extra...), Env: env})
	end := time.Now().Add(30 * time.Second)
	for !strings.Contains(g.Stderr(), "freeze: guard: armed") {
		if time.Now().After(end) {
			t.Fatalf("the guard did not arm in 30 s:\n%s", g.Stderr())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// askGuard writes one request into the armed guard's FIFO, as an
// operator's shell would with echo, and waits until the guard has logged
// its outcome (so its timeline is complete).
func askGuard(stop <-chan struct{}, args []string) {
	guard.AskFIFO(guardDir, args, 60*time.Second)
}

func paths(chains []*containtest.Chain) []string {
	var p []string
	for _, c := range chains {
		p = append(p, c.Path)
	}
	return p
}

// runCmd runs one command at ordinary priority in its own process group;
// when stop closes, the whole group is killed, so a loop ends promptly
// even while one of its invocations is starved by the chain.
func runCmd(stop <-chan struct{}, name string, args ...string) int {
	err := runOwned(stop, exec.Command(name, args...))
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// runOwned runs cmd in its own process group and kills the group when
// stop closes.
func runOwned(stop <-chan struct{}, cmd *exec.Cmd) error {
	return runOwnedWith(stop, cmd, priority.Start)
}

// runOwnedWith is runOwned with the start to use: priority.Start, so that
// a responder starts at ordinary priority whatever this benchmark's class,
// or a plain Start from a lifted thread (asLiftedShell).
func runOwnedWith(stop <-chan struct{}, cmd *exec.Cmd, start func(*exec.Cmd) error) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := start(cmd); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		select {
		case <-stop:
			// The leader is unreaped until Wait returns, so its
			// group id cannot have been reused.
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		case <-exited:
		}
	}()
	err := cmd.Wait()
	close(exited)
	return err
}

var freezeOutput []byte

// runFreeze runs freeze and keeps what it printed, for -show. When stop
// closes (the deadline passed and the measurement is taken), a freeze
// still running is killed with its process group, so it cannot act on
// the next scenario's measurement. freeze's peak RSS comes from its own
// timeline (breakdown), not from the child's ru_maxrss, which carries
// this benchmark's own high-water mark into a vfork child at its exec.
func runFreeze(stop <-chan struct{}, bin string, args ...string) {
	runFreezeWith(stop, priority.Start, bin, args...)
}

func runFreezeWith(stop <-chan struct{}, start func(*exec.Cmd) error, bin string, args ...string) {
	cmd := exec.Command(bin, args...)
	var buf strings.Builder
	cmd.Stdout, cmd.Stderr = &buf, &buf
	runOwnedWith(stop, cmd, start)
	freezeOutput = []byte(buf.String())
	freezeExit = exitOf(cmd, stop)
}

// freezeExit is how the last freeze responder's process ended: "exit N",
// "signal NAME", or "stopped" when the benchmark killed it at the end of
// the measurement. A run whose record stops short is told apart by it: a
// freeze killed by the kernel (RLIMIT_RTTIME's hard limit is SIGKILL)
// from one still running when the measurement ended (#34).
var freezeExit string

func exitOf(cmd *exec.Cmd, stop <-chan struct{}) string {
	ps := cmd.ProcessState
	switch {
	case ps == nil:
		return "not started"
	case stopped(stop):
		return "stopped"
	}
	ws := ps.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return "signal " + unix.SignalName(ws.Signal())
	}
	return fmt.Sprintf("exit %d", ws.ExitStatus())
}

// asLiftedShell runs freeze from a thread at SCHED_RR 1 without
// SCHED_RESET_ON_FORK, with a plain Start, so that it inherits the
// real-time class as a child of a shell lifted with 'chrt -r -p 1 $$'
// does; the thread's class is put back after.
func asLiftedShell(stop <-chan struct{}, bin string, args ...string) {
	const schedRR = 2
	set := func(policy, prio int) {
		param := struct{ prio int32 }{int32(prio)}
		syscall.RawSyscall(syscall.SYS_SCHED_SETSCHEDULER, 0, uintptr(policy), uintptr(unsafe.Pointer(&param)))
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pol, _, _ := syscall.RawSyscall(syscall.SYS_SCHED_GETSCHEDULER, 0, 0, 0)
	var param struct{ prio int32 }
	syscall.RawSyscall(syscall.SYS_SCHED_GETPARAM, 0, uintptr(unsafe.Pointer(&param)), 0)
	set(schedRR, 1)
	defer set(int(pol), int(param.prio))
	runFreezeWith(stop, (*exec.Cmd).Start, bin, args...)
}

func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

func killLoop(stop <-chan struct{}, ps []string) {
	for !stopped(stop) {
		if runCmd(stop, "killall", append([]string{"-q", "-0"}, ps...)...) != 0 {
			return // killall -0 finds none
		}
		runCmd(stop, "killall", append([]string{"-q", "-KILL"}, ps...)...)
	}
}

// freezeArgs are a freeze responder's arguments: the chains' paths, its
// timeline where the breakdown reads it, and extra.
func freezeArgs(cs []*containtest.Chain, extra ...string) []string {
	args := append(extra, "--timeout", "30s", "--timeline", filepath.Join(cs[0].Dir, "freeze.jsonl"))
	args = append(args, benchArgs...)
	for _, p := range paths(cs) {
		args = append(args, "--path", p)
	}
	return args
}

func responders() []responder {
	return []responder{
		// freeze as an operator types it: auto, which takes the gate
		// where it loads.
		{name: "freeze", run: func(bin string, cs []*containtest.Chain, stop <-chan struct{}) {
			runFreeze(stop, bin, freezeArgs(cs)...)
		}},
		{name: "freeze-bpf", run: func(bin string, cs []*containtest.Chain, stop <-chan struct{}) {
			runFreeze(stop, bin, freezeArgs(cs, "--method", "bpf")...)
		}},
		{name: "freeze-cgroup2", run: func(bin string, cs []*containtest.Chain, stop <-chan struct{}) {
			// What auto did before the gate: the before of #16.
			runFreeze(stop, bin, freezeArgs(cs, "--method", "cgroup2")...)
		}},
		{name: "freeze-sigstop", run: func(bin string, cs []*containtest.Chain, stop <-chan struct{}) {
			runFreeze(stop, bin, freezeArgs(cs, "--method", "sigstop")...)
		}},
		{name: "freeze-chrt", run: func(bin string, cs []*containtest.Chain, stop <-chan struct{}) {
			// What the runbook advises when the shell is starved: start
			// freeze at real-time priority from the first instruction.
			runFreeze(stop, "chrt", append([]string{"-r", "1", bin}, freezeArgs(cs)...)...)
		}},
		// The runbook's advice taken before the incident: a shell lifted
		// with 'chrt -r -p 1 $$' starts freeze at real-time priority, so
		// nothing of it runs at ordinary priority.
		{name: "freeze-lifted-shell", run: func(bin string, cs []*containtest.Chain, stop <-chan struct{}) {
			asLiftedShell(stop, bin, freezeArgs(cs)...)
		}},
		{name: "freeze-bpf-lifted-shell", run: func(bin string, cs []*containtest.Chain, stop <-chan struct{}) {
			asLiftedShell(stop, bin, freezeArgs(cs, "--method", "bpf")...)
		}},
		// An armed guard (started lifted, as its systemd unit does),
		// asked through its FIFO at time zero: no fork, no exec.
		{name: "freeze-guard", prepare: prepareGuard, run: func(bin string, cs []*containtest.Chain, stop <-chan struct{}) {
			askGuard(stop, freezeArgs(cs))
		}},
		// The same two with every scan of the run read from /proc, as
		// before the gate's task iterator: the before of that change.
		{name: "freeze-bpf-procscan-lifted-shell", run: func(bin string, cs []*containtest.Chain, stop <-chan struct{}) {
			asLiftedShell(stop, "env", append([]string{"FREEZE_SCAN=proc", bin}, freezeArgs(cs, "--method", "bpf")...)...)
		}},
		{name: "freeze-guard-procscan", prepare: prepareGuardProcScan, run: func(bin string, cs []*containtest.Chain, stop <-chan struct{}) {
			askGuard(stop, freezeArgs(cs))
		}},
		// An armed guard in automatic mode (--auto 300 --auto-kill):
		// nobody asks; the figure is the peak it allowed.
		{name: "freeze-guard-auto", auto: true, prepare: prepareGuardAuto, run: awaitAuto},
		{name: "freeze-bpf-killaction-lifted-shell", run: func(bin string, cs []*containtest.Chain, stop <-chan struct{}) {
			// The gate answering with SIGKILL in a killing run: is letting
			// the chain kill itself at its next fork worth it?
			asLiftedShell(stop, "env", append([]string{"FREEZE_GATE_ACTION=kill", bin}, freezeArgs(cs, "--method", "bpf")...)...)
		}},
		{name: "freeze-cgroup2-lifted-shell", run: func(bin string, cs []*containtest.Chain, stop <-chan struct{}) {
			asLiftedShell(stop, bin, freezeArgs(cs, "--method", "cgroup2")...)
		}},
		{name: "freeze-nopriority", run: func(bin string, cs []*containtest.Chain, stop <-chan struct{}) {
			// What the priority lift is worth: the same run without it.
			runFreeze(stop, "env", append([]string{"FREEZE_PRIORITY=off", bin}, freezeArgs(cs)...)...)
		}},
		{name: "killall-loop", run: func(bin string, cs []*containtest.Chain, stop <-chan struct{}) { killLoop(stop, paths(cs)) }},
		{name: "pkill-f-loop", run: func(bin string, cs []*containtest.Chain, stop <-chan struct{}) {
			pattern := strings.Join(paths(cs), "|")
			for !stopped(stop) {
				if runCmd(stop, "pkill", "-KILL", "-f", pattern) == 1 { // 1: none matched
					return
				}
			}
		}},
		{name: "stop5-then-kill", run: func(bin string, cs []*containtest.Chain, stop <-chan struct{}) {
			for i := 0; i < 5 && !stopped(stop); i++ {
				runCmd(stop, "killall", append([]string{"-q", "-STOP"}, paths(cs)...)...)
			}
			killLoop(stop, paths(cs))
		}},
		{name: "floor-cgroup.kill", run: func(bin string, cs []*containtest.Chain, stop <-chan struct{}) { killGroups(cs) }},
		// From an ordinary shell, as the package installs freeze: the
		// first stage lifts itself, then execs the static freeze (#34).
		{name: "freeze-stage-shell", run: func(bin string, cs []*containtest.Chain, stop <-chan struct{}) {
			fromShell(stop, append([]string{stageBin}, freezeArgs(cs)...)...)
		}},
		// The same shell starting freeze's own (dynamic) build.
		{name: "freeze-shell", run: func(bin string, cs []*containtest.Chain, stop <-chan struct{}) {
			fromShell(stop, append([]string{bin}, freezeArgs(cs)...)...)
		}},
		// The yardstick: a trivial static program from the same shell,
		// then the floor. Its time to zero is the floor's plus its own
		// start; its lift figures are what the stage's are judged by.
		{name: "trivial-static-shell", run: trivialThenFloor},
	}
}

// Result is one measurement.
type Result struct {
	Scenario    string  `json:"scenario"`
	Responder   string  `json:"responder"`
	Rep         int     `json:"rep"`
	ZeroMS      float64 `json:"zero_ms"` // -1: not reached by the deadline
	Survivors   int     `json:"survivors_at_deadline"`
	DecoyHarmed bool    `json:"decoy_harmed"`
	Peak        int     `json:"peak"`
	Start       int     `json:"population_at_start"`
	// For freeze's responders, from its timeline: when its run started
	// (after the process start, the Go runtime and the priority lift),
	// and how long each stage took; and its peak RSS.
	StartupMS float64 `json:"startup_ms,omitempty"`
	// LiftMS is the part of start-up before freeze lifted itself (exec at
	// ordinary priority), from the start event's lifted_at.
	LiftMS float64 `json:"lift_ms,omitempty"`
	// LiftCPUMS is the CPU used before that lift (the stage and the
	// shell's fork included), from the start event's lift_cpu_us; for
	// the trivial static program, the CPU at its constructor.
	LiftCPUMS float64 `json:"lift_cpu_ms,omitempty"`
	MatchMS   float64 `json:"match_ms,omitempty"`
	// GateMS is when the gate was attached, from freeze's start event
	// (--method bpf and auto); it lies before the match.
	GateMS   float64 `json:"gate_ms,omitempty"`
	FreezeMS float64 `json:"freeze_ms,omitempty"`
	KillMS   float64 `json:"kill_ms,omitempty"`
	RSSKiB   int64   `json:"rss_kib,omitempty"`
	// Exit is how freeze's process ended (freezeExit).
	Exit string `json:"exit,omitempty"`
}

// breakdown splits a freeze run into start-up and stages by its timeline.
func breakdown(r *Result, t0 time.Time, path string) {
	events, err := timeline.ReadFile(path)
	if err != nil || len(events) == 0 {
		return
	}
	r.StartupMS = float64(events[0].Time.Sub(t0).Microseconds()) / 1000
	var start timeline.Start
	if events[0].Decode(&start) == nil && start.LiftedAt != "" {
		if lt, err := time.Parse(time.RFC3339Nano, start.LiftedAt); err == nil {
			r.LiftMS = float64(lt.Sub(t0).Microseconds()) / 1000
		}
		r.LiftCPUMS = float64(start.LiftCPUUS) / 1000
	}
	last := map[timeline.Stage]float64{}
	for _, e := range events {
		if e.Step == timeline.StepMemory {
			// freeze's own peak RSS (VmHWM): a ru_maxrss of the child
			// would carry this benchmark's own high-water mark.
			var m timeline.Memory
			if e.Decode(&m) == nil {
				r.RSSKiB = m.VmHWMKiB
			}
			continue
		}
		switch e.Step {
		case timeline.StepGateAttached:
			r.GateMS = e.ElapsedMS
		case timeline.StepGateDetached:
			continue // after the run's end: not part of any stage's time
		}
		last[e.Stage] = e.ElapsedMS
	}
	r.MatchMS = last[timeline.StageMatch]
	if v, ok := last[timeline.StageFreeze]; ok {
		r.FreezeMS = v - last[timeline.StageMatch]
		if v3, ok := last[timeline.StageKill]; ok {
			r.KillMS = v3 - v
		}
	}
}

func TestContainment(t *testing.T) {
	if !*enabled {
		t.Skip("the containment benchmark runs with -args -containment (root, tens of minutes)")
	}
	testenv.RequireLive(t, "the benchmark's chains, in pids cgroups")
	for _, tool := range []string{"killall", "pkill"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: apt-get install psmisc procps", tool)
		}
	}
	bin := buildBench(t)
	// Measure, do not compete: the benchmark's own polling runs above the
	// chains; each responder starts at ordinary priority (priority.Start),
	// as an operator's shell would.
	priority.Raise()
	// The benchmark's threads run at real-time priority under
	// RLIMIT_RTTIME: say so when one of them reaches its soft limit
	// (priority then drops it; the hard limit would kill the benchmark).
	xcpu := make(chan os.Signal, 1)
	signal.Notify(xcpu, syscall.SIGXCPU)
	defer signal.Stop(xcpu)
	go func() {
		for range xcpu {
			fmt.Fprintf(os.Stderr, "bench: SIGXCPU at %s: a benchmark thread used RLIMIT_RTTIME's soft limit (%v at real-time priority without sleeping)\n",
				time.Now().Format(time.TimeOnly), 2*time.Second)
		}
	}()
	var results []Result
	for _, sc := range scenarios() {
		if !picked(*only, sc.name) {
			continue
		}
		for _, rs := range responders() {
			if !picked(*onlyR, rs.name) {
				continue
			}
			for rep := 1; rep <= *reps; rep++ {
				name := fmt.Sprintf("%s/%s/%d", sc.name, rs.name, rep)
				t.Run(name, func(t *testing.T) {
					priority.Raise() // this subtest's goroutine
					r := measure(t, bin, sc, rs, rep)
					r.Rep = rep
					if *showLog && freezeOutput != nil {
						t.Logf("freeze printed:\n%s", freezeOutput)
						freezeOutput = nil
					}
					t.Logf("%s: zero %.0f ms, survivors %d, decoy harmed %v, peak %d, freeze %s", name, r.ZeroMS, r.Survivors, r.DecoyHarmed, r.Peak, r.Exit)
					// Kill loops by name may hit the decoy (that is what
					// they are measured for); freeze and the floor never.
					if r.DecoyHarmed && (strings.HasPrefix(rs.name, "freeze") || strings.HasPrefix(rs.name, "floor")) {
						t.Errorf("%s harmed the decoy: a copy of the chain's bytes at another path must be left alone", name)
					}
					results = append(results, r)
					// Write as it goes: a run cut short keeps what it measured.
					b, _ := json.MarshalIndent(results, "", "  ")
					os.WriteFile(*outJSON, b, 0o644)
				})
			}
		}
	}
	b, _ := json.MarshalIndent(results, "", "  ")
	if err := os.WriteFile(*outJSON, b, 0o644); err != nil {
		t.Errorf("write %s: %v", *outJSON, err)
	}
	fmt.Print(table(results))
}

// TestRender prints the table of earlier runs' JSON files, merged, so a
// benchmark run in parts (one scenario at a time) gives one table.
// TestRender is a tool, not a test: it prints one table from the JSON
// of runs made in parts.
func TestRender(t *testing.T) {
	if *render == "" {
		t.Skip("a tool: renders earlier results with -args -render a.json,b.json")
	}
	var all []Result
	for _, f := range strings.Split(*render, ",") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var rs []Result
		if err := json.Unmarshal(b, &rs); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		all = append(all, rs...)
	}
	fmt.Print(table(all))
}

// The table has a row per scenario and responder, with the median time
// to zero, how many of the repetitions reached it, and the ratio to the
// floor of the same scenario.
func TestTableMediansAndRatios(t *testing.T) {
	rs := []Result{
		{Scenario: "s", Responder: "freeze", Rep: 1, ZeroMS: 300, Peak: 10},
		{Scenario: "s", Responder: "freeze", Rep: 2, ZeroMS: 100, Peak: 10},
		{Scenario: "s", Responder: "freeze", Rep: 3, ZeroMS: -1, Survivors: 7, Peak: 10},
		{Scenario: "s", Responder: "floor-cgroup.kill", Rep: 1, ZeroMS: 100, Peak: 10},
		{Scenario: "s", Responder: "killall-loop", Rep: 1, ZeroMS: -1, Survivors: 9, DecoyHarmed: true, Peak: 10},
	}
	out := table(rs)
	for _, want := range []string{
		"| s | freeze | 300 ms | 2/3 |", // a repetition that did not reach zero counts as the slowest
		"| s | floor-cgroup.kill | 100 ms | 1/1 |",
		"| s | killall-loop | not reached | 0/1 | 9 | 1/1 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "| 3.0x |") {
		t.Errorf("table lacks freeze's ratio to the floor (3.0x):\n%s", out)
	}
}

// buildBench builds the freeze binary the responders run.
func buildBench(t *testing.T) string {
	dir := t.TempDir()
	bin := filepath.Join(dir, "freeze")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/freeze").CombinedOutput(); err != nil {
		t.Fatalf("build freeze: %v\n%s", err, out)
	}
	// As the package installs it (deploy/package/build): a static freeze
	// behind the first stage, which an operator's shell execs; and the
	// yardstick, a trivial static program built with the stage's flags.
	static := filepath.Join(dir, "freeze-static")
	build := exec.Command("go", "build", "-trimpath", "-tags", "osusergo,netgo", "-ldflags", "-s -w -linkmode external -extldflags -static", "-o", static, "../cmd/freeze")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the static freeze: %v\n%s", err, out)
	}
	stageBin, trivialBin = filepath.Join(dir, "freeze-stage"), filepath.Join(dir, "trivial")
	for _, c := range [][]string{
		{"cc", "-O2", "-s", "-static", "-DFREEZE_REAL=\"" + static + "\"", "-o", stageBin, "../deploy/package/stage.c"},
		{"cc", "-O2", "-s", "-static", "-o", trivialBin, "testdata/trivial.c"},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(c, " "), err, out)
		}
	}
	return bin
}

// stageBin is the package's first stage, in front of a static freeze;
// trivialBin the trivial static program (testdata/trivial.c).
var stageBin, trivialBin string

// fromShell runs argv from an ordinary shell, as an operator types it
// ('sh -c "exec freeze ..."'): the shell's fork and exec count.
func fromShell(stop <-chan struct{}, argv ...string) {
	runFreeze(stop, "/bin/sh", append([]string{"-c", `exec "$0" "$@"`}, argv...)...)
}

// trivialFigures are what the trivial program wrote: its CPU and the
// wall clock at its constructor.
var trivialFigures struct {
	cpuUS int64
	atNS  int64
}

// trivialThenFloor starts the trivial static program from an ordinary
// shell beside the chain and waits for its figures, then empties the
// chain as the floor does: it measures what reaching a constructor costs
// here, now, against which freeze's start-up is judged.
func trivialThenFloor(bin string, cs []*containtest.Chain, stop <-chan struct{}) {
	out := filepath.Join(cs[0].Dir, "trivial.out")
	os.Remove(out)
	trivialFigures.cpuUS, trivialFigures.atNS = 0, 0
	cmd := exec.Command("/bin/sh", "-c", `exec "$0"`, trivialBin)
	cmd.Env = append(os.Environ(), "TRIVIAL_OUT="+out)
	runOwned(stop, cmd)
	if b, err := os.ReadFile(out); err == nil {
		fmt.Sscan(string(b), &trivialFigures.cpuUS, &trivialFigures.atNS)
	}
	killGroups(cs)
}

// profile tells the perf record of -perf to enable or disable its
// events, and waits for its ack: perf then profiles each measurement from
// its time zero to its zero, not the chains' growth between them. perf's
// own ack may come tens of milliseconds late beside a bomb (perf runs at
// ordinary priority), so a window's start is not the measurement's.
func profile(t *testing.T, cmd string) {
	if *perfCtl == "" {
		return
	}
	if err := perfControl(*perfCtl, cmd); err != nil {
		t.Fatalf("-perf: %v", err)
	}
}

// perfControl writes cmd to dir/ctl and reads perf's ack from dir/ack.
// The ctl FIFO is opened without blocking: with no perf record reading
// it, a blocking open would wait for one forever.
func perfControl(dir, cmd string) error {
	fd, err := unix.Open(filepath.Join(dir, "ctl"), unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENXIO) {
		return fmt.Errorf("no perf record reads %s: run the benchmark under perf record -D -1 --control fifo:%[1]s,%s", filepath.Join(dir, "ctl"), filepath.Join(dir, "ack"))
	}
	if err != nil {
		return fmt.Errorf("%w (make the FIFOs with mkfifo %s %s)", err, filepath.Join(dir, "ctl"), filepath.Join(dir, "ack"))
	}
	ctl := os.NewFile(uintptr(fd), "ctl")
	_, err = ctl.WriteString(cmd + "\n")
	ctl.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	ack, err := os.Open(filepath.Join(dir, "ack"))
	if err != nil {
		return err
	}
	defer ack.Close()
	if _, err := ack.Read(make([]byte, 16)); err != nil {
		return fmt.Errorf("%s: perf's ack: %w", cmd, err)
	}
	return nil
}

func killGroups(cs []*containtest.Chain) {
	for _, c := range cs {
		os.WriteFile(filepath.Join(c.V2Dir(), "cgroup.kill"), []byte("1"), 0)
	}
}

func measure(t *testing.T, bin string, sc scenario, rs responder, rep int) Result {
	r := Result{Scenario: sc.name, Responder: rs.name, ZeroMS: -1}
	if rs.prepare != nil {
		rs.prepare(t, bin)
	}
	dir := filepath.Join(t.TempDir(), "cache")
	var chains []*containtest.Chain
	var decoy *containtest.Chain
	benchArgs = nil
	if sc.interp {
		chains, decoy = startInterp(t, dir, sc.chains[0])
	} else {
		for _, spec := range sc.chains {
			spec.Dir = dir
			chains = append(chains, containtest.Start(t, spec))
		}
		// The decoy: an identical copy at a neighbouring path.
		decoy = containtest.Start(t, containtest.Spec{Shape: containtest.Tree, Cap: 20, HopCap: 1000000, Timeout: 10 * time.Minute,
			Interval: 100 * time.Millisecond, Dir: dir, Name: filepath.Base(chains[0].Path) + "-2"})
	}
	deadline := time.Now().Add(120 * time.Second)
	for {
		n := 0
		for _, c := range chains {
			n += c.Members()
		}
		r.Start = n
		// An automatic responder is already watching: the chains do not
		// get to grow to the scenario's size first, and what it allowed
		// is the peak.
		if (n >= sc.want || rs.auto) && decoy.Members() >= 20 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r.Start < sc.want && !rs.auto {
		t.Fatalf("chains reached %d of %d", r.Start, sc.want)
	}
	if sc.deleted {
		// Its processes keep the file; its path now names nothing.
		if err := os.Remove(chains[0].Path); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	os.Remove(filepath.Join(dir, "freeze.jsonl"))
	profile(t, "enable")
	t0 := time.Now()
	go func() { rs.run(bin, chains, stop); close(done) }()
	end := t0.Add(responderDeadline)
	zeros := 0
	for time.Now().Before(end) {
		n := 0
		for _, c := range chains {
			n += c.Members()
		}
		if n == 0 && !sc.interp {
			// Confirm by /proc: a responder may have moved processes.
			// Not for an interpreter's chain: its decoys run the same
			// file, which is what the harness's sweep looks for; freeze
			// moves nothing there (--arg, no --hold), and its group holds
			// exactly the chain.
			for _, c := range chains {
				n += len(c.Survivors())
			}
		}
		if n == 0 {
			zeros++
			if zeros == 2 {
				r.ZeroMS = float64(time.Since(t0).Microseconds()) / 1000
				profile(t, "disable")
				break
			}
			continue
		}
		zeros = 0
		// Poll gently: the benchmark runs at real-time priority too, and
		// must not take the CPU from the responder it measures. Every 5
		// ms (a read of the chains' cgroup.procs): at 20 ms, bomb-2000's
		// times (110-190 ms) came in 20 ms steps, a step being 15% of its
		// ratio to the floor.
		time.Sleep(5 * time.Millisecond)
	}
	if r.ZeroMS < 0 {
		profile(t, "disable")
		for _, c := range chains {
			left := c.Survivors()
			if sc.interp {
				left = c.InGroup() // the sweep would count the decoys
			}
			r.Survivors += len(left)
			if *showLog {
				for i, pid := range left {
					if i == 3 {
						break
					}
					st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
					stack, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stack", pid))
					exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
					t.Logf("survivor %d exe %q stat %.80s\nstack %s", pid, exe, st, stack)
				}
			}
		}
	}
	// A freeze responder that reached zero is let finish its record (up
	// to 3 s) before the stop kills it: the chain empties before freeze
	// has confirmed it, and a run killed then leaves a timeline without
	// its kill rounds for the breakdown. The time to zero is already
	// taken.
	if strings.HasPrefix(rs.name, "freeze") && r.ZeroMS >= 0 {
		select {
		case <-done:
		case <-time.After(3 * time.Second):
		}
	}
	close(stop)
	select {
	case <-done:
	case <-time.After(35 * time.Second):
		t.Errorf("responder %s did not stop", rs.name)
	}
	if rs.name == "trivial-static-shell" && trivialFigures.atNS > 0 {
		r.LiftCPUMS = float64(trivialFigures.cpuUS) / 1000
		r.LiftMS = float64(time.Unix(0, trivialFigures.atNS).Sub(t0).Microseconds()) / 1000
	}
	if strings.HasPrefix(rs.name, "freeze") {
		r.Exit, freezeExit = freezeExit, ""
		breakdown(&r, t0, filepath.Join(dir, "freeze.jsonl"))
		if *keep != "" {
			if b, err := os.ReadFile(filepath.Join(dir, "freeze.jsonl")); err == nil {
				os.WriteFile(filepath.Join(*keep, fmt.Sprintf("%s_%s_%d.jsonl", sc.name, rs.name, rep)), b, 0o644)
			}
		}
		// A freeze killed at the deadline leaves its group: named after
		// this pair's own chains, so only they can be in it.
		var spec match.Spec
		for _, c := range chains {
			if tg, err := match.Resolve(c.Path); err == nil {
				spec.Targets = append(spec.Targets, tg)
			}
		}
		containtest.RemoveGroups(t, freeze.GroupDirs(freeze.GroupName(spec))...)
		os.Remove(filepath.Join(runlock.Dir(), freeze.GroupName(spec)+".lock"))
	}
	for _, c := range chains {
		if p := c.Peak(); p > r.Peak {
			r.Peak = p
		}
	}
	d := decoy.Survivors()
	r.DecoyHarmed = len(d) < 20
	for _, pid := range d {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			if f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:])); len(f) > 0 && f[0] == "T" {
				r.DecoyHarmed = true
			}
		}
	}
	return r
}

// startInterp starts an interpreter scenario: spec's chain, a script of
// a copy of python3 that forks with no pause and goes on forking at its
// cap (a refused fork is caught), and the decoys, 20 processes of the
// same copy running another script that forks a short-lived child every
// 0.1 s; freeze is told --arg SCRIPT. (A shell script does not do:
// dash exits at its first refused fork, and at the cap the whole chain
// died out in one of three set-ups.)
func startInterp(t *testing.T, dir string, spec containtest.Spec) (chains []*containtest.Chain, decoy *containtest.Chain) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3: the interpreter scenario needs it")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	py, script, other := filepath.Join(dir, "pybomb"), filepath.Join(dir, "bomb.py"), filepath.Join(dir, "other.py")
	for f, body := range map[string]string{
		script: "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
		other:  "import os, time\nwhile True:\n    time.sleep(0.1)\n    if os.fork() == 0:\n        os._exit(0)\n    os.wait()\n",
	} {
		if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Named so that the reaper can take its zombies (Spec.Reap): no test
	// runs a program of that name.
	spec.Dir, spec.Name, spec.Command, spec.Reap = dir, "pybomb", []string{"/usr/bin/python3", script}, true
	chains = []*containtest.Chain{containtest.Start(t, spec)}
	decoy = containtest.Start(t, containtest.Spec{Shape: containtest.Run, Name: "launcher", Cap: 100, HopCap: 1000000, Timeout: 10 * time.Minute,
		Command: []string{"/bin/sh", "-c", "for i in $(seq 20); do " + py + " " + other + " & done; wait"}})
	benchArgs = []string{"--arg", script}
	return chains, decoy
}

func median(v []float64) float64 {
	sort.Float64s(v)
	if len(v) == 0 {
		return -1
	}
	return v[len(v)/2]
}

// key is a pair: a scenario and a responder.
type key struct{ s, r string }

// table renders medians per pair, with the ratio to the floor.
func table(rs []Result) string {
	var order []key
	groups := map[key][]Result{}
	for _, r := range rs {
		k := key{r.Scenario, r.Responder}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	floor := map[string]float64{}
	for k, g := range groups {
		if k.r == "floor-cgroup.kill" {
			var z []float64
			for _, r := range g {
				z = append(z, r.ZeroMS)
			}
			floor[k.s] = median(z)
		}
	}
	var b strings.Builder
	b.WriteString("| scenario | responder | time to zero (median) | reached zero | survivors at 30 s (median) | decoy harmed | peak tasks | ratio to floor |\n")
	b.WriteString("| --- | --- | ---: | ---: | ---: | --- | ---: | ---: |\n")
	for _, k := range order {
		g := groups[k]
		var z, sv []float64
		reached, harmed, peak := 0, 0, 0
		for _, r := range g {
			if r.ZeroMS >= 0 {
				reached++
				z = append(z, r.ZeroMS)
			} else {
				z = append(z, 1e12) // not reached sorts last
			}
			sv = append(sv, float64(r.Survivors))
			if r.DecoyHarmed {
				harmed++
			}
			if r.Peak > peak {
				peak = r.Peak
			}
		}
		m := median(z)
		zs, ratio := "not reached", "-"
		if m < 1e12 {
			zs = fmt.Sprintf("%.0f ms", m)
			if f := floor[k.s]; f > 0 {
				ratio = fmt.Sprintf("%.1fx", m/f)
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d/%d | %.0f | %d/%d | %d | %s |\n", k.s, k.r, zs, reached, len(g), median(sv), harmed, len(g), peak, ratio)
	}
	b.WriteString("\nWhere freeze's time goes (medians over the runs that recorded a timeline, how many in brackets; start-up is from the responder's start to freeze's first event, and \"of it, to the lift\" the part before freeze lifted itself, at ordinary priority; a stage still running at the deadline counts to the last event it recorded):\n\n")
	b.WriteString("| scenario | responder | start-up | of it, to the lift | gate on | 1 match | 2 freeze growth | 3 kill rounds | peak RSS |\n")
	b.WriteString("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, k := range order {
		if !strings.HasPrefix(k.r, "freeze") || strings.HasSuffix(k.r, "-auto") {
			continue // an automatic run has no timeline of the benchmark's
		}
		var su, lift, gt, m, f, kl, rss []float64
		for _, r := range groups[k] {
			if r.StartupMS <= 0 {
				continue // no timeline: freeze did not get to record its start
			}
			su, m, f, kl = append(su, r.StartupMS), append(m, r.MatchMS), append(f, r.FreezeMS), append(kl, r.KillMS)
			rss = append(rss, float64(r.RSSKiB))
			if r.LiftMS > 0 {
				lift = append(lift, r.LiftMS)
			}
			if r.GateMS > 0 {
				gt = append(gt, r.GateMS)
			}
		}
		if len(su) == 0 {
			fmt.Fprintf(&b, "| %s | %s | not started in 30 s (0/%d) | - | - | - | - | - | - |\n", k.s, k.r, len(groups[k]))
			continue
		}
		ls := "-" // not lifted (FREEZE_PRIORITY=off), or a run from before lifted_at was recorded
		if len(lift) > 0 {
			ls = fmt.Sprintf("%.0f ms", median(lift))
		}
		gs := "-" // no gate
		if len(gt) > 0 {
			gs = fmt.Sprintf("%.0f ms", median(gt))
		}
		fmt.Fprintf(&b, "| %s | %s | %.0f ms (%d/%d) | %s | %s | %.0f ms | %.0f ms | %.0f ms | %.1f MiB |\n", k.s, k.r, median(su), len(su), len(groups[k]), ls, gs, median(m), median(f), median(kl), median(rss)/1024)
	}
	b.WriteString(liftTable(order, groups))
	for _, r := range rs {
		if strings.HasPrefix(r.Exit, "signal") {
			fmt.Fprintf(&b, "\n%s/%s/%d: freeze ended by %s\n", r.Scenario, r.Responder, r.Rep, r.Exit)
		}
	}
	return b.String()
}

// liftTable compares what each responder used before it was lifted with
// what a trivial static program uses to reach its constructor, beside
// the same chain (trivial-static-shell); and says when the gate was on,
// from the responder's start.
func liftTable(order []key, groups map[key][]Result) string {
	trivial := map[string]float64{}
	for k, g := range groups {
		if k.r != "trivial-static-shell" {
			continue
		}
		var cpu []float64
		for _, r := range g {
			if r.LiftCPUMS > 0 {
				cpu = append(cpu, r.LiftCPUMS)
			}
		}
		trivial[k.s] = median(cpu)
	}
	var b strings.Builder
	b.WriteString("\nBefore the lift (medians): the CPU used until lifted, the shell's fork included, against a trivial static program's until its constructor, started the same way beside the same chain; the wall time to the lift (to the constructor), and to the gate attached:\n\n")
	b.WriteString("| scenario | responder | CPU before the lift | ratio to trivial static | wall time to the lift | to the gate attached |\n")
	b.WriteString("| --- | --- | ---: | ---: | ---: | ---: |\n")
	rows := 0
	for _, k := range order {
		var cpu, wall, gate []float64
		for _, r := range groups[k] {
			if r.LiftMS < 0 {
				continue // a guard's: lifted when the guard started, long before
			}
			if r.LiftCPUMS > 0 {
				cpu, wall = append(cpu, r.LiftCPUMS), append(wall, r.LiftMS)
			}
			if r.GateMS > 0 && r.StartupMS > 0 {
				gate = append(gate, r.StartupMS+r.GateMS)
			}
		}
		if len(cpu) == 0 {
			continue
		}
		rows++
		ratio, gs := "-", "-"
		if tv := trivial[k.s]; tv > 0 {
			ratio = fmt.Sprintf("%.2fx", median(cpu)/tv)
		}
		if len(gate) > 0 {
			gs = fmt.Sprintf("%.0f ms", median(gate))
		}
		fmt.Fprintf(&b, "| %s | %s | %.2f ms | %s | %.0f ms | %s |\n", k.s, k.r, median(cpu), ratio, median(wall), gs)
	}
	if rows == 0 {
		return ""
	}
	return b.String()
}

func TestPicked(t *testing.T) {
	for _, c := range []struct {
		sel, name string
		want      bool
	}{
		{"", "freeze", true},
		{"freeze", "freeze-sigstop", true},
		{"freeze$", "freeze-sigstop", false},
		{"freeze$", "freeze", true},
		{"killall,floor", "floor-cgroup.kill", true},
		{"killall,floor", "pkill-f-loop", false},
		{"tree-12000$,line", "tree-3000", false},
	} {
		if got := picked(c.sel, c.name); got != c.want {
			t.Errorf("picked(%q, %q) = %v, want %v", c.sel, c.name, got, c.want)
		}
	}
}

// -perf speaks perf record's control protocol: a command, a newline, on
// the ctl FIFO, then a wait for perf's ack on the other.
func TestProfileSpeaksPerfsControl(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"ctl", "ack"} {
		if err := unix.Mkfifo(filepath.Join(dir, f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// perf's side: ctl open for reading before the benchmark runs, as
	// perf record opens it at its start.
	fd, err := unix.Open(filepath.Join(dir, "ctl"), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		t.Fatal(err)
	}
	ctl := os.NewFile(uintptr(fd), "ctl")
	got := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(ctl)
		ctl.Close()
		got <- string(b)
		os.WriteFile(filepath.Join(dir, "ack"), []byte("ack\n\x00"), 0)
	}()
	old := *perfCtl
	*perfCtl = dir
	defer func() { *perfCtl = old }()
	profile(t, "enable") // returns once perf's side acked
	if s := <-got; s != "enable\n" {
		t.Errorf("perf read %q from ctl, want %q", s, "enable\n")
	}
	// With no perf reading the FIFO, it says so at once, and does not
	// wait for a reader forever.
	if err := perfControl(dir, "disable"); err == nil || !strings.Contains(err.Error(), "no perf record reads") {
		t.Errorf("with no reader on ctl: %v, want an error that says no perf record reads it", err)
	}
}
