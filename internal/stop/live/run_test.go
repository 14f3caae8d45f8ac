package live_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"freeze/internal/containtest"
	"freeze/internal/freeze"
	"freeze/internal/interrupt"
	"freeze/internal/match"
	"freeze/internal/proc"
	"freeze/internal/runlock"
	"freeze/internal/stop"
	"freeze/internal/timeline"
)

// said collects what a run says.
type said struct {
	sync.Mutex
	warns, notes []string
}

func (s *said) output() stop.Output {
	return stop.Output{
		Warn: func(m string) { s.Lock(); s.warns = append(s.warns, m); s.Unlock() },
		Note: func(m string) { s.Lock(); s.notes = append(s.notes, m); s.Unlock() },
	}
}

// idleTarget is an executable in the test's own directory that no
// process runs.
func idleTarget(t *testing.T) match.Spec {
	t.Helper()
	p := filepath.Join(t.TempDir(), "idle")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tg, err := match.Resolve(p)
	if err != nil {
		t.Fatal(err)
	}
	return match.Spec{Targets: []match.Target{tg}}
}

// method is what the tests use: auto as root, sigstop for an ordinary
// user (the cgroup methods and the gate need root).
func method() freeze.Method {
	if os.Geteuid() == 0 {
		return freeze.Auto
	}
	return freeze.Sigstop
}

// request is a run of spec into tl. As an ordinary user it acts on what
// it can see (Force): another user's chains of the same name (other
// packages' tests, as root) cannot be inspected, and would refuse it.
func request(spec match.Spec, tl string) stop.Request {
	return stop.Request{Spec: spec, Method: method(), Limits: stop.Limits{Rounds: 20, Timeout: 120 * time.Second, RoundWait: 3 * time.Second},
		Timeline: tl, Command: []string{"freeze", "(test)"}, Force: os.Geteuid() != 0}
}

// brief is a report in a line.
func brief(r stop.Report) string {
	return fmt.Sprintf("outcome %s, exit %d, signal %q, matched %d, err %v, timeline %s", r.Outcome, r.Code(), r.Signal, r.Stop.Matched, r.Err, r.Timeline)
}

// The report is read off the run's own record: the outcome is the step
// that ended it, the code the table's, and the record has the lines an
// incident needs (start, the end, freeze's peak memory).
func TestReportIsTheRecordsEnd(t *testing.T) {
	tl := filepath.Join(t.TempDir(), "t.jsonl")
	var s said
	rep := stop.Run(context.Background(), request(idleTarget(t), tl), s.output())
	if rep.Outcome != timeline.StepNothingMatched || rep.Code() != timeline.ExitZero || rep.Err != nil || rep.Timeline != tl {
		t.Fatalf("%s; want nothing-matched, exit 0, timeline %s", brief(rep), tl)
	}
	events, err := timeline.ReadFile(tl)
	if err != nil {
		t.Fatal(err)
	}
	steps := map[timeline.Step]bool{}
	for _, e := range events {
		steps[e.Step] = true
	}
	for _, want := range []timeline.Step{timeline.StepStart, timeline.StepNothingMatched, timeline.StepMemory} {
		if !steps[want] {
			t.Errorf("the record lacks %q: %v", want, steps)
		}
	}
}

// A second run on a chain that a live run holds is refused before it
// starts: nothing recorded, the holder named.
func TestTheLockRefusesASecondRun(t *testing.T) {
	spec := idleTarget(t)
	held, err := runlock.Acquire(proc.Default, runlock.Dir(), freeze.GroupName(spec), []string{"freeze", "(the first run)"})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	tl := filepath.Join(t.TempDir(), "t.jsonl")
	var s said
	rep := stop.Run(context.Background(), request(spec, tl), s.output())
	var locked *stop.LockedError
	if rep.Outcome != timeline.StepRefused || rep.Code() != timeline.ExitRefused || !errors.As(rep.Err, &locked) {
		t.Fatalf("%s; want refused by the lock", brief(rep))
	}
	if locked.Holder.PID != os.Getpid() {
		t.Errorf("the holder named is pid %d, want this test's %d", locked.Holder.PID, os.Getpid())
	}
	if _, err := os.Stat(tl); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused run wrote its timeline: %v", err)
	}
	held.Release()
	if rep := stop.Run(context.Background(), request(spec, tl), s.output()); rep.Outcome != timeline.StepNothingMatched {
		t.Errorf("once the lock is released: %s", brief(rep))
	}
}

