package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"freeze/internal/freeze"
	"freeze/internal/guard"
	"freeze/internal/match"
	"freeze/internal/priority"
	"freeze/internal/priority/early"
	"freeze/internal/proc"
	"freeze/internal/rounds"
	"freeze/internal/runlock"
	"freeze/internal/stop"
	"freeze/internal/timeline"
)

// Exit codes, as documented in the usage text and the README.
const (
	exitZero      = 0
	exitSurvivors = 1
	exitUsage     = 2
	exitRefused   = 3
	// exitInterrupted: SIGINT, SIGTERM or SIGHUP ended the run between two steps;
	// what was frozen stays frozen and the output says how to go on.
	exitInterrupted = 4
)

// Defaults for the limits. A run against 12,000 processes takes about two
// seconds here; a minute leaves room for a machine at its worst.
const (
	defaultRounds  = 20
	defaultTimeout = 60 * time.Second
	// roundWait bounds each round's wait for deaths: cgroup.kill of
	// 12,000 processes empties the group in about 1.4 s here.
	roundWait = 3 * time.Second
)

// memoryLimit bounds freeze's heap during a run. The garbage collector is
// off below it: each collection stops every thread of freeze, and a thread
// the kernel keeps off the CPU behind a spinning chain makes that stop
// last as long as the chain's turn. A scan of 12,000 processes allocates
// a few MB, so a run stays far below the limit; above it, the collector
// runs as usual and the heap stays bounded.
const memoryLimit = 256 << 20

// raise lifts freeze above the chain (internal/priority) and quiets the
// collector; it returns what was done, for the timeline.
func raise() ([]string, error) {
	raised, err := priority.Raise()
	if ok, us := early.Lifted(); ok {
		raised = append([]string{fmt.Sprintf("lifted at start after %.1f ms of CPU", float64(us)/1000)}, raised...)
	}
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(memoryLimit)
	return raised, err
}

