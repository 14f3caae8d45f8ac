package live_test

import (
	"context"
	"errors"
	"freeze/internal/interrupt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"freeze/internal/containtest"
	"freeze/internal/freeze"
	"freeze/internal/proc"
	"freeze/internal/stop"
	"freeze/internal/timeline"
)

// An interrupt ends the run between two steps with the chain as it was
// held: frozen in the group when the interrupt came during freeze growth,
// untouched when it came before anything changed. The same run started
// again reuses the group and reaches zero. The interrupt is delivered
// exactly as the command delivers SIGINT: on the Interrupt channel, here
// sent by the observer as the step it names is recorded.
func TestInterruptLeavesTheChainHeld(t *testing.T) {
	requireRoot(t)
	supported(t, freeze.Cgroup2)
	cases := []struct {
		name      string
		at        timeline.Step // the step whose record triggers the interrupt; "" = before the run
		wantStage timeline.Stage
		wantHeld  bool // the chain is whole and frozen in the group afterwards
	}{
		{"before-anything", "", timeline.StageMatch, false},
		{"after-first-freeze-round", timeline.StepFreezeRound, timeline.StageFreeze, true},
		{"during-kill-rounds", timeline.StepKillRound, timeline.StageKill, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := containtest.Start(t, containtest.Spec{Shape: containtest.Tree, Cap: 300, HopCap: 1000000, Timeout: 90 * time.Second, Interval: 100 * time.Millisecond})
			if n := c.WaitPopulation(300, 30*time.Second); n != 300 {
				t.Fatalf("chain reached %d of 300", n)
			}
			raise(t)
			cfg := config(t, freeze.Cgroup2, c.Path)
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			if tc.at == "" {
				interrupt.Cancel(cancel, syscall.SIGINT)
			}
			sent := false
			rec, _ := timeline.New("", func(e timeline.Event) {
				if e.Step == tc.at && !sent {
					sent = true
					interrupt.Cancel(cancel, syscall.SIGINT)
				}
			})
			out, err := stop.Order(ctx, cfg, rec)
			if !errors.Is(err, stop.ErrInterrupted) {
				t.Fatalf("run: %v, want ErrInterrupted (outcome %+v)", err, out)
			}
			if out.Stage != tc.wantStage || out.Signal != syscall.SIGINT {
				t.Fatalf("interrupted at stage %d by %v, want stage %d by SIGINT", out.Stage, out.Signal, tc.wantStage)
			}
			var recorded *timeline.Event
			for _, e := range rec.Events() {
				if e.Step == "interrupted" {
					e := e
					recorded = &e
				}
			}
			if recorded == nil || !strings.Contains(recorded.Msg, "SIGINT") {
				t.Fatalf("the timeline does not record the interrupt: %+v", recorded)
			}
			// Where the run froze: cgroup2 freezes where the chain runs,
			// a group nested in its own (under CI's freeze run, the one
			// it shares with go test) or one at the top (the root).
			mustMount(t)
			switch {
			case tc.wantStage == timeline.StageMatch:
				if left := freeze.GroupDirs(freeze.GroupName(cfg.Spec)); len(left) > 0 {
					t.Fatalf("an interrupt before anything changed left groups %v", left)
				}
				if n := c.Population(); n != 300 {
					t.Fatalf("chain at %d after an interrupt before anything changed, want 300", n)
				}
			case tc.wantHeld:
				group := out.Group.Where()
				rounds := 0
				for _, e := range rec.Events() {
					if e.Step == "freeze-round" {
						rounds++
					}
				}
				if rounds != 1 || hasStep(rec, timeline.StepFixed) {
					t.Fatalf("%d freeze rounds ran (fixed set: %v); the interrupt after round 1 must end growth there", rounds, hasStep(rec, timeline.StepFixed))
				}
				if n := c.Population(); n < 300 {
					t.Fatalf("chain at %d after the interrupt, want it whole (300): nothing may be killed", n)
				}
				events, err := os.ReadFile(filepath.Join(group, "cgroup.events"))
				if err != nil || !strings.Contains(string(events), "frozen 1") {
					t.Fatalf("group %s after the interrupt: %q %v, want frozen 1", group, events, err)
				}
				procs, _ := os.ReadFile(filepath.Join(group, "cgroup.procs"))
				if n := len(strings.Fields(string(procs))); n < 200 {
					t.Fatalf("group holds %d processes after round 1, want most of the 300", n)
				}
				for _, pid := range c.Survivors() {
					if st, err := proc.Default.ReadStat(pid); err == nil && st.State == 'T' {
						// A stopped task outside the group would be a
						// half-moved round.
						if !inGroup(group, pid) {
							t.Fatalf("pid %d is stopped outside the group: a half-moved round", pid)
						}
					}
				}
			}
			// Run again, as the printed command does: it reuses the
			// held group and reaches zero.
			rec2, _ := timeline.New("", nil)
			out2, err := stop.Order(context.Background(), cfg, rec2)
			if err != nil || out2.Kind != stop.Zero {
				t.Fatalf("rerun after the interrupt: %+v %v", out2, err)
			}
			if tc.wantHeld && !hasStep(rec2, timeline.StepReuse) {
				t.Fatal("the rerun did not reuse the held group")
			}
			if left := c.Survivors(); len(left) > 0 {
				t.Fatalf("%d alive after the rerun", len(left))
			}
			noGroupLeft(t, cfg.Spec)
		})
	}
}

func mustMount(t *testing.T) string {
	m, err := freeze.Cgroup2Mount()
	if err != nil {
		t.Skip(err)
	}
	return m
}

func inGroup(group string, pid int) bool {
	b, _ := os.ReadFile(filepath.Join(group, "cgroup.procs"))
	for _, f := range strings.Fields(string(b)) {
		if f == strconv.Itoa(pid) {
			return true
		}
	}
	return false
}

func hasStep(rec *timeline.Recorder, step timeline.Step) bool {
	for _, e := range rec.Events() {
		if e.Step == step {
			return true
		}
	}
	return false
}