// A timeline that cannot be written does not stop the run: it is said,
// the record stays in memory and is saved in a fallback directory.
func TestAnUnwritableTimelineFallsBack(t *testing.T) {
	// Its directory is a regular file: no user, root included, can
	// create the timeline there.
	notDir := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tl := filepath.Join(notDir, "t.jsonl")
	var s said
	rep := stop.Run(context.Background(), request(idleTarget(t), tl), s.output())
	if rep.Outcome != timeline.StepNothingMatched {
		t.Fatalf("%s; want nothing-matched despite the timeline", brief(rep))
	}
	if len(s.warns) == 0 || !strings.Contains(s.warns[0], "cannot write the timeline") {
		t.Errorf("warnings %q: want the timeline's", s.warns)
	}
	var saved string
	for _, n := range s.notes {
		if p, ok := strings.CutPrefix(n, "the timeline was saved instead to "); ok {
			saved = p
		}
	}
	if saved == "" {
		t.Fatalf("no saved copy said; notes %q", s.notes)
	}
	defer os.Remove(saved)
	events, err := timeline.ReadFile(saved)
	if err != nil || len(events) < 2 || events[0].Step != timeline.StepStart {
		t.Fatalf("the saved copy %s: %d events, %v", saved, len(events), err)
	}
}

// SIGINT mid-run (the command's catcher ends the run's context with it:
// cmd/freeze's interrupt tests send the real signal) ends it between two
// steps with the chain still held, is recorded, and the same request run
// again finishes the chain.
func TestSIGINTEndsTheRunBetweenSteps(t *testing.T) {
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Tree, Cap: 50, HopCap: 1000000, Timeout: 300 * time.Second, Interval: 100 * time.Millisecond})
	if n := c.WaitPopulation(50, 90*time.Second); n < 50 {
		t.Fatalf("chain reached %d of 50", n)
	}
	tg, err := match.Resolve(c.Path)
	if err != nil {
		t.Fatal(err)
	}
	spec := match.Spec{Targets: []match.Target{tg}}
	t.Cleanup(func() { containtest.RemoveGroups(t, freeze.GroupDirs(freeze.GroupName(spec))...) })
	var s said
	out := s.output()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sent, seen := false, make(chan struct{})
	out.Blocking = true // the run waits at the match step below
	out.Progress = func(e timeline.Event) {
		switch {
		case e.Step == timeline.StepMatch && !sent:
			sent = true
			interrupt.Cancel(cancel, syscall.SIGINT) // as an operator's ^C reaches freeze
			// Hold the run here until the signal is recorded: the
			// recording is asynchronous.
			select {
			case <-seen:
			case <-time.After(10 * time.Second):
			}
		case e.Step == timeline.StepSignal:
			close(seen)
		}
	}
	rep := stop.Run(ctx, request(spec, filepath.Join(t.TempDir(), "t.jsonl")), out)
	if rep.Outcome != timeline.StepInterrupted || rep.Code() != timeline.ExitInterrupted || rep.Signal != "SIGINT" {
		t.Fatalf("%s; want interrupted by SIGINT, exit 4", brief(rep))
	}
	if n := len(c.Survivors()); n < 50 {
		t.Fatalf("an interrupt between steps killed part of the chain: %d of 50 alive", n)
	}
	rep = stop.Run(context.Background(), request(spec, filepath.Join(t.TempDir(), "t2.jsonl")), s.output())
	if rep.Outcome != timeline.StepZero {
		t.Fatalf("the run again: %s", brief(rep))
	}
	if left := c.Survivors(); len(left) > 0 {
		t.Fatalf("%d of the chain alive after zero", len(left))
	}
}
