package freeze_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/freeze"
	"freeze/internal/match"
	"freeze/internal/proc"
	"freeze/internal/proctest"
)

// These test Grow's fixed point on a fixture /proc and a fixture group
// (no root, no real process): the events a live chain produces only by
// chance, on cue. The live-chain tests in internal/stop/live are the proof
// against the kernel.

func grow(t *testing.T, tr *proctest.Tree, g *proctest.Group, within time.Duration, stop func() bool) ([]freeze.Round, match.Result, error) {
	t.Helper()
	var rounds []freeze.Round
	s := match.NewScanner(tr.FS, tr.Spec(t))
	res, err := freeze.Grow(tr.FS, s, g, time.Now().Add(within), stop, func(r freeze.Round) { rounds = append(rounds, r) })
	return rounds, res, err
}

// A chain that forks between every scan and the stop of its parents, for
// three rounds: Grow rescans until a scan finds none outside, and every
// live process of the chain ends in the group. With Grow stopped after
// one round, the children of rounds 1-3 stay outside.
func TestGrowReachesTheFixedPointOfAGrowingSet(t *testing.T) {
	tr := proctest.New(t)
	root := tr.Add(0, tr.Target)
	for i := 0; i < 4; i++ {
		tr.Add(root, tr.Target)
	}
	stranger := tr.Add(0, tr.Other)
	g := tr.NewGroup()
	g.OnSnapshot = func(round int) {
		if round <= 3 {
			tr.Fork(tr.Target) // born outside: their parents are not stopped yet
		}
	}
	// 60 s: a bound, not a speed (beside a CPU hog and another
	// package's chains a round of this fixture took 6 s, and 10 s ran
	// out after two).
	rounds, res, err := grow(t, tr, g, 60*time.Second, nil)
	if err != nil {
		t.Fatalf("grow: %v (rounds %+v)", err, rounds)
	}
	live := tr.Live(tr.Target)
	if !slices.Equal(g.Members(), live) {
		t.Fatalf("group holds %v, the chain is %v: the set is not fixed", g.Members(), live)
	}
	// Rounds 1-3 each leave 5 children outside; round 4 moves the last
	// of them; round 5 finds none outside.
	if len(rounds) != 5 || rounds[4].Outside != 0 || rounds[3].Moved != 5 || rounds[0].Moved != 5 {
		t.Fatalf("rounds %+v: want 5, each of the first four moving 5, none outside in the last", rounds)
	}
	if res.Live() != len(live) {
		t.Fatalf("the last scan saw %d, the chain is %d", res.Live(), len(live))
	}
	if slices.Contains(g.Members(), stranger) || strings.Contains(strings.Join(tr.Signals, " "), fmt.Sprintf("%d:", stranger)) {
		t.Fatalf("the stranger %d was moved or signalled: %v", stranger, tr.Signals)
	}
}

// A member that dies between its scan and its move is counted as gone,
// and the run goes on to the fixed set.
func TestGrowCountsAMemberThatDiesMidMove(t *testing.T) {
	tr := proctest.New(t)
	var pids []int
	for i := 0; i < 3; i++ {
		pids = append(pids, tr.Add(0, tr.Target))
	}
	g := tr.NewGroup()
	dying := pids[1]
	g.MoveErr = func(pid int) error {
		if pid == dying {
			tr.Exit(pid)
			return fmt.Errorf("pid %d: %w", pid, proc.ErrGone)
		}
		return nil
	}
	rounds, _, err := grow(t, tr, g, 10*time.Second, nil)
	if err != nil {
		t.Fatalf("grow: %v", err)
	}
	if rounds[0].Gone != 1 || rounds[0].Moved != 2 || !slices.Equal(g.Members(), []int{pids[0], pids[2]}) {
		t.Fatalf("rounds %+v, group %v: want the dying member counted gone and the other two moved", rounds, g.Members())
	}
}

// A pid reused by a stranger between the scan and the pin is left alone:
// not moved, not signalled, counted as reused.
func TestGrowLeavesAReusedPidAlone(t *testing.T) {
	tr := proctest.New(t)
	a := tr.Add(0, tr.Target)
	b := tr.Add(0, tr.Target)
	g := tr.NewGroup()
	g.OnSnapshot = func(round int) {
		if round == 1 {
			tr.Reuse(b, tr.Other)
		}
	}
	rounds, _, err := grow(t, tr, g, 10*time.Second, nil)
	if err != nil {
		t.Fatalf("grow: %v", err)
	}
	if rounds[0].Reused != 1 || !slices.Equal(g.Members(), []int{a}) {
		t.Fatalf("rounds %+v, group %v: want pid %d counted reused and only %d moved", rounds, g.Members(), b, a)
	}
	for _, s := range tr.Signals {
		if strings.HasPrefix(s, fmt.Sprintf("%d:", b)) {
			t.Fatalf("the stranger that took pid %d was signalled: %v", b, tr.Signals)
		}
	}
}