// liftedAt is when package early lifted the process, or the zero time.
func liftedAt() time.Time {
	if ns := early.LiftedAt(); ns > 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// defaultTimeline opens a new file, named for this run alone, in the
// caller's checked state directory (timeline.StateDir: /var/tmp/freeze
// for root, which survives a reboot). Where that directory is unsafe the
// record stays in memory and is saved elsewhere at the end.
func defaultTimeline(o out, prefix string) *timeline.Recorder {
	dir, name := timeline.StateDir(), timeline.RunName(prefix)
	if err := timeline.CheckStateDir(dir); err != nil {
		o.warnf("timeline: %v", err)
		o.hintf("this run records in memory and saves a copy in %s at the end", strings.Join(fallbackDirs, " or "))
		rec := openTimeline(o, "")
		rec.SaveAtEnd(name)
		return rec
	}
	return openTimeline(o, filepath.Join(dir, name))
}

func run(args []string, stdout, stderr io.Writer) int {
	o := out{stdout, stderr}
	if len(args) > 0 {
		switch args[0] {
		case "drill":
			return runDrill(o, args[1:])
		case "runbook":
			return runRunbook(o, args[1:])
		case "timeline":
			return runTimeline(o, args[1:])
		case "census":
			return runCensus(o, args[1:])
		case "restore":
			return runRestore(o, args[1:])
		case "guard":
			return runGuard(o, args[1:])
		case hiddenChain:
			return runChainFixture(args[1:])
		}
	}
	return runStop(o, args)
}

type stopFlags struct {
	paths, under, args []string
	noDesc, hold       bool
	dryRun, jsonOut    bool
	force              bool
	revoke             bool
	disposable         []string
	method             string
	runDir             string
	noGuard            bool
	btf                string
	rounds             int
	timeout            time.Duration
	timeline           string
}

// runStop is the stop order's command: parse and check the flags, hand
// the request to a running guard if one answers, else refuse what cannot
// be done safely, take the CPU and the run lock, then run.
func runStop(o out, args []string) int {
	f, code := parseStopFlags(o, args)
	if code >= 0 {
		return code
	}
	// Check here first, so that a bad flag is said the same way with a
	// guard or without; what the checks print is said once, by whoever
	// runs the request.
	var pre bytes.Buffer
	if _, code := f.spec(out{&pre, &pre}); code != 0 {
		o.stderr.Write(pre.Bytes())
		return code
	}
	if _, code := f.check(out{&pre, &pre}); code != 0 {
		o.stderr.Write(pre.Bytes())
		return code
	}
	if !f.noGuard && !f.dryRun {
		// The guard runs in its own directory: a relative --timeline
		// would be written there (#24, finding 9). Resolved here, where
		// the operator meant it; a later flag overrides the earlier.
		if f.timeline != "" && !filepath.IsAbs(f.timeline) {
			args = append(args[:len(args):len(args)], "--timeline", mustAbs(f.timeline))
		}
		code, err := guard.Ask(f.runDir, args, o.stdout, o.stderr)
		switch {
		case err == nil:
			return code
		case errors.Is(err, guard.ErrLost):
			o.errorf("the guard at %s stopped answering mid-run: %v", f.runDir, err)
			o.hintf("see %s; what it froze stays frozen; run the same command with --no-guard to finish", filepath.Join(f.runDir, guard.LogName))
			return exitInterrupted
		case err == guard.ErrNoGuard:
			// None runs: freeze runs here, as it always has.
		default:
			o.warnf("%v; running here instead", err)
		}
	}
	return runLocal(o, args).Code
}

// runLocal runs the stop order in this process: what a guard runs for
// each request, and what freeze runs when no guard answers.
func runLocal(o out, args []string) guard.Result {
	f, code := parseStopFlags(o, args)
	if code >= 0 {
		return guard.Result{Code: code, Outcome: "usage"}
	}
	spec, code := f.spec(o)
	if code != 0 {
		return guard.Result{Code: code, Outcome: outcomeOf(code)}
	}
	method, code := f.check(o)
	if code != 0 {
		return guard.Result{Code: code, Outcome: "usage"}
	}
	if code := refuseHidePID(o, f.force); code != 0 {
		return guard.Result{Code: code, Outcome: "refused"}
	}
	// Against a chain spinning at its cap an ordinary process gets one
	// share among thousands: take the CPU first (see internal/priority).
	raised, err := raise()
	if err != nil && len(raised) == 0 && os.Geteuid() == 0 {
		o.warnf("%v", err)
	}
	command := append([]string{"freeze"}, args...)
	var lock *runlock.Lock
	if !f.dryRun {
		if lock, code = takeLock(o, spec, command); code != 0 {
			return guard.Result{Code: code, Outcome: "refused"}
		}
		defer lock.Release()
	}
	var rec *timeline.Recorder
	if f.timeline == "" && !f.dryRun {
		rec = defaultTimeline(o, freeze.GroupName(spec))
	} else {
		rec = openTimeline(o, f.timeline)
	}
	priority.OnDrop(func(why string) {
		rec.Record(timeline.StageNone, timeline.StepPriorityDropped, why, timeline.F{"reason": "RLIMIT_RTTIME"})
	})
	if lock != nil && lock.Stale != nil {
		rec.Record(timeline.StageNone, timeline.StepLockTakeover, fmt.Sprintf("took over the run lock from a run that ended without releasing it: %s", *lock.Stale),
			timeline.F{"lock": lock.Path(), "stale_pid": lock.Stale.PID, "stale_start_ticks": lock.Stale.Start, "stale_command": lock.Stale.Command})
	}
	interrupt, stopWatch := watchSignals(rec)
	res, runErr := stop.Run(stop.Config{
		FS: proc.Default, Spec: spec, Method: method, BTF: f.btf, Gate: takeSpare(), Hold: f.hold, DryRun: f.dryRun,
		Rounds: f.rounds, Timeout: f.timeout, RoundWait: roundWait,
		Command: command, Priority: raised, LiftedAt: liftedAt(),
		RevokeExec: f.revoke, Disposable: f.disposable, Force: f.force,
		Interrupt: interrupt,
	}, rec)
	stopWatch()
	if kib, err := proc.Default.PeakRSS(os.Getpid()); err == nil && kib > 0 {
		rec.Record(timeline.StageRecord, timeline.StepMemory, fmt.Sprintf("freeze's peak resident memory: %.1f MiB (VmHWM)", float64(kib)/1024), timeline.F{"vm_hwm_kib": kib})
	}
	closeTimeline(o, rec)
	return report(o, f, rec, res, runErr)
}

// parseStopFlags parses the stop order's flags. A code of -1 means go on;
// any other is the exit code (--help, or a usage error said already).
func parseStopFlags(o out, args []string) (stopFlags, int) {
	var f stopFlags
	fl := pflag.NewFlagSet("freeze", pflag.ContinueOnError)
	fl.SetOutput(io.Discard)
	fl.StringArrayVarP(&f.paths, "path", "p", nil, "")
	fl.StringArrayVarP(&f.under, "under", "u", nil, "")
	fl.StringArrayVarP(&f.args, "arg", "a", nil, "")
	fl.BoolVar(&f.noDesc, "no-descendants", false, "")
	fl.StringVarP(&f.method, "method", "m", "auto", "")
	fl.StringVar(&f.btf, "btf", "", "")
	fl.StringVar(&f.runDir, "run-dir", guard.DefaultRunDir, "")
	fl.BoolVar(&f.noGuard, "no-guard", false, "")
	fl.BoolVar(&f.hold, "hold", false, "")
	fl.BoolVarP(&f.dryRun, "dry-run", "n", false, "")
	fl.IntVar(&f.rounds, "rounds", defaultRounds, "")
	fl.DurationVar(&f.timeout, "timeout", defaultTimeout, "")
	fl.StringVarP(&f.timeline, "timeline", "t", "", "")
	fl.BoolVar(&f.jsonOut, "json", false, "")
	fl.BoolVar(&f.force, "force", false, "")
	fl.BoolVar(&f.revoke, "revoke-exec", false, "")
	fl.StringArrayVar(&f.disposable, "disposable", nil, "")
	help := fl.BoolP("help", "h", false, "")
	if err := fl.Parse(args); err != nil {
		o.errorf("%v", err)
		o.hintf("see 'freeze --help'")
		return f, exitUsage
	}
	if *help {
		fmt.Fprint(o.stdout, usageText())
		return f, exitZero
	}
	if fl.NArg() > 0 {
		o.errorf("unexpected argument %q", fl.Arg(0))
		o.hintf("name the executable with --path %s, or see 'freeze --help'", match.ShellQuote(fl.Arg(0)))
		return f, exitUsage
	}
	return f, -1
}

// check validates the flags that do not name targets: every conflict has
// its own message and a hint.
func (f stopFlags) check(o out) (freeze.Method, int) {
	method, err := freeze.ParseMethod(f.method, f.revoke)
	switch {
	case errors.Is(err, freeze.ErrNoneNeedsRevoke):
		o.errorf("%v", err)
		o.hintf("add --revoke-exec (for a chain that execs at every hop), or use --method sigstop where no cgroup can be used")
		return "", exitUsage
	case err != nil:
		o.errorf("unknown --method %q", f.method)
		o.hintf("use auto, bpf, cgroup2, cgroup1, sigstop, or none with --revoke-exec")
		return "", exitUsage
	}
	for _, d := range f.disposable {
		if !filepath.IsAbs(d) {
			o.errorf("--disposable %q is not absolute", d)
			o.hintf("give the full path, for example --disposable %s", match.ShellQuote(mustAbs(d)))
			return "", exitUsage
		}
	}
	switch {
	case len(f.disposable) > 0 && !f.revoke:
		o.errorf("--disposable only says where --revoke-exec may act")
		o.hintf("add --revoke-exec, or drop --disposable")
	case f.rounds < 1:
		o.errorf("--rounds %d: need at least 1", f.rounds)
	case f.timeout <= 0:
		o.errorf("--timeout %v: need a positive duration such as 60s", f.timeout)
	case f.btf != "" && !filepath.IsAbs(f.btf):
		o.errorf("--btf %q is not absolute", f.btf)
		o.hintf("give the full path of a kernel BTF file, for example --btf /sys/kernel/btf/vmlinux")
	case f.hold && f.dryRun:
		o.errorf("--hold and --dry-run together: a dry run changes nothing, so there is nothing to hold")
		o.hintf("drop one of them")
	default:
		return method, 0
	}
	return "", exitUsage
}

// refuseHidePID refuses a user who is not root where /proc hides other
// users' processes: a chain run by another user would be invisible.
func refuseHidePID(o out, force bool) int {
	hide := proc.Default.HidePID()
	if hide == "" || os.Geteuid() == 0 {
		return 0
	}
	if !force {
		o.errorf("refused: /proc is mounted with hidepid=%s, which hides other users' processes from you: freeze could not see a chain run by another user, nor confirm zero", hide)
		o.hintf("run freeze as root (sudo freeze ...); or add --force to act only on the processes you can see; nothing was changed")
		return exitRefused
	}
	o.warnf("/proc is mounted with hidepid=%s: other users' processes are hidden from you; acting only on your own (--force)", hide)
	return 0
}

// takeLock takes the run lock of the chain: one run per chain.
func takeLock(o out, spec match.Spec, command []string) (*runlock.Lock, int) {
	var held *runlock.HeldError
	lock, err := runlock.Acquire(proc.Default, runlock.Dir(), freeze.GroupName(spec), command)
	switch {
	case errors.As(err, &held):
		o.errorf("refused: another freeze run is working on this chain: %s", held.Holder)
		o.hintf("let it finish; if it is stuck, 'kill -INT %d' ends it in a recorded state, then run this again (a lock whose run died is taken over by the next run: %s)", held.Holder.PID, held.Path)
		return nil, exitRefused
	case err != nil:
		o.warnf("cannot take the run lock: %v; carrying on without it, so a second run on this chain would not be kept out", err)
	}
	return lock, 0
}

// openTimeline starts the recorder. A location that cannot be written
// (read-only, full, missing permissions) does not stop the run: the
// events stay in memory and closeTimeline saves them elsewhere.
func openTimeline(o out, path string) *timeline.Recorder {
	rec, err := timeline.New(path, o.progress)
	if err != nil {
		o.warnf("cannot write the timeline: %v; carrying on: the record stays in memory and is saved elsewhere at the end", err)
	}
	rec.OnWriteError(func(err error) {
		o.warnf("the timeline %s stopped taking events: %v; carrying on: the record stays in memory and is saved elsewhere at the end", path, err)
	})
	if rec.Path() != "" {
		o.sayf("timeline: %s", rec.Path())
	}
	return rec
}

// fallbackDirs take a timeline whose own location failed: /dev/shm is
// memory, so it takes one even when every disk is full.
var fallbackDirs = []string{os.TempDir(), "/dev/shm"}

func closeTimeline(o out, rec *timeline.Recorder) {
	if err := rec.Close(); err != nil {
		o.warnf("%v", err)
	}
	if !rec.Incomplete() {
		return
	}
	if p, err := rec.SaveCopy(fallbackDirs...); err == nil {
		o.sayf("the timeline was saved instead to %s", p)
	} else {
		o.warnf("the timeline could not be saved anywhere (%v); the lines above are the record", err)
	}
}

// watchSignals catches SIGINT, SIGTERM and SIGHUP (the operator's ssh
// session dropped) for the whole run, and ignores SIGPIPE (freeze piped
// into head, which exited): by default each of the last two killed
// freeze mid-step, with no record and its lock left behind. A write to a
// closed pipe now fails with EPIPE and the run goes on. The first is
// recorded at once and handed to the stop order, which ends between two
// steps; any further one is recorded and otherwise ignored, because dying
// in the middle of a round would leave stopped processes outside the
// frozen set with no record of them. Every step is bounded by its own
// waits, so the run still ends promptly. stop ends the recording, before
// the timeline is closed, and the catching.
func watchSignals(rec *timeline.Recorder) (<-chan os.Signal, func()) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	signal.Ignore(syscall.SIGPIPE)
	forward := make(chan os.Signal, 1)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		n := 0
		for {
			select {
			case sig := <-sigs:
				n++
				if n == 1 {
					rec.Record(timeline.StageNone, timeline.StepSignal, fmt.Sprintf("%s: stopping after the current step; what is frozen stays frozen", stop.SignalName(sig)), timeline.F{"signal": stop.SignalName(sig)})
					forward <- sig
				} else {
					rec.Record(timeline.StageNone, timeline.StepSignalAgain, fmt.Sprintf("%s (signal %d of this run): ignored, so that no set is left half-moved; freeze is finishing the current step", stop.SignalName(sig), n), timeline.F{"signal": stop.SignalName(sig), "count": n})
				}
			case <-quit:
				return
			}
		}
	}()
	// The stop function ends the recording and takes the channel off the
	// signal list: a guard runs one request after another in one
	// process, and each left a channel registered before (the guard's
	// own handler still catches SIGINT and SIGTERM between requests).
	return forward, func() { close(quit); wg.Wait(); signal.Stop(sigs) }
}

