package stop

import (
	"context"
	"fmt"
	"freeze/internal/interrupt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/freeze"
	"freeze/internal/match"
	"freeze/internal/proc"
	"freeze/internal/proctest"
	"freeze/internal/timeline"
)

// The stop order's paths, method by method, on a fixture /proc without
// root: the live-chain tests in internal/stop/live are the proof against
// the kernel, these the proof of the order's own logic, with events no
// live chain produces on cue (a chain that forks between every scan and its stop, a
// member in state D, an interrupt between two freeze rounds).
//
// They run as nobody, as every test of this package does (TestMain).

// fixtureMethods are the methods the table runs the order with: every
// --method, bpf and auto included.
var fixtureMethods = []freeze.Method{freeze.Cgroup2, freeze.Cgroup1, freeze.Sigstop, freeze.None, freeze.Bpf, freeze.Auto}

// TestStopOrderPathsAsNobody runs the table.
func TestStopOrderPathsAsNobody(t *testing.T) {
	t.Run("table", stopOrderTable)
}

// fixture is one case's tree, chain and opener.
type fixture struct {
	tr      *proctest.Tree
	root    int
	grows   int // freeze rounds in which the chain forks between scan and stop
	rounds  int // snapshots seen
	onRound func(n int)
	group   freeze.Group
}

// opener opens m's group over the fixture: the real sigstop and none
// groups (they act through the fixture's signals), and a fixture cgroup
// for cgroup2 and cgroup1 (and for auto, as the first that works). Every
// group's Snapshot is where the chain forks, as a chain does between a
// scan and the stop.
func (fx *fixture) opener(fs proc.FS, m freeze.Method, name string) (freeze.Group, string, error) {
	var g freeze.Group
	switch m {
	case freeze.Sigstop, freeze.None:
		real, _, err := freeze.Open(fs, m, name, freeze.Options{})
		if err != nil {
			return nil, "", err
		}
		g = real
	case freeze.Auto:
		g = fx.tr.NewGroupAs(freeze.Cgroup2)
	default:
		g = fx.tr.NewGroupAs(m)
	}
	fx.group = &forking{Group: g, fx: fx}
	return fx.group, "the fixture's " + string(g.Method()), nil
}

// forking is a group whose Snapshot lets the chain fork first, for the
// fixture's first grows rounds.
type forking struct {
	freeze.Group
	fx *fixture
}

func (f *forking) Snapshot() (func(match.Proc) bool, error) {
	f.fx.rounds++
	if f.fx.rounds <= f.fx.grows {
		f.fx.tr.Fork(f.fx.tr.Target)
	}
	if f.fx.onRound != nil {
		f.fx.onRound(f.fx.rounds)
	}
	return f.Group.Snapshot()
}

// newFixture is a chain of a root and two generations (7 processes),
// with a stranger of another file beside it.
func newFixture(t *testing.T) *fixture {
	tr := proctest.New(t)
	root := tr.Add(0, tr.Target)
	for range 2 {
		tr.Fork(tr.Target)
	}
	tr.Add(0, tr.Other)
	return &fixture{tr: tr, root: root}
}

func (fx *fixture) config(t *testing.T, m freeze.Method) Config {
	return Config{FS: fx.tr.FS, Spec: fx.tr.Spec(t), Method: m, Open: fx.opener,
		Rounds: 6, Timeout: 20 * time.Second, RoundWait: 50 * time.Millisecond, Force: true}
}

// held reports whether every live process of the chain is held.
func (fx *fixture) held(t *testing.T) bool {
	live := fx.tr.Live(fx.tr.Target)
	if len(live) == 0 {
		return false
	}
	for _, pid := range live {
		if !fx.isHeld(pid) {
			p, _ := fx.tr.Get(pid)
			t.Logf("pid %d (state %c) is not held", pid, p.State)
			return false
		}
	}
	return true
}

// isHeld reports whether pid is held: in the fixture group, or stopped
// (state T) for sigstop.
func (fx *fixture) isHeld(pid int) bool {
	if g, ok := fx.group.(*forking).Group.(*proctest.Group); ok && slices.Contains(g.Members(), pid) {
		return true
	}
	p, ok := fx.tr.Get(pid)
	return ok && p.State == 'T'
}

func count(events []timeline.Event, step timeline.Step) int {
	n := 0
	for _, e := range events {
		if e.Step == step {
			n++
		}
	}
	return n
}

func kills(tr *proctest.Tree) int {
	n := 0
	for _, s := range tr.Signals {
		if strings.HasSuffix(s, ":SIGKILL") {
			n++
		}
	}
	return n
}

