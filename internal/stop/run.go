package stop

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"freeze/internal/freeze"
	"freeze/internal/match"
	"freeze/internal/priority"
	"freeze/internal/proc"
	"freeze/internal/timeline"
)

// Limits bound one run.
type Limits struct {
	Rounds  int           // kill rounds at most
	Timeout time.Duration // the whole stop order
	// RoundWait bounds each round's wait for deaths: cgroup.kill of
	// 12,000 processes empties the group in about 1.4 s here.
	RoundWait time.Duration
}

// Defaults are the limits of a run that asks for none. A run against
// 12,000 processes takes about two seconds here; a minute leaves room for
// a machine at its worst.
var Defaults = Limits{Rounds: 20, Timeout: 60 * time.Second, RoundWait: 3 * time.Second}

// Request is one run, checked by the caller: targets that resolved and
// passed match.Refuse, a method that parsed, limits in range.
type Request struct {
	Spec match.Spec
	// Name is the run's name (freeze.GroupName of Spec): its groups,
	// its run lock and its default timeline are named after it. Whoever
	// makes the request names it once (order.Request, the drill); Run
	// names one that has none.
	Name       string
	Method     freeze.Method
	BTF        string // --btf: the kernel types the gate loads against; "" for the running kernel's
	Hold       bool
	DryRun     bool
	Force      bool
	RevokeExec bool
	Disposable []string
	Limits     Limits
	// Timeline is where the record goes; "" for a new file in the
	// caller's state directory, named after the chain (a dry run keeps
	// it in memory).
	Timeline string
	// Command is the run as the operator would type it, for the record
	// and the run lock.
	Command []string
	// Spare, if not nil, is a gate a guard loaded ahead: the run owns it
	// from here on.
	Spare *freeze.Spare
	// FS is the /proc the run reads, its zero value this machine's
	// (proc.Default); Open makes a method's group, nil for freeze's own.
	// A test gives a fixture tree and its group.
	FS   proc.FS
	Open Opener
	// Tuning is for measurements (the FREEZE_* variables): Run reads
	// them from the environment into a request that has none.
	Tuning *Tuning
}

// tuning is the request's, else the environment's, read once here.
func (req Request) tuning() Tuning {
	if req.Tuning != nil {
		return *req.Tuning
	}
	return TuningFromEnv()
}

// named is the request with its name (Name), made here if the caller
// made none.
func (req Request) named() Request {
	if req.Name == "" {
		req.Name = freeze.GroupName(req.Spec)
	}
	return req
}

// fs is the request's /proc.
func (req Request) fs() proc.FS {
	if req.FS.Root == "" {
		return proc.Default
	}
	return req.FS
}

// Output takes what a run has to say while it runs.
type Output struct {
	Progress func(timeline.Event) // each event, as it is recorded
	Warn     func(string)         // something went wrong and the run carries on
	Note     func(string)         // something the operator should know
	// Blocking makes the run wait on each call, as it never does on words
	// (Detached): for a caller that acts at a step while the run waits
	// (a test that interrupts it there).
	Blocking bool
}

func (o Output) warn(format string, a ...any) {
	if o.Warn != nil {
		o.Warn(fmt.Sprintf(format, a...))
	}
}

func (o Output) note(format string, a ...any) {
	if o.Note != nil {
		o.Note(fmt.Sprintf(format, a...))
	}
}

// Report is how a run ended.
type Report struct {
	// Outcome is the step that ended the run, in the timeline's words
	// (zero, survivors, hold, nothing-matched, dry-run, method-failed,
	// interrupted, refused, failed; usage for a request whose words were
	// wrong, which never ran): one vocabulary for the command's
	// JSON, the guard's log, the metrics and the fleet postmortem.
	Outcome timeline.Step
	Stop    Outcome
	Err     error // why the run did not reach zero; a refusal before the run is *HidePIDError or *LockedError
	// Signal names the signal that ended an interrupted run.
	Signal    string
	Timeline  string
	ElapsedMS float64
	// Summary is the record summed up as the fleet postmortem reads it:
	// time to zero, the gate's counts.
	Summary timeline.HostRun
}

// Code is the exit code freeze gives for the run: the one table,
// timeline.ExitCode, read by the outcome. An outcome that does not end a
// run (a Report nobody filled in) is never read as success.
func (r Report) Code() int {
	if code, ok := timeline.ExitCode(r.Outcome); ok {
		return code
	}
	return ExitSurvivors
}

// Freeze's exit codes, as the usage text documents them. They are the
// record's (timeline.ExitCode maps each ending step to one, and the
// fleet postmortem reads them off timelines from other hosts), named
// here for the callers of Run, as package os names io/fs's errors.
const (
	ExitZero        = timeline.ExitZero
	ExitSurvivors   = timeline.ExitSurvivors
	ExitUsage       = timeline.ExitUsage
	ExitRefused     = timeline.ExitRefused
	ExitInterrupted = timeline.ExitInterrupted
)