// spec validates the targets; a non-zero code means stop with it.
func (f stopFlags) spec(o out) (match.Spec, int) {
	var spec match.Spec
	if len(f.paths) == 0 && len(f.under) == 0 {
		o.errorf("no target: name the runaway executable")
		o.hintf("freeze --path /abs/path/to/binary; 'freeze census' shows what holds the machine and prints the command")
		return spec, exitUsage
	}
	for _, p := range f.paths {
		t, err := match.Resolve(p)
		switch {
		case errors.Is(err, match.ErrRelative):
			o.errorf("--path %q is not absolute", p)
			o.hintf("give the full path, for example --path %s", match.ShellQuote(mustAbs(p)))
			return spec, exitUsage
		case errors.Is(err, fs.ErrNotExist):
			o.errorf("--path %s: no such file", p)
			o.hintf("a binary replaced during a rebuild still matches by its old path once the new one is in place; check the path with ls -l %s", match.ShellQuote(p))
			return spec, exitUsage
		case errors.Is(err, match.ErrNotRegular):
			o.errorf("--path %v", err)
			o.hintf("to match everything run from a directory, use --under %s", match.ShellQuote(p))
			return spec, exitUsage
		case err != nil:
			o.errorf("--path %s: %v", p, err)
			return spec, exitUsage
		}
		if t.Symlink {
			o.sayf("--path %s is a symlink: matching the file it points to, %s", p, t.Path)
		}
		if r := match.Refuse(proc.Default, t, len(f.args) > 0, f.force); r != nil {
			o.errorf("refused: %s", r.Rule)
			o.hintf("%s", r.Hint)
			return spec, exitRefused
		}
		spec.Targets = append(spec.Targets, t)
	}
	for _, d := range f.under {
		if !filepath.IsAbs(d) {
			o.errorf("--under %q is not absolute", d)
			o.hintf("give the full path, for example --under %s", match.ShellQuote(mustAbs(d)))
			return spec, exitUsage
		}
		// Resolved, as a process's exe link reads: a symlinked --under
		// (current -> build-123) matched nothing before, and the
		// refusal below judged the unresolved text
		// (/proc/self/root/usr/bin passed it).
		real, err := filepath.EvalSymlinks(d)
		if err != nil {
			o.errorf("--under %s: %v", d, err)
			o.hintf("name the directory that holds the runaway executables")
			return spec, exitUsage
		}
		if st, err := os.Stat(real); err != nil || !st.IsDir() {
			o.errorf("--under %s: not a directory", d)
			return spec, exitUsage
		}
		if real != filepath.Clean(d) {
			o.sayf("--under %s is a symlink to %s: matching %s", d, real, real)
		}
		if freeze.SystemDir(real) && !f.force {
			o.errorf("refused: --under %s would match the machine's own programs", real)
			o.hintf("name the test cache that holds the chain, such as --under /tmp/TestX/cache, or add --force")
			return spec, exitRefused
		}
		spec.Under = append(spec.Under, real)
	}
	spec.Args, spec.NoDescendants = f.args, f.noDesc
	return spec, 0
}