func stopOrderTable(t *testing.T) {
	if os.Getuid() == 0 {
		t.Fatal("the table runs as nobody, never as root")
	}
	for _, m := range fixtureMethods {
		t.Run(string(m), func(t *testing.T) {
			t.Run("fixed-point", func(t *testing.T) { fixedPoint(t, m) })
			t.Run("zero", func(t *testing.T) { zero(t, m) })
			t.Run("interrupted", func(t *testing.T) { interrupted(t, m) })
			t.Run("survivors", func(t *testing.T) { survivors(t, m) })
			t.Run("nothing-matched", func(t *testing.T) { nothingMatched(t, m) })
			t.Run("move-fails", func(t *testing.T) { moveFails(t, m) })
		})
	}
}

// fixedPoint: the chain forks between the scan and the stop in each of
// the first three freeze rounds; --hold ends with every one of its
// processes held, after a round that found none outside.
func fixedPoint(t *testing.T, m freeze.Method) {
	fx := newFixture(t)
	fx.grows = 3
	c := fx.config(t, m)
	c.Hold = true
	rec, _ := timeline.New("", nil)
	out, err := Order(context.Background(), c, rec)
	if m == freeze.None {
		// none freezes nothing: a hold has nothing to hold with.
		if out.Kind == Held && fx.held(t) {
			t.Fatalf("none held the chain")
		}
		return
	}
	if err != nil || out.Kind != Held {
		t.Fatalf("kind %v, err %v; want held", out.Kind, err)
	}
	if !fx.held(t) {
		t.Fatalf("the fixed set is not the chain: a process forked in the last round is outside")
	}
	if n := count(rec.Events(), timeline.StepFreezeRound); n < 4 {
		t.Errorf("%d freeze rounds, want at least 4 (3 that found new forks, 1 that found none)", n)
	}
	if count(rec.Events(), timeline.StepFixed) != 1 {
		t.Errorf("no fixed step recorded")
	}
	if k := kills(fx.tr); k != 0 {
		t.Errorf("%d SIGKILLs in a hold", k)
	}
}

// zero: the same chain, killed: none of it is left, the stranger is.
func zero(t *testing.T, m freeze.Method) {
	fx := newFixture(t)
	fx.grows = 2
	rec, _ := timeline.New("", nil)
	out, err := Order(context.Background(), fx.config(t, m), rec)
	if err != nil || out.Kind != Zero {
		t.Fatalf("kind %v, err %v; want zero", out.Kind, err)
	}
	if live := fx.tr.Live(fx.tr.Target); len(live) != 0 {
		t.Fatalf("%d of the chain alive after zero: %v", len(live), live)
	}
	if len(fx.tr.Live(fx.tr.Other)) != 1 {
		t.Fatalf("the stranger is gone")
	}
	if count(rec.Events(), timeline.StepZero) != 1 {
		t.Errorf("no zero step recorded")
	}
}

// interrupted: SIGINT between two freeze rounds ends the run there, with
// nothing killed.
func interrupted(t *testing.T, m freeze.Method) {
	fx := newFixture(t)
	fx.grows = 3
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	fx.onRound = func(n int) {
		if n == 2 {
			interrupt.Cancel(cancel, syscall.SIGINT)
		}
	}
	c := fx.config(t, m)
	rec, _ := timeline.New("", nil)
	out, err := Order(ctx, c, rec)
	if out.Kind != Interrupted || err == nil {
		t.Fatalf("kind %v, err %v; want interrupted", out.Kind, err)
	}
	if count(rec.Events(), timeline.StepInterrupted) != 1 {
		t.Errorf("no interrupted step recorded")
	}
	if m == freeze.None {
		// none freezes nothing: the chain forks into the kill rounds,
		// and the interrupt lands there, between two rounds.
		if out.Stage != timeline.StageKill {
			t.Fatalf("interrupted in %v, want the kill rounds", out.Stage)
		}
		return
	}
	if out.Stage != timeline.StageFreeze {
		t.Fatalf("interrupted in %v, want between two freeze rounds", out.Stage)
	}
	if k := kills(fx.tr); k != 0 {
		t.Fatalf("%d SIGKILLs after an interrupt in the freeze step", k)
	}
	// What the rounds before it froze stays frozen (the last round's
	// forks are outside: the set was not fixed yet).
	if !fx.isHeld(fx.root) {
		t.Fatalf("after an interrupt between freeze rounds, the chain's root is not held")
	}
}