// A set that grows faster than the rounds ends at the deadline, saying
// how many are still outside; and an interrupt ends Grow between two
// whole rounds.
func TestGrowStopsAtTheDeadlineAndOnStop(t *testing.T) {
	t.Run("deadline", func(t *testing.T) {
		tr := proctest.New(t)
		tr.Add(0, tr.Target)
		g := tr.NewGroup()
		g.OnSnapshot = func(int) { tr.Fork(tr.Target) }
		_, _, err := grow(t, tr, g, 200*time.Millisecond, nil)
		if !errors.Is(err, freeze.ErrDeadline) {
			t.Fatalf("grow against endless growth: %v, want ErrDeadline", err)
		}
	})
	t.Run("stop", func(t *testing.T) {
		tr := proctest.New(t)
		tr.Add(0, tr.Target)
		g := tr.NewGroup()
		g.OnSnapshot = func(int) { tr.Fork(tr.Target) }
		asked := 0
		rounds, _, err := grow(t, tr, g, 10*time.Second, func() bool { asked++; return true })
		if !errors.Is(err, freeze.ErrStopped) || len(rounds) != 1 || asked != 1 {
			t.Fatalf("grow with stop: %v after %d rounds (asked %d), want ErrStopped after 1", err, len(rounds), asked)
		}
		if rounds[0].Moved != rounds[0].Outside-rounds[0].Gone-rounds[0].Reused {
			t.Fatalf("round %+v is not whole: everything pinned must be moved in", rounds[0])
		}
	})
}

// A member whose move fails for a reason other than its death (ENOMEM
// from a full map, as the gate's update gave in a VM) is left outside,
// stopped, while the rest of the round moves; the next round tries it
// again, and a round that can move none of what is outside ends Grow with
// ErrLeftOutside, naming it. One failed move used to end Grow at once:
// the stop order failed, and the chain ran on.
func TestGrowLeavesAMemberItCannotMoveStoppedOutside(t *testing.T) {
	tr := proctest.New(t)
	var pids []int
	for range 3 {
		pids = append(pids, tr.Add(0, tr.Target))
	}
	stuck := pids[1]
	g := tr.NewGroup()
	tries := 0
	g.MoveErr = func(pid int) error {
		if pid == stuck {
			tries++
			return unix.ENOMEM
		}
		return nil
	}
	rounds, _, err := grow(t, tr, g, 10*time.Second, nil)
	if !errors.Is(err, freeze.ErrLeftOutside) || !errors.Is(err, unix.ENOMEM) || !strings.Contains(err.Error(), fmt.Sprintf("(pid %d)", stuck)) {
		t.Fatalf("grow: %v; want ErrLeftOutside naming pid %d and the move's ENOMEM", err, stuck)
	}
	if len(rounds) != 2 || tries != 2 || rounds[0].Moved != 2 || len(rounds[0].FailedPIDs) != 1 || rounds[1].Moved != 0 || len(rounds[1].FailedPIDs) != 1 {
		t.Fatalf("rounds %+v, %d tries: want round 1 moving 2 and failing 1, round 2 trying it again and moving none", rounds, tries)
	}
	if !slices.Equal(g.Members(), []int{pids[0], pids[2]}) {
		t.Fatalf("group holds %v, want the two that moved", g.Members())
	}
	if p, _ := tr.Get(stuck); p.State != 'T' {
		t.Fatalf("pid %d, left outside, is in state %c: want stopped (T)", stuck, p.State)
	}
	for _, pid := range []int{pids[0], pids[2]} {
		if p, _ := tr.Get(pid); p.State == 'T' {
			t.Fatalf("pid %d, moved in, is still stopped: its SIGCONT was not sent", pid)
		}
	}
}

// A move that fails once and then succeeds (memory freed, a slot let go)
// ends at the fixed point: the round after moves it in.
func TestGrowMovesInAMemberWhoseMoveFailedOnce(t *testing.T) {
	tr := proctest.New(t)
	a := tr.Add(0, tr.Target)
	b := tr.Add(0, tr.Target)
	g := tr.NewGroup()
	failed := false
	g.MoveErr = func(pid int) error {
		if pid == b && !failed {
			failed = true
			return unix.ENOMEM
		}
		return nil
	}
	rounds, _, err := grow(t, tr, g, 10*time.Second, nil)
	if err != nil {
		t.Fatalf("grow: %v (rounds %+v)", err, rounds)
	}
	if !slices.Equal(g.Members(), []int{a, b}) || len(rounds[0].FailedPIDs) != 1 || rounds[0].FailedPIDs[0] != b {
		t.Fatalf("group %v, rounds %+v: want both moved, round 1 naming %d's failed move", g.Members(), rounds, b)
	}
	if p, _ := tr.Get(b); p.State == 'T' {
		t.Fatalf("pid %d, moved in on the second try, is still stopped", b)
	}
}