func mustAbs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}

type summary struct {
	Outcome   string          `json:"outcome"`
	Matched   int             `json:"matched"`
	Method    string          `json:"method,omitempty"`
	Group     string          `json:"group,omitempty"`
	Survivors []survivorJSON  `json:"survivors,omitempty"`
	Zombies   []zombieJSON    `json:"zombies,omitempty"`
	Timeline  string          `json:"timeline,omitempty"`
	Elapsed   float64         `json:"elapsed_ms"`
	Support   json.RawMessage `json:"support,omitempty"`
	Error     string          `json:"error,omitempty"`
}

type survivorJSON struct {
	PID   int    `json:"pid"`
	State string `json:"state"`
	Wchan string `json:"wchan,omitempty"`
}

type zombieJSON struct {
	PID    int `json:"pid"`
	Parent int `json:"parent"`
}

// report prints the end of a run: the outcome, what to do next, and the
// exit code.
// outcomeOf names an early exit code for the guard's log.
func outcomeOf(code int) string {
	if code == exitRefused {
		return "refused"
	}
	return "usage"
}

func report(o out, f stopFlags, rec *timeline.Recorder, res stop.Outcome, runErr error) guard.Result {
	s := summary{Matched: res.Matched, Timeline: rec.Path()}
	if g := res.Group; g != nil {
		s.Method, s.Group = string(g.Method()), g.Where()
	}
	if ev := rec.Events(); len(ev) > 0 {
		s.Elapsed = ev[len(ev)-1].ElapsedMS
	}
	if runErr != nil {
		s.Error = runErr.Error()
	}
	var code int
	switch res.Kind {
	case stop.Zero:
		s.Outcome, code = "zero", exitZero
		o.sayf("zero remain (%d matched)", res.Matched)
		o.sayf("next: fix the source (which spawn leaked, and is a process cap really installed?): freeze runbook prevention")
	case stop.NothingMatched:
		s.Outcome, code = "nothing-matched", exitZero
		o.sayf("nothing matched: no live process runs %s", strings.Join(targetArgs(f), " "))
	case stop.DryRun:
		s.Outcome, code = "dry-run", exitZero
		s.Support, _ = json.Marshal(res.Support)
		reportDryRun(o, res)
	case stop.Held:
		s.Outcome, code = "held", exitZero
		o.sayf("holding %d processes frozen in %s", res.Matched, res.Group.Where())
		o.sayf("to finish the job: freeze %s", strings.Join(targetArgs(f), " "))
		o.sayf("to thaw instead:   %s", res.Group.ThawHint())
	case stop.Interrupted:
		s.Outcome, code = "interrupted", exitInterrupted
		reportInterrupted(o, f, res)
	case stop.Survivors:
		s.Outcome, code = "survivors", exitSurvivors
		s.Survivors = reportSurvivors(o, res.Survivors)
	case stop.Refused:
		s.Outcome, code = "refused", exitRefused
		reportRefused(o, res, runErr)
	default:
		s.Outcome, code = "error", exitSurvivors
		o.errorf("%v", runErr)
		if errors.Is(runErr, freeze.ErrNoCgroup) {
			o.hintf("try --method sigstop, which needs no cgroup")
		}
	}
	reportAfter(o, rec, res, code)
	for _, z := range res.Zombies {
		s.Zombies = append(s.Zombies, zombieJSON{z.PID, z.PPID})
	}
	if f.jsonOut {
		b, _ := json.MarshalIndent(s, "", "  ")
		fmt.Fprintln(o.stdout, string(b))
	}
	h := timeline.Summarize("", s.Timeline, rec.Events())
	return guard.Result{Code: code, Outcome: s.Outcome, Timeline: s.Timeline, ZeroMS: h.ZeroMS, GateForks: h.GateForks, GateExecs: h.GateExecs}
}