// Run runs one request: it refuses what cannot be done safely, takes the
// CPU and the run lock, records into a timeline of its own, and closes it.
// What it says goes to o without the run ever waiting on it
// (Output.Detached).
func Run(ctx context.Context, req Request, o Output) Report {
	req = req.named()
	o, flush := o.Detached()
	defer flush()
	var rec *timeline.Recorder
	var opened atomic.Pointer[timeline.Recorder]
	o = o.pausing(req.tuning().PauseAt, func() {
		if r := opened.Load(); r != nil {
			r.Sync() // the record up to the step, on disk before the stop
		}
	})
	open := func() *timeline.Recorder {
		if req.Timeline == "" && !req.DryRun {
			rec = DefaultTimeline(req.Name, o)
		} else {
			rec = OpenTimeline(req.Timeline, o)
		}
		opened.Store(rec)
		return rec
	}
	rep := prepared(ctx, req, o, open)
	if rec != nil {
		CloseTimeline(rec, o)
		rep.Timeline = rec.Path()
	}
	return rep
}

// RunOn runs one request into a recorder the caller owns and closes (the
// drill's, which holds the practice chain's lines around the run): the
// same refusals, lift, lock and record as Run.
func RunOn(ctx context.Context, req Request, rec *timeline.Recorder, o Output) Report {
	req = req.named()
	rep := prepared(ctx, req, o, func() *timeline.Recorder { return rec })
	rep.Timeline = rec.Path()
	return rep
}

// prepared refuses what cannot be done safely, takes the CPU and the run
// lock, then opens the record (only once nothing refused the run: a
// refused run records nothing) and runs.
func prepared(ctx context.Context, req Request, o Output, open func() *timeline.Recorder) Report {
	if err := refuseHidePID(req.fs(), req.Force, o); err != nil {
		return refused(err)
	}
	raised := Prepare(o)
	lock, err := takeLock(req, o)
	if err != nil {
		return refused(err)
	}
	defer lock.Release()
	rec := open()
	recordTakeover(lock, rec)
	return runOrder(ctx, req, raised, rec)
}

// runOrder is the stop order between the preparation and the closing of the
// timeline, with the signals that end ctx recorded for its length.
func runOrder(ctx context.Context, req Request, raised []string, rec *timeline.Recorder) Report {
	priority.OnDrop(func(why string) {
		rec.RecordOf(timeline.StageNone, timeline.StepPriorityDropped, why, timeline.PriorityDropped{Reason: "RLIMIT_RTTIME"})
	})
	stopWatch := recordSignals(ctx, rec)
	res, err := Order(ctx, Config{
		Name: req.Name, FS: req.fs(), Open: req.Open, Tuning: req.tuning(), Spec: req.Spec, Method: req.Method, BTF: req.BTF, Spare: req.Spare, Hold: req.Hold, DryRun: req.DryRun,
		Rounds: req.Limits.Rounds, Timeout: req.Limits.Timeout, RoundWait: req.Limits.RoundWait,
		Command: req.Command, Priority: raised, LiftedAt: liftedAt(), LiftCPU: liftCPU(),
		RevokeExec: req.RevokeExec, Disposable: req.Disposable, Force: req.Force,
	}, rec)
	stopWatch()
	recordMemory(rec)
	return report(rec, res, err)
}

// report reads the run's end off its own record, so the outcome a caller
// is told is the one the postmortem reads.
func report(rec *timeline.Recorder, res Outcome, err error) Report {
	events := rec.Events()
	h := timeline.Summarize("", rec.Path(), events)
	rep := Report{Outcome: timeline.Step(h.Outcome), Stop: res, Err: err, Summary: h, Signal: SignalName(res.Signal)}
	if len(events) > 0 {
		rep.ElapsedMS = events[len(events)-1].ElapsedMS
	}
	if h.Exit < 0 {
		// A run whose record has no end step: it cannot happen, as every
		// path of Order ends in one, but an operator must not read a
		// cut record as success.
		rep.Outcome = timeline.StepFailed
	}
	return rep
}

// refused is the report of a run refused before it started: nothing was
// recorded, nothing changed.
func refused(err error) Report {
	return Report{Outcome: timeline.StepRefused, Err: err}
}

// recordMemory records freeze's peak resident memory (VmHWM).
func recordMemory(rec *timeline.Recorder) {
	if kib, err := proc.Default.PeakRSS(os.Getpid()); err == nil && kib > 0 {
		rec.RecordOf(timeline.StageRecord, timeline.StepMemory, fmt.Sprintf("freeze's peak resident memory: %.1f MiB (VmHWM)", float64(kib)/1024), timeline.Memory{VmHWMKiB: int64(kib)})
	}
}
