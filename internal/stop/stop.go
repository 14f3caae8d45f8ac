// Package stop is freeze's stop order, end to end, against one chain:
//
//  1. match the chain by exact executable (and its descendants);
//  2. freeze growth: where the kernel allows, the BPF gate is attached
//     before the first scan, so no process of the chain can complete a
//     fork, clone or exec and the set is fixed in one step; else (and
//     for --hold) revoke exec where asked, then move every match into a
//     frozen group until a scan finds none outside (the fixed set);
//  3. kill rounds against the fixed set until none remain;
//  4. confirm zero and record.
//
// Run is the one door to a run, for every caller: the command line, a
// guard's request and the drill all hand it a checked Request and get
// back a typed Report (run.go). It prepares the process (the lift, the
// collector, the hidepid rule, the run lock), records (the timeline's
// name, its fallback, freeze's peak memory), catches signals for the
// length of the run, and applies the order (Order). The words a refusal
// needs are the caller's (internal/order), from the typed errors here.
//
// Order reads as those steps, one function each over a small run state,
// and every step is recorded in the timeline. The package prints nothing (the
// timeline's observer does) and never exits; it never touches a process
// the scan did not match, and an interrupt ends a run only between two
// steps or rounds, so no set is ever left half-moved.
package stop

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/freeze"
	"freeze/internal/interrupt"
	"freeze/internal/match"
	"freeze/internal/proc"
	"freeze/internal/rounds"
	"freeze/internal/timeline"
	"freeze/internal/version"
)

// Opener makes the group of a method for a run: freeze's own, or a
// test's.
type Opener = freeze.Opener

// Config is one run.
type Config struct {
	FS   proc.FS
	Spec match.Spec
	// Name is the run's name, which its groups carry
	// (freeze.GroupName(Spec), named once by the request); Run names a
	// config that has none.
	Name   string
	Method freeze.Method
	// Open makes the group the cgroup methods and sigstop freeze into;
	// nil is freeze's own. The gate is loaded by the run itself, where
	// the method tries it.
	Open Opener
	// BTF is the kernel type information the gate loads against (--btf);
	// empty for the running kernel's.
	BTF string
	// Spare, if not nil, is a gate loaded ahead and still empty (a
	// guard's): the run fills and attaches it instead of loading one,
	// and closes it at the end like its own.
	Spare *freeze.Spare
	// Tuning is the gate's settings for measurements (the FREEZE_*
	// variables, read once by the caller).
	Tuning    Tuning
	Hold      bool
	DryRun    bool
	Rounds    int
	Timeout   time.Duration
	RoundWait time.Duration
	Command   []string
	Priority  []string // what the caller did to its own priority, for the record
	// LiftedAt is when the process lifted itself at start (package
	// priority/early), zero if it did not: recorded so that start-up can
	// be split into the part at ordinary priority and the rest.
	LiftedAt time.Time
	LiftCPU  time.Duration // the CPU used before that lift
	// RevokeExec removes the execute bits of the target files (and of
	// files under --under that matches run) before freezing, guarded by
	// freeze.CheckRevoke against Disposable roots; Force allows files
	// with other hard links, and acting on the visible part of a chain
	// that another user's processes may belong to.
	RevokeExec bool
	Disposable []string
	Force      bool
}

// Tuning are settings for measurements, not for an incident: the
// benchmark and the kernel matrix set them (FREEZE_GATE_ACTION,
// FREEZE_GATE_FORM, FREEZE_SCAN), and incident reads them once into
// its request.
type Tuning struct {
	// GateKill lets the gate kill each process at its next fork or exec
	// instead of stopping it, in a run that kills anyway: not with
	// --hold, and never with --arg (the README's "The gate" says why
	// stopping stays the default).
	GateKill bool
	// GateForm is the gate's form (auto, lsm, fmod_ret, tp_btf); ""
	// is auto: the refusing form where it loads.
	GateForm string
	// ScanProc scans /proc even where the gate's task iterator loads.
	ScanProc bool
	// PauseAt (FREEZE_PAUSE_AT, a step's name: match, gate-attached)
	// has the run stop its own process with SIGSTOP once it has recorded
	// that step, the first time: a test that acts on a run mid-run (a
	// signal, a second run, a kill) finds it there, stopped, whatever
	// the machine's speed. Lifted, freeze finishes a whole run in tens
	// of milliseconds, before a test at ordinary priority can stop it
	// from outside (rehearsal 36).
	PauseAt timeline.Step
}