func reportDryRun(o out, res stop.Outcome) {
	for _, sp := range res.Support {
		if sp.OK {
			o.sayf("dry run: an incident here would use --method %s; nothing was changed", sp.Method)
			break
		}
	}
	for _, r := range res.WouldRevoke {
		o.sayf("dry run: would revoke exec on %s (mode %#o -> %#o)", r.Path, r.Mode, r.NewMode)
	}
	for _, err := range res.Refusals {
		o.sayf("dry run: the guard would refuse --revoke-exec: %v", err)
	}
}

// reportInterrupted says where the run stopped, what holds the chain
// now, and the two ways on.
func reportInterrupted(o out, f stopFlags, res stop.Outcome) {
	sig, stage := stop.SignalName(res.Signal), max(res.Stage, timeline.StageMatch)
	where := fmt.Sprintf("interrupted by %s in step %d/4 (%s)", sig, stage, stage)
	again := "freeze " + strings.Join(targetArgs(f), " ")
	g := res.Group
	switch {
	case g == nil || !g.Freezes():
		o.sayf("%s: nothing was frozen", where)
		o.sayf("to run it again: %s", again)
		return
	case !g.Holds():
		o.sayf("%s: what was stopped stays stopped (%s)", where, g.Where())
		o.sayf("to finish the job: %s", again)
	case res.Stage == timeline.StageKill:
		o.sayf("%s: the kill had begun; what is left stays frozen in %s", where, g.Where())
		o.sayf("to finish the job: %s   (it reuses %s)", again, g.Where())
	default:
		o.sayf("%s: the chain stays frozen in %s", where, g.Where())
		o.sayf("to finish the job: %s   (it reuses %s)", again, g.Where())
	}
	o.sayf("to thaw instead:   %s", g.ThawHint())
}

