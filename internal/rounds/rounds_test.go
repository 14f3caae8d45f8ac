package rounds_test

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"freeze/internal/match"
	"freeze/internal/proctest"
	"freeze/internal/rounds"
)

// These test the kill rounds on a fixture /proc and a fixture group (no
// root, no real process); the live-chain tests in internal/stop/live are the
// proof against the kernel.

// held makes a tree with n processes of the chain held in a group.
func held(t *testing.T, n int) (*proctest.Tree, *proctest.Group, []int) {
	tr := proctest.New(t)
	g := tr.NewGroup()
	root := tr.Add(0, tr.Target)
	var pids []int
	for i := 0; i < n; i++ {
		pids = append(pids, tr.Add(root, tr.Target))
	}
	return tr, g, append(pids, root)
}

func config(t *testing.T, tr *proctest.Tree, g *proctest.Group, n int) rounds.Config {
	return rounds.Config{FS: tr.FS, Scanner: match.NewScanner(tr.FS, tr.Spec(t)), Group: g, Rounds: n,
		Deadline: time.Now().Add(10 * time.Second), Wait: 50 * time.Millisecond}
}

// moveAll puts pids into g, as a finished Grow leaves them.
func moveAll(g *proctest.Group, pids []int) { g.Put(pids...) }

// Zero takes two empty scans in a row: a process that appears between
// the first empty scan and the next (a child caught mid-fork) is found
// and killed, and only then is zero confirmed. Skipping the second scan
// reports zero with that child alive.
func TestZeroNeedsTwoEmptyScans(t *testing.T) {
	tr, g, pids := held(t, 5)
	moveAll(g, pids)
	// The group is asked once after round 1's kill (the wait for the
	// deaths), then right after round 2's scan, which finds nothing: the
	// late child comes then, after that scan and outside the group.
	late, empties := 0, 0
	g.OnPopulated = func(populated bool) {
		if !populated && len(tr.Live(tr.Target)) == 0 {
			if empties++; empties == 2 {
				late = tr.Add(0, tr.Target)
			}
		}
	}
	var seen []rounds.Round
	out, err := rounds.Run(config(t, tr, g, 20), func(r rounds.Round) { seen = append(seen, r) })
	if err != nil || !out.Zero {
		t.Fatalf("rounds: %v, zero %v", err, out.Zero)
	}
	if left := tr.Live(tr.Target); len(left) > 0 {
		t.Fatalf("zero confirmed with %v alive (the late child %d)", left, late)
	}
	if late == 0 || len(seen) != 2 || seen[1].Signaled != 1 {
		t.Fatalf("kill rounds %+v: want the group killed in round 1 and the late child %d signalled by pidfd in round 2", seen, late)
	}
}

// A member asleep in state D survives every round: the rounds run out,
// and it is listed with its wchan.
func TestRoundsRunOutWithASurvivorInStateD(t *testing.T) {
	tr, g, pids := held(t, 3)
	moveAll(g, pids)
	stuck := pids[1]
	tr.SetState(stuck, 'D', "blk_mq_get_tag")
	var seen []rounds.Round
	out, err := rounds.Run(config(t, tr, g, 3), func(r rounds.Round) { seen = append(seen, r) })
	if !errors.Is(err, rounds.ErrSurvivors) || out.Zero {
		t.Fatalf("rounds: %v, zero %v, want ErrSurvivors", err, out.Zero)
	}
	if len(seen) != 3 || len(out.Survivors) != 1 || out.Survivors[0].PID != stuck || out.Survivors[0].Wchan != "blk_mq_get_tag" {
		t.Fatalf("after %d rounds, survivors %+v: want pid %d in state D, asleep in blk_mq_get_tag", len(seen), out.Survivors, stuck)
	}
}

// Stop ends the rounds after the current one, with what is left still in
// the group.
func TestRoundsStopBetweenRounds(t *testing.T) {
	tr, g, pids := held(t, 3)
	moveAll(g, pids)
	tr.SetState(pids[0], 'D', "")
	c := config(t, tr, g, 20)
	c.Stop = func() bool { return true }
	n := 0
	_, err := rounds.Run(c, func(rounds.Round) { n++ })
	if !errors.Is(err, rounds.ErrStopped) || n != 1 {
		t.Fatalf("rounds with stop: %v after %d rounds, want ErrStopped after 1", err, n)
	}
	if m := g.Members(); len(m) != 1 || m[0] != pids[0] {
		t.Fatalf("group holds %v, want the survivor %d still in it", m, pids[0])
	}
}

