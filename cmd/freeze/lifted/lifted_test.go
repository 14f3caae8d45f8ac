// Package lifted_test is one long test of the freeze command, on its own
// so that cmd/freeze stays well inside go test's 10 minutes on a slow
// host: a lifted freeze against a churn of 3,000 (most of its 100 s is
// the churn growing). It runs the command as built from ../.
package lifted_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"freeze/internal/containtest"
	"freeze/internal/postmortem"
	"freeze/internal/proc"
	"freeze/internal/runtest"
	"freeze/internal/testenv"
	"freeze/internal/timeline"
)

// sampleEvery is how often the test reads every thread's class. A thread
// of freeze seen at SCHED_OTHER in two samples in a row has been below
// the run's priority for longer than this: the stall of issue #15 (four
// threads at SCHED_OTHER for five seconds and more, the real-time ones
// waiting on them). The sampler itself runs at SCHED_RR 1 (containtest.LiftThread):
// with the gate the run lasts about 0.1 s, and a sampler at ordinary
// priority, beside the churn and the suite's other packages, once took
// two samples in it (rehearsal 88, every 20 ms then).
const sampleEvery = 5 * time.Millisecond

// A lifted freeze, started as from a shell lifted with 'chrt -r -p 1 $$',
// against a churning chain of 3,000 orphans: every thread of freeze stays
// at SCHED_RR for the whole run, sampled from outside, and the run
// reaches zero. Before every thread inherited the lift, new threads
// started at SCHED_OTHER and waited for a relift goroutine that could
// itself be stuck on such a thread.
func TestLiftedRunNeverRunsAThreadBelowItsPriority(t *testing.T) {
	testenv.RequireLive(t, "the lift, and the chain's pids cgroup")
	bin := containtest.GoBinary(t, "..", "freeze", "FREEZE_TEST_BIN")
	chain := containtest.Start(t, containtest.Spec{Shape: containtest.Churn, Cap: 3000, HopCap: 1000000,
		Timeout: 3 * time.Minute, Interval: 50 * time.Millisecond})
	runtest.RemoveAtCleanup(t, chain.Path)
	tl := filepath.Join(t.TempDir(), "lifted.jsonl")
	// Set up while the chain is small (held at its gate), let go at 2,500.
	fz := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 50, HopCap: 1, Timeout: 4 * time.Minute, Lifted: true, Held: true,
		Command: []string{bin, "--path", chain.Path, "--timeout", "60s", "--timeline", tl}})
	// On a machine busy with other packages' chains the churn grows
	// slowly (2,488 of 2,500 in 90 s was seen): past 2,000 it is the
	// churn this test is about.
	if n := chain.WaitPopulation(2500, 120*time.Second); n < 2000 {
		t.Fatalf("the churn reached %d of 2,500 in 120 s", n)
	} else if n < 2500 {
		t.Logf("the churn reached %d of 2,500 in 120 s: going on", n)
	}
	// The sampler on a thread of its own at SCHED_RR 1, as freeze's
	// threads are; no thread cloned from it inherits the class.
	restore, err := containtest.LiftThread(true)
	if err != nil {
		t.Fatalf("lift the sampler to SCHED_RR 1: %v", err)
	}
	defer restore()
	fz.Release()

	below := map[int]int{} // tid: consecutive samples at SCHED_OTHER
	var stalls []string
	samples := 0
	for {
		if _, done := fz.Exit(0); done {
			break
		}
		seen, _ := proc.Default.Policies(fz.Leader)
		if exe, _, err := proc.Default.ExePath(fz.Leader); err == nil && exe == fz.Path && len(seen) > 0 {
			samples++
			for tid, pol := range seen {
				if pol != 0 {
					delete(below, tid)
					continue
				}
				below[tid]++
				if below[tid] == 2 {
					stalls = append(stalls, fmt.Sprintf("thread %d at SCHED_OTHER in two samples %v apart (sample %d)", tid, sampleEvery, samples))
				}
			}
		}
		time.Sleep(sampleEvery)
	}
	restore()
	ws, _ := fz.Exit(time.Minute)
	events, _ := timeline.ReadFile(tl)
	for _, e := range events {
		if e.Step == "priority-dropped" {
			t.Logf("freeze dropped its priority during the run (%s): its threads were meant to be at SCHED_OTHER after that", e.Msg)
			stalls = nil
		}
	}
	if samples < 3 {
		t.Fatalf("only %d samples of freeze's threads were taken: the test saw too little of the run\n%s", samples, fz.Stderr())
	}
	if len(stalls) > 0 {
		t.Errorf("a thread of a lifted freeze ran below its priority (%d samples):\n%s", samples, strings.Join(stalls, "\n"))
	}
	if ws.ExitStatus() != 0 || len(chain.Survivors()) != 0 {
		t.Errorf("the lifted run did not reach zero: exit %d, %d survivors\n%s", ws.ExitStatus(), len(chain.Survivors()), fz.Stderr())
	}
	// The postmortem of this real, finished run says it finished, and
	// how (its last event is the peak memory, recorded after the zero).
	var md, errs bytes.Buffer
	render := exec.Command(bin, "timeline", tl)
	render.Stdout, render.Stderr = &md, &errs
	if err := render.Run(); err != nil {
		t.Fatalf("freeze timeline %s: %v\n%s", tl, err, errs.String())
	}
	if out := md.String(); !strings.Contains(out, "Zero remain, confirmed") || strings.Contains(out, "stops early") {
		t.Errorf("the rendered timeline of a finished run does not say it reached zero, or calls it cut:\n%s", out)
	}
	chartIsTheRunsCounts(t, events, md.String())
	t.Logf("%d samples, every %v; freeze took the chain to zero", samples, sampleEvery)
}

// chartIsTheRunsCounts checks the picture of a real run against its own
// record: one point for the match (its count), one per freeze round (the
// set it held), one per kill round (those alive), zero last; and the
// mermaid chart plots exactly those numbers.
func chartIsTheRunsCounts(t *testing.T, events []timeline.Event, md string) {
	t.Helper()
	var want []int
	for _, e := range events {
		var n struct {
			Matched *int `json:"matched"`
			Live    *int `json:"live"`
		}
		e.Decode(&n)
		switch {
		case e.Step == timeline.StepMatch && n.Matched != nil, e.Step == timeline.StepFreezeRound && n.Matched != nil:
			want = append(want, *n.Matched)
		case e.Step == timeline.StepKillRound && n.Live != nil:
			want = append(want, *n.Live)
		case e.Step == timeline.StepZero:
			want = append(want, 0)
		}
	}
	var got []int
	for _, p := range postmortem.Chart(events) {
		got = append(got, p.N)
	}
	if len(want) < 3 || !slices.Equal(got, want) || got[0] == 0 {
		t.Fatalf("the chart's points %v, the record's counts %v", got, want)
	}
	bar := make([]string, len(want))
	for i, n := range want {
		bar[i] = strconv.Itoa(n)
	}
	if !strings.Contains(md, "xychart-beta") || !strings.Contains(md, "    bar ["+strings.Join(bar, ", ")+"]\n") {
		t.Errorf("the mermaid chart does not plot %v:\n%s", want, md)
	}
}

func TestMain(m *testing.M) { os.Exit(containtest.Main(m)) }