func reportSurvivors(o out, survivors []rounds.Survivor) []survivorJSON {
	var js []survivorJSON
	o.errorf("%d processes survive", len(survivors))
	for i, sv := range survivors {
		js = append(js, survivorJSON{sv.PID, string(sv.State), sv.Wchan})
		if i == 20 {
			o.sayf("  ... and %d more", len(survivors)-20)
			continue
		}
		if i > 20 {
			continue
		}
		line := fmt.Sprintf("  pid %d state %c (%s)", sv.PID, sv.State, sv.Reason)
		if sv.Wchan != "" {
			line += " asleep in " + sv.Wchan + ": uninterruptible, it dies when that call returns"
		}
		o.sayf("%s", line)
	}
	o.hintf("run the same command again; processes in state D die when their I/O returns")
	return js
}

func reportRefused(o out, res stop.Outcome, runErr error) {
	var guard *freeze.GuardError
	if errors.As(runErr, &guard) {
		o.errorf("refused --revoke-exec: %s %s", guard.Path, guard.Rule)
		o.hintf("%s; nothing was changed", guard.Hint)
		return
	}
	o.errorf("refused: %d processes named %q belong to other users and cannot be inspected without root (reading /proc/PID/exe: permission denied), so freeze cannot tell whether they run the target, nor stop them", len(res.Hidden), res.Hidden[0].Comm)
	sayHidden(o, res.Hidden)
	o.hintf("run freeze as root (sudo freeze ...); or add --force to act only on your own processes; nothing was changed")
}