// slowGroup is a fixture group whose members take their time to go: it
// reports itself populated until until, as a group of thousands of
// stopped processes does while their exits run.
type slowGroup struct {
	*proctest.Group
	until time.Time
}

func (g slowGroup) Populated() (bool, error) { return time.Now().Before(g.until), nil }

// A round that lasts says where it stands every second (#34: a run's
// record stopped at "fixed", and could not say whether the kill round
// was signalling, waiting, or stuck).
func TestALongRoundReportsItsProgress(t *testing.T) {
	tr, g, pids := held(t, 5)
	moveAll(g, pids)
	c := config(t, tr, g, 3)
	c.Group = slowGroup{Group: g, until: time.Now().Add(2500 * time.Millisecond)}
	c.Wait = 4 * time.Second
	var got []rounds.Progress
	c.Progress = func(p rounds.Progress) { got = append(got, p) }
	rounds.Run(c, func(rounds.Round) {})
	if len(got) < 2 {
		t.Fatalf("a round of 2.5 s reported %d times, want at least 2 (every second)", len(got))
	}
	if p := got[0]; p.N != 1 || p.Live != len(pids) || !p.Group {
		t.Errorf("first report %+v: want round 1, %d alive, the group still populated", p, len(pids))
	}
}

// dyingSlowly makes n processes of the chain outside any group, asleep
// where SIGKILL does not reach them at once (state D), and lets one die
// every gap, in the background, as a slow kernel runs the exits of a
// chain it was told to kill. The deaths keep the wall clock: the i-th
// is due at gap*i from now, and a dier that got no CPU for a while
// catches up at once (the test process starved on a loaded machine
// would otherwise stop the "kernel's" deaths with it).
func dyingSlowly(t *testing.T, n int, gap time.Duration) (*proctest.Tree, *proctest.Group, []int) {
	now := make(chan struct{})
	close(now)
	return dyingFrom(t, n, gap, now)
}

// dyingFrom is dyingSlowly with the deaths starting when start closes.
func dyingFrom(t *testing.T, n int, gap time.Duration, start <-chan struct{}) (*proctest.Tree, *proctest.Group, []int) {
	tr, g, pids := held(t, n-1)
	slices.Sort(pids) // they die in the order of their pids, the chain's root first
	for _, pid := range pids {
		tr.SetState(pid, 'D', "do_exit")
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-done:
			return
		case <-start:
		}
		t0 := time.Now()
		for i, pid := range pids {
			select {
			case <-done:
				return
			case <-time.After(time.Until(t0.Add(gap * time.Duration(i+1)))):
			}
			tr.Exit(pid)
		}
	}()
	t.Cleanup(func() { close(done); <-stopped })
	return tr, g, pids
}

// A round does not end while its kill is still taking effect: deaths
// that keep coming push the round's wait out, and no second round
// signals the dying again. Before, each round waited its Wait and the
// rounds ran out with a chain still dying (135 of 1,500 on the newest
// kernel under TCG).
func TestARoundWaitsWhileDeathsKeepComing(t *testing.T) {
	// 100 deaths 50 ms apart: 5 s, more than three rounds of 1.5 s. (A
	// wait of 500 ms, with deaths 20 ms apart, is as exposed as the
	// test below, which failed in CI when the whole test process got no
	// CPU for longer than its wait.)
	tr, g, pids := dyingSlowly(t, 100, 50*time.Millisecond)
	c := config(t, tr, g, 3)
	c.Wait = 1500 * time.Millisecond
	c.Deadline = time.Now().Add(30 * time.Second)
	var seen []rounds.Round
	out, err := rounds.Run(c, func(r rounds.Round) { seen = append(seen, r) })
	if err != nil || !out.Zero {
		t.Fatalf("rounds: %v (zero %v, %d left): the rounds ran out while the chain was still dying", err, out.Zero, len(tr.Live(tr.Target)))
	}
	// One kill round: a second would signal the dying again. (Its count
	// of signals may miss a death that came between its scan and its
	// kill on a loaded machine.)
	if len(seen) != 1 || seen[0].Signaled == 0 {
		t.Fatalf("kill rounds %+v: want one round that signalled the %d, then two empty scans", seen, len(pids))
	}
}