// survivors: a process of the chain in state D outlives every round, and
// is named.
func survivors(t *testing.T, m freeze.Method) {
	fx := newFixture(t)
	stuck := fx.tr.Live(fx.tr.Target)[1]
	fx.tr.SetState(stuck, 'D', "fuse_wait")
	rec, _ := timeline.New("", nil)
	out, err := Order(context.Background(), fx.config(t, m), rec)
	if out.Kind != Survivors || err == nil {
		t.Fatalf("kind %v, err %v; want survivors", out.Kind, err)
	}
	if len(out.Survivors) != 1 || out.Survivors[0].PID != stuck {
		t.Fatalf("survivors %+v, want pid %d alone", out.Survivors, stuck)
	}
	if live := fx.tr.Live(fx.tr.Target); len(live) != 1 {
		t.Fatalf("alive after the rounds: %v, want the one in state D", live)
	}
	if m != freeze.None && (count(rec.Events(), timeline.StepFixed) != 1 || count(rec.Events(), timeline.StepNotFixed) != 0) {
		t.Errorf("a member in state D kept the set from its fixed point")
	}
}

// nothingMatched: only the stranger runs; nothing is signalled and no
// group opened.
func nothingMatched(t *testing.T, m freeze.Method) {
	tr := proctest.New(t)
	tr.Add(0, tr.Other)
	fx := &fixture{tr: tr}
	rec, _ := timeline.New("", nil)
	out, err := Order(context.Background(), fx.config(t, m), rec)
	if err != nil || out.Kind != NothingMatched {
		t.Fatalf("kind %v, err %v; want nothing matched", out.Kind, err)
	}
	if len(tr.Signals) != 0 || fx.group != nil {
		t.Fatalf("signals %v, group %v: want none", tr.Signals, fx.group)
	}
}

// moveFails: one process of the chain can never be moved in (every move
// fails with ENOMEM, as the gate's map update did in a VM). It is left
// outside, stopped, and the kill rounds end it with the rest: zero. One
// failed move used to end the order there, and the chain ran on.
func moveFails(t *testing.T, m freeze.Method) {
	if m == freeze.Sigstop || m == freeze.None {
		t.Skip("sigstop and none move nothing into a group: no move to fail on cue")
	}
	failing := func(fx *fixture) (stuck int) {
		stuck = fx.tr.Live(fx.tr.Target)[2]
		fx.onRound = func(n int) {
			if n == 1 {
				fx.group.(*forking).Group.(*proctest.Group).MoveErr = func(pid int) error {
					if pid == stuck {
						return unix.ENOMEM
					}
					return nil
				}
			}
		}
		return stuck
	}
	// With --hold: the rest held in the group, this one stopped outside,
	// and the outcome names it for the thaw.
	fx := newFixture(t)
	stuck := failing(fx)
	c := fx.config(t, m)
	c.Hold = true
	rec, _ := timeline.New("", nil)
	out, err := Order(context.Background(), c, rec)
	if err != nil || out.Kind != Held || !slices.Equal(out.StoppedOutside, []int{stuck}) {
		t.Fatalf("hold: kind %v, err %v, stopped outside %v; want held, naming pid %d", out.Kind, err, out.StoppedOutside, stuck)
	}
	if p, _ := fx.tr.Get(stuck); p.State != 'T' || kills(fx.tr) != 0 {
		t.Fatalf("hold: pid %d in state %c, %d SIGKILLs: want it stopped, nothing killed", stuck, p.State, kills(fx.tr))
	}
	// Without: the kill rounds end it with the rest.
	fx = newFixture(t)
	stuck = failing(fx)
	rec, _ = timeline.New("", nil)
	out, err = Order(context.Background(), fx.config(t, m), rec)
	if err != nil || out.Kind != Zero {
		t.Fatalf("kind %v, err %v; want zero, the process that could not be moved killed by pidfd", out.Kind, err)
	}
	if live := fx.tr.Live(fx.tr.Target); len(live) != 0 {
		t.Fatalf("%d of the chain alive after zero: %v", len(live), live)
	}
	if !slices.Contains(fx.tr.Signals, fmt.Sprintf("%d:SIGSTOP", stuck)) || !slices.Contains(fx.tr.Signals, fmt.Sprintf("%d:SIGKILL", stuck)) {
		t.Fatalf("signals %v: want pid %d stopped, then killed by pidfd", fx.tr.Signals, stuck)
	}
	if len(fx.tr.Live(fx.tr.Other)) != 1 {
		t.Fatalf("the stranger is gone")
	}
	var said string
	for _, e := range rec.Events() {
		if e.Step == timeline.StepNotFixed {
			said = e.Msg
		}
	}
	if !strings.Contains(said, fmt.Sprintf("(pid %d) could not be moved", stuck)) {
		t.Fatalf("not-fixed step %q: want it to name pid %d, left outside", said, stuck)
	}
}