// reportAfter says what every outcome may leave: revoked files, hidden
// processes left alone, zombies, and where the timeline is.
func reportAfter(o out, rec *timeline.Recorder, res stop.Outcome, code int) {
	if len(res.Revoked) > 0 {
		o.sayf("exec stays revoked on %d file(s): the binary is the bug, so nothing can start it again until it is fixed", len(res.Revoked))
		if rec.Path() != "" {
			o.sayf("to put the modes back: freeze restore --timeline %s", match.ShellQuote(rec.Path()))
		} else {
			for _, r := range res.Revoked {
				o.sayf("to put the mode back: chmod %o %s", r.Mode, match.ShellQuote(r.Path))
			}
		}
	}
	if len(res.Hidden) > 0 && code != exitRefused {
		o.warnf("%d processes named %q of other users could not be inspected (permission denied without root) and were left alone:", len(res.Hidden), res.Hidden[0].Comm)
		sayHidden(o, res.Hidden)
	}
	if n := len(res.Zombies); n > 0 {
		o.sayf("%d zombies of the chain are waiting for their parent to reap them (first: pid %d, parent %d); they hold pids but run nothing", n, res.Zombies[0].PID, res.Zombies[0].PPID)
	}
	if rec.Path() != "" {
		o.sayf("timeline: %s (render it with: freeze timeline %s)", rec.Path(), rec.Path())
	}
}

// sayHidden lists processes that could not be inspected, with their owner.
func sayHidden(o out, hidden []match.Hidden) {
	for i, h := range hidden {
		if i == 10 {
			o.sayf("  ... and %d more", len(hidden)-10)
			break
		}
		name := "?"
		if u, err := user.LookupId(strconv.Itoa(h.UID)); err == nil {
			name = u.Username
		}
		o.sayf("  pid %d, uid %d (%s)", h.PID, h.UID, name)
	}
}

func targetArgs(f stopFlags) []string {
	var a []string
	for _, p := range f.paths {
		a = append(a, "--path", match.ShellQuote(p))
	}
	for _, d := range f.under {
		a = append(a, "--under", match.ShellQuote(d))
	}
	for _, x := range f.args {
		a = append(a, "--arg", match.ShellQuote(x))
	}
	return a
}