// TuningFromEnv reads the settings from the environment.
func TuningFromEnv() Tuning {
	return Tuning{GateKill: os.Getenv("FREEZE_GATE_ACTION") == "kill", GateForm: os.Getenv("FREEZE_GATE_FORM"), ScanProc: os.Getenv("FREEZE_SCAN") == "proc",
		PauseAt: timeline.Step(os.Getenv("FREEZE_PAUSE_AT"))}
}

// Kind is how a run ended.
type Kind int

const (
	Zero           Kind = iota + 1 // zero remain, confirmed by two empty scans
	NothingMatched                 // no live process matched, and no held group
	Held                           // --hold: frozen, not killed
	DryRun                         // --dry-run: nothing changed
	Interrupted                    // SIGINT, SIGTERM or SIGHUP between two steps
	Survivors                      // the kill rounds ran out with live matches
	Refused                        // a safety rule refused the run (revoke guard, hidden processes); nothing changed
	Failed                         // an error ended the run
)

// Outcome is how the run ended, and what the caller needs to say so.
type Outcome struct {
	Kind    Kind
	Matched int
	// Group is the frozen set the run used, nil before one was opened:
	// its methods say whether it holds the chain and how to thaw it.
	Group freeze.Group
	// StoppedOutside are processes of the chain whose moves into Group
	// failed (freeze.ErrLeftOutside): stopped by SIGSTOP where they run.
	// A hold's thaw must continue them too.
	StoppedOutside []int
	Survivors      []rounds.Survivor
	Zombies        []match.Zombie
	Support        []freeze.Support // a dry run's
	Revoked        []freeze.Revocation
	// WouldRevoke and Refusals are a dry run's: what --revoke-exec would
	// change, and what its guard would refuse.
	WouldRevoke []freeze.Revocation
	Refusals    []error
	// Signal ended the run early (Kind Interrupted), in Stage.
	Signal os.Signal
	Stage  timeline.Stage
	// Hidden are processes named like a target that could not be
	// inspected (see HiddenError).
	Hidden []match.Hidden
	// GatePrograms are the kernel ids of the gate's programs, if it was
	// attached; detached when Run returns.
	GatePrograms []uint32
}

// HiddenError refuses a run that cannot see all of the chain: live
// processes named like a target that this user may not inspect (another
// user's, without root). Stopping the part one can see does not stop a
// chain, and zero could not be confirmed. --force acts on the visible part.
type HiddenError struct{ Hidden []match.Hidden }

func (e *HiddenError) Error() string {
	return fmt.Sprintf("%d processes named like the target could not be inspected (permission denied): another user's, seen without root", len(e.Hidden))
}

// ErrInterrupted means SIGINT, SIGTERM or SIGHUP ended the run between two steps;
// the Outcome says where.
var ErrInterrupted = errors.New("interrupted")

// errDone ends the order early without an error: the outcome is complete
// (a dry run, nothing matched, a hold).
var errDone = errors.New("done")

// run is the state the steps share.
type run struct {
	// ctx is the run's: ended, the run stops at its next look.
	ctx      context.Context
	c        Config
	rec      *timeline.Recorder
	out      Outcome
	deadline time.Time
	scanner  *match.Scanner
	res      match.Result   // the latest scan
	sealed   *freeze.Sealed // held by the gate from before the first scan to the end
	gateWhy  string         // why the gate could not be used
	// byArg: the chain is named with --arg and the gate holds its file's
	// every process until letGo has sorted them.
	byArg bool
	lg    *letGoState // with byArg
}

