package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"freeze/internal/containtest"
	"freeze/internal/proc"
	"freeze/internal/timeline"
)

// sampleEvery is how often the test reads every thread's class. A thread
// of freeze seen at SCHED_OTHER in two samples in a row has been below
// the run's priority for longer than this: the stall of issue #15 (four
// threads at SCHED_OTHER for five seconds and more, the real-time ones
// waiting on them).
const sampleEvery = 20 * time.Millisecond

// A lifted freeze, started as from a shell lifted with 'chrt -r -p 1 $$',
// against a churning chain of 3,000 orphans: every thread of freeze stays
// at SCHED_RR for the whole run, sampled from outside, and the run
// reaches zero. Before every thread inherited the lift, new threads
// started at SCHED_OTHER and waited for a relift goroutine that could
// itself be stuck on such a thread.
func TestLiftedRunNeverRunsAThreadBelowItsPriority(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the lift, and the chain's pids cgroup")
	}
	bin := buildFreeze(t)
	chain := containtest.Start(t, containtest.Spec{Shape: containtest.Churn, Cap: 3000, HopCap: 1000000,
		Timeout: 3 * time.Minute, Interval: 50 * time.Millisecond})
	if n := chain.WaitPopulation(2500, 90*time.Second); n < 2500 {
		t.Fatalf("the churn reached %d of 2,500 in 90 s", n)
	}
	removeGroupAtCleanup(t, chain.Path)
	tl := filepath.Join(t.TempDir(), "lifted.jsonl")
	fz := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 50, HopCap: 1, Timeout: 2 * time.Minute, Lifted: true,
		Command: []string{bin, "--path", chain.Path, "--timeout", "60s", "--timeline", tl}})

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
	if code := run([]string{"timeline", tl}, &md, &errs); code != 0 {
		t.Fatalf("freeze timeline %s: exit %d\n%s", tl, code, errs.String())
	}
	if out := md.String(); !strings.Contains(out, "Zero remain, confirmed") || strings.Contains(out, "stops early") {
		t.Errorf("the rendered timeline of a finished run does not say it reached zero, or calls it cut:\n%s", out)
	}
	t.Logf("%d samples, every %v; freeze took the chain to zero", samples, sampleEvery)
}