// An interrupt is heard inside a long round, not only after it.
func TestAnInterruptEndsALongRound(t *testing.T) {
	tr, g, _ := dyingSlowly(t, 100, 50*time.Millisecond)
	c := config(t, tr, g, 20)
	c.Wait = 5 * time.Second
	asked := 0
	c.Stop = func() bool { asked++; return asked >= 3 }
	n := 0
	_, err := rounds.Run(c, func(rounds.Round) { n++ })
	if !errors.Is(err, rounds.ErrStopped) || n != 1 {
		t.Fatalf("rounds with stop: %v after %d rounds, want ErrStopped after 1", err, n)
	}
	if left := tr.Live(tr.Target); len(left) == 0 {
		t.Fatal("the round waited for every death before it heard the interrupt")
	}
}

// A waiter that gets no CPU for longer than the round's wait (freeze at
// ordinary priority beside the dying chain) still sees the deaths of that
// time before it judges the round over: it looks, then judges. Judging
// first ended a round after 3.5 s with 87 of 1,500 seen gone while the
// chain kept dying, and the next round signalled the rest again.
func TestARoundLooksBeforeItJudgesItsWaitOver(t *testing.T) {
	// 150 deaths 40 ms apart (6 s); the waiter is held for 3 s at its
	// first report (1 s in), longer than the round's wait of 2 s, while
	// the deaths go on. (A wait of 1 s failed in CI: the whole test
	// process got no CPU for longer than that.)
	tr, g, pids := dyingSlowly(t, 150, 40*time.Millisecond)
	c := config(t, tr, g, 3)
	c.Wait = 2 * time.Second
	c.Deadline = time.Now().Add(30 * time.Second)
	held := false
	c.Progress = func(rounds.Progress) {
		if !held {
			held = true
			time.Sleep(3 * time.Second)
		}
	}
	var seen []rounds.Round
	out, err := rounds.Run(c, func(r rounds.Round) { seen = append(seen, r) })
	if err != nil || !out.Zero {
		t.Fatalf("rounds: %v (zero %v)", err, out.Zero)
	}
	if !held {
		t.Fatal("the round never reported: the test held nothing")
	}
	if len(seen) != 1 || seen[0].Signaled == 0 {
		t.Fatalf("kill rounds %+v: want one round that signalled the %d (a second round means the first ended with deaths unseen)", seen, len(pids))
	}
}

// Of thousands the group's kill reached, a round watches a sample while
// they die and the rest once the sample is gone; it still waits for
// every one of them, so no second round signals the dying again. 300
// members of a group that holds none (as the gate's set), dying one
// every 10 ms from the group's kill, in the order of their pids: the
// sample (every fourth, from the first) is gone with 47 still to die,
// for half a second. The deaths start at the kill, not before: started
// with the fixture, some died before the round's snapshot on a loaded
// machine (rehearsal 63), members the scan saw alive and the snapshot
// no longer held. The wait after the last death seen is 10 s: with
// three CPU hogs beside this test on 2 cores, the test process got no
// CPU for longer than a wait of 1.5 s, and the round ended with deaths
// unseen, as the tests above describe; it ends sooner when all are gone.
func TestARoundWaitsForAllItsGroupKilledBeyondTheSample(t *testing.T) {
	start := make(chan struct{})
	tr, g, pids := dyingFrom(t, 300, 10*time.Millisecond, start)
	g.Loose = true
	var once sync.Once
	g.OnKill = func() { once.Do(func() { close(start) }) }
	moveAll(g, pids)
	c := config(t, tr, g, 3)
	c.Wait = 10 * time.Second
	c.Deadline = time.Now().Add(60 * time.Second)
	var seen []rounds.Round
	out, err := rounds.Run(c, func(r rounds.Round) { seen = append(seen, r) })
	if err != nil || !out.Zero {
		t.Fatalf("rounds: %v (zero %v, %d left)", err, out.Zero, len(tr.Live(tr.Target)))
	}
	if len(seen) != 1 || seen[0].Inside != len(pids) || seen[0].Signaled != 0 {
		t.Fatalf("kill rounds %+v: want one round in which the group's kill reached all %d and none was signalled by pidfd (a second round means the first stopped waiting with some of them alive)", seen, len(pids))
	}
}