// Order applies the stop order. It returns the outcome and, unless the
// chain was brought to zero (or there was nothing to do), an error
// saying why not. The run looks at ctx between steps and between
// rounds, never inside one: ended (SIGINT, SIGTERM or SIGHUP, its cause
// an *interrupt.Cause), it ends the run with what is frozen still
// frozen, and records where.
func Order(ctx context.Context, c Config, rec *timeline.Recorder) (Outcome, error) {
	if c.Name == "" {
		c.Name = freeze.GroupName(c.Spec)
	}
	r := &run{ctx: ctx, c: c, rec: rec, deadline: time.Now().Add(c.Timeout), scanner: match.NewScanner(c.FS, c.Spec)}
	if len(c.Spec.Args) > 0 {
		r.scanner.UseRecords(c.Spare.Records(c.FS)) // an armed guard's: nil otherwise
	}
	r.recordStart()
	err := r.steps(
		r.gate,
		r.match,
		r.letGo,
		r.revoke,
		r.dryRun,
		r.nothingToDo,
		r.openGroup,
		r.grow,
		r.hold,
		r.kill,
		r.confirm,
	)
	if errors.Is(err, errDone) {
		err = nil
	}
	switch {
	case err != nil && r.out.Kind == Refused:
		// Every run ends in a step that says how: a refusal changed
		// nothing, and the postmortem must not read it as a cut run.
		r.rec.RecordOf(timeline.StageNone, timeline.StepRefused, err.Error()+"; nothing was changed", timeline.Failure{Error: err.Error()})
	case err != nil && r.out.Kind == 0:
		r.out.Kind = Failed
		r.rec.RecordOf(timeline.StageNone, timeline.StepFailed, err.Error(), timeline.Failure{Error: err.Error()})
	}
	r.closeGate()
	r.c.Spare.Close() // a spare this run had no use for (nil: none, or taken)
	return r.out, err
}

// steps runs each step in turn until one returns an error (errDone when
// the outcome is complete early).
func (r *run) steps(steps ...func() error) error {
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// interrupted reports whether SIGINT, SIGTERM or SIGHUP has arrived. It is asked
// between steps and rounds only.
func (r *run) interrupted() bool {
	if r.out.Signal != nil {
		return true
	}
	if r.ctx.Err() == nil {
		return false
	}
	r.out.Signal = interrupt.Signal(r.ctx)
	return true
}

// stopHere ends the run as interrupted in stage, recording what is left
// where: the one place every interrupt goes through.
func (r *run) stopHere(stage timeline.Stage, what string, rec timeline.Interrupted) error {
	r.out.Kind, r.out.Stage = Interrupted, stage
	sig := SignalName(r.out.Signal)
	rec.Signal = sig
	if g := r.out.Group; g != nil {
		rec.Group, rec.Method = g.Where(), string(g.Method())
	}
	r.rec.RecordOf(stage, timeline.StepInterrupted, fmt.Sprintf("interrupted by %s %s", sig, what), rec)
	return fmt.Errorf("%w by %s in %s", ErrInterrupted, sig, stage)
}

func (r *run) recordStart() {
	c := r.c
	start := timeline.Start{
		Command: c.Command, PID: os.Getpid(), UID: os.Getuid(),
		Under: c.Spec.Under, Args: c.Spec.Args, Descendants: !c.Spec.NoDescendants,
		MethodAsked: string(c.Method), Hold: c.Hold, DryRun: c.DryRun,
		RoundsMax: c.Rounds, TimeoutS: c.Timeout.Seconds(), Priority: c.Priority,
		HostInfo: timeline.Host(), Version: version.Get().String(),
	}
	for _, t := range c.Spec.Targets {
		start.Targets = append(start.Targets, timeline.StartTarget{Path: t.Path, Dev: t.File.Dev, Ino: t.File.Ino, Mode: fmt.Sprintf("%#o", t.Mode.Perm())})
	}
	if !c.LiftedAt.IsZero() {
		start.LiftedAt = c.LiftedAt.UTC().Format(time.RFC3339Nano)
		start.LiftCPUUS = c.LiftCPU.Microseconds()
	}
	msg := "freeze started"
	if len(c.Priority) > 0 {
		msg += "; priority: " + strings.Join(c.Priority, ", ")
	}
	r.rec.RecordOf(timeline.StageNone, timeline.StepStart, msg, start)
}

// SignalName names a signal as operators write it: SIGINT, not
// "interrupt".
func SignalName(s os.Signal) string {
	if n, ok := s.(syscall.Signal); ok {
		if name := unix.SignalName(n); name != "" {
			return name
		}
	}
	if s == nil {
		return ""
	}
	return s.String()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
