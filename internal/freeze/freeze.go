// Package freeze stops a chain from growing: it puts every matched process
// into a set that cannot start new processes (a cgroup v2 group frozen
// before anything is moved in, else a v1 freezer group, else SIGSTOP) and
// repeats until a scan finds no live match outside that set.
//
// Every move goes through a proc.Handle opened after the scan and checked
// against the start time, so a reused pid is never moved. Each Group also
// has its own kill of the whole set (cgroup.kill, the gate's kill
// iterator, a pidfd signal each), but the package never decides to kill:
// the rounds package calls Kill, round by round, against the fixed set.
package freeze

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/gate"
	"freeze/internal/match"
	"freeze/internal/proc"
	"freeze/internal/show"
)

// Method is a way to freeze.
type Method string

const (
	Auto    Method = "auto"
	Cgroup2 Method = "cgroup2"
	Cgroup1 Method = "cgroup1"
	Sigstop Method = "sigstop"
)

// ErrUnknownMethod and ErrNoneNeedsRevoke refuse a --method.
var (
	ErrUnknownMethod   = errors.New("unknown method")
	ErrNoneNeedsRevoke = errors.New("--method none kills without freezing anything, which loses against a growing chain")
)

// ParseMethod reads a --method. none is taken only together with
// --revoke-exec (revoke): without it nothing would stop the chain's
// growth.
func ParseMethod(name string, revoke bool) (Method, error) {
	switch m := Method(name); m {
	case Auto, Bpf, Cgroup2, Cgroup1, Sigstop:
		return m, nil
	case None:
		if !revoke {
			return "", ErrNoneNeedsRevoke
		}
		return m, nil
	}
	return "", fmt.Errorf("%w %q", ErrUnknownMethod, name)
}

// TriesGate reports whether a run of m tries the kernel gate first:
// bpf, and auto, where it comes first.
func (m Method) TriesGate() bool { return m == Bpf || m == Auto }

// GateOnly reports whether m asked for the gate itself (bpf): where it
// is not available, the run falls back as auto would, and says so.
func (m Method) GateOnly() bool { return m == Bpf }

// FinishWith is the --method a command that finishes a run must name
// for the group g left its chain in: cgroup1 for a v1 freezer group, ""
// (the default) for every other. A task frozen in a v1 freezer acts on
// SIGKILL only once thawed, and only the cgroup1 method thaws after its
// kills: the finishing command printed after '--method cgroup1 --hold'
// used to take the gate (auto), whose kills waited on the frozen tasks,
// and left survivors.
func FinishWith(g Group) Method {
	if g != nil && g.Method() == Cgroup1 {
		return Cgroup1
	}
	return ""
}

// Methods in the order auto tries them.
var Methods = []Method{Cgroup2, Cgroup1, Sigstop}

// ErrNoCgroup means the method cannot be used on this machine or by this
// user; auto then tries the next one.
var ErrNoCgroup = errors.New("cgroup method not available")

// ErrDeadline means the run's deadline passed before the set was fixed.
var ErrDeadline = errors.New("deadline passed")

// ErrStopped means the caller asked Grow to stop (an interrupt) between
// two rounds. Every round is whole: what it stopped was moved in (or is
// gone) and continued, so the set is never left half-moved.
var ErrStopped = errors.New("stopped between rounds")

// ErrLeftOutside means a round moved none of the matches still outside
// the set, each move having failed for a reason other than its death (a
// full map, a group's limit, memory a fork bomb has taken). Grow has
// stopped each of them by SIGSTOP where it runs; the kill rounds signal
// them by pidfd, as they do every match outside the group. One failed
// move used to end the stop order, and the chain ran on.
var ErrLeftOutside = errors.New("left outside the set")

// A Group is the frozen set. What differs between the methods is a
// method of it. The gate's one step before the first scan is Seal
// (bpf.go), which the stop order calls where the Method tries the gate
// (TriesGate, GateOnly), rather than comparing names; Open then makes
// the sealed chain the run's Group.
type Group interface {
	Method() Method
	// Where names the set: a cgroup directory, or "SIGSTOP".
	Where() string
	// Freezes reports whether the method freezes anything at all: false
	// only for none, which kills without freezing.
	Freezes() bool
	// Holds reports whether the set is a container that keeps its
	// members frozen after freeze exits, and that nobody but its owner
	// can thaw (a cgroup); false for SIGSTOP, which anyone may continue.
	Holds() bool
	// StopFirst reports whether Grow should SIGSTOP a batch before
	// moving it in: a move into a cgroup waits for every fork in flight
	// on the machine, so moving a set that is still forking is slow.
	StopFirst() bool
	// KillReachesAll reports whether Kill reaches every member, so the
	// kill rounds need not signal members one by one.
	KillReachesAll() bool
	// ThawHint is the command that thaws the set instead of killing it.
	ThawHint() string
	// Reused reports that the group was left by an earlier --hold run.
	Reused() bool
	// Snapshot returns a test for "already in the frozen set", valid for
	// the scan it is applied to.
	Snapshot() (func(match.Proc) bool, error)
	// Move puts one pinned process into the set.
	Move(h *proc.Handle) error
	// WaitFrozen waits until every member is frozen, or deadline.
	WaitFrozen(deadline time.Time) error
	// Kill is the method's own kill of every member; rounds calls it.
	Kill() error
	// Populated reports whether any live process is in the set; false for
	// sigstop, which has no container to ask.
	Populated() (bool, error)
	// Remove deletes the group; it fails while members remain.
	Remove() error
	// Notes are facts worth a line in the timeline (pids.max set or not).
	Notes() []string
	// Terms are the words a round's line says in this set's terms: what
	// a freeze round does to a match (moved in, marked), and where a kill
	// round finds it.
	Terms() (moved, inside string)
}

// RemovedWords says, for the record, what g's Remove undid: "removed
// DIR", or for cgroup2's places what each got back.
func RemovedWords(g Group) string {
	if w, ok := g.(interface{ removedWords() string }); ok {
		return w.removedWords()
	}
	return "removed " + g.Where()
}

// cgroupTerms are the words of every set that moves processes in.
func cgroupTerms() (moved, inside string) { return "moved in", "in the group" }

// Opener makes the group of a cgroup method or sigstop for name:
// openMethod, or a test's (Options.Open).
type Opener func(fs proc.FS, m Method, name string) (Group, string, error)

// Options are what Open needs beyond the method.
type Options struct {
	// Sealed is the chain the gate holds from before the first scan
	// (Seal), or nil: then Open makes a group.
	Sealed *Sealed
	// SealWhy is why the gate could not seal, where it was tried.
	SealWhy string
	// Hold: the set must hold once the run ends (--hold), so a sealed
	// chain goes into a group too.
	Hold bool
	// Open makes the group of a method; nil is freeze's own.
	Open Opener
}

// Open is the one door to a run's frozen set. For bpf (and auto, where
// the gate sealed the chain) it is the sealed chain; else it makes (or,
// after --hold, reuses) the group for name with method m; for bpf
// without its gate, a group of the first method that works. With Auto it
// tries each method in turn. It says why it took the one it did and why
// it passed over the others.
func Open(fs proc.FS, m Method, name string, o Options) (Group, string, error) {
	open := o.Open
	if open == nil {
		open = openMethod
	}
	switch {
	case o.Sealed != nil:
		return openGated(fs, o.Sealed.Gate, o.Hold, name)
	case m.GateOnly():
		g, why, err := open(fs, Auto, name)
		return g, "asked for bpf, but the gate is not available (" + o.SealWhy + "); " + why, err
	default:
		g, why, err := open(fs, m, name)
		if o.SealWhy != "" {
			why += "; passed over bpf (" + o.SealWhy + ")"
		}
		return g, why, err
	}
}

// openMethod makes (or, after --hold, reuses) the group for name with a
// cgroup method or sigstop; with Auto, the first that works.
func openMethod(fs proc.FS, m Method, name string) (Group, string, error) {
	if m != Auto {
		g, err := open(fs, m, name)
		if err != nil {
			return nil, "", err
		}
		return g, "asked for with --method " + string(m), nil
	}
	var skipped string
	for _, m := range Methods {
		g, err := open(fs, m, name)
		if err == nil {
			why := "first method that works here"
			if skipped != "" {
				why += "; passed over " + skipped
			}
			return g, why, nil
		}
		skipped += fmt.Sprintf("%s (%v) ", m, err)
	}
	return nil, "", fmt.Errorf("no freeze method works here: %s", skipped)
}

func open(fs proc.FS, m Method, name string) (Group, error) {
	switch m {
	case Cgroup2:
		return openCgroup2(fs, name)
	case Cgroup1:
		return openCgroup1(fs, name)
	case Sigstop:
		return newSigstop(fs), nil
	case None:
		return noneGroup{}, nil
	}
	return nil, fmt.Errorf("unknown method %q", m)
}

// Round is one pass towards the fixed point.
type Round struct {
	N       int
	Matched int // live matches seen by the scan
	Outside int // of which not yet in the set
	Moved   int
	Gone    int // exited between scan and move
	Reused  int // pid reused by another process: left alone
	// FailedPIDs are the processes whose moves failed for a reason
	// other than their death: left outside, stopped by SIGSTOP.
	// FailedErr is the first of their errors.
	FailedPIDs []int
	FailedErr  error
	Frozen     bool
	Took       time.Duration
	// Placed are the groups this round froze where the chain runs
	// (cgroup2): in place, or a group nested in them.
	Placed []Placement
}

// A placer freezes in place, before the round's snapshot, the groups a
// scan's matches occupy that hold nothing but the chain (cgroup2's set).
// Its other groups are placed by the moves, once the round has stopped
// what it pinned.
type placer interface {
	Place(res match.Result) error
	Placements() []Placement
}

// frozenWait bounds each wait for the set to report frozen. A task in
// uninterruptible sleep can hold FREEZING forever; the kill rounds reach
// frozen and freezing tasks alike, so waiting longer gains nothing.
const frozenWait = 5 * time.Second

// Grow moves matches into g until a scan finds none outside it, calling
// onRound after each pass. It returns the last scan. stop, if not nil, is
// asked after each round; when it says true, Grow returns ErrStopped.
func Grow(fs proc.FS, s *match.Scanner, g Group, deadline time.Time, stop func() bool, onRound func(Round)) (match.Result, error) {
	for n := 1; ; n++ {
		t0 := time.Now()
		res, err := s.Scan()
		if err != nil {
			return res, err
		}
		r := Round{N: n, Matched: res.Live()}
		if pl, ok := g.(placer); ok {
			err := pl.Place(res)
			r.Placed = pl.Placements()
			if err != nil {
				return res, err
			}
		}
		inside, err := g.Snapshot()
		if err != nil {
			return res, err
		}
		pinned, err := pinOutside(fs, g, res, inside, &r)
		if err != nil {
			return res, err
		}
		var moved []*proc.Handle
		for _, h := range pinned {
			err := g.Move(h)
			if errors.Is(err, proc.ErrGone) {
				r.Gone++
				continue
			}
			if err != nil {
				// Left outside, held as sigstop holds: the rest of the
				// round still moves, and the next round tries it again.
				h.Signal(unix.SIGSTOP)
				if r.FailedErr == nil {
					r.FailedErr = fmt.Errorf("move pid %d into %s: %w", h.PID, g.Where(), err)
				}
				r.FailedPIDs = append(r.FailedPIDs, h.PID)
				continue
			}
			r.Moved++
			moved = append(moved, h)
		}
		if pl, ok := g.(placer); ok {
			r.Placed = append(r.Placed, pl.Placements()...) // groups first seen by a move
		}
		if g.StopFirst() {
			// Now inside the frozen group: clear the stop. A stopped task
			// does not count as frozen (cgroup.events stays at frozen 0)
			// until it wakes, and a task woken in a freezing group traps
			// in the freezer before it can return to user space. Thawing
			// the group (after --hold) is then all it takes to resume.
			// One left outside stays stopped.
			for _, h := range moved {
				h.Signal(unix.SIGCONT)
			}
		}
		closeAll(pinned)
		wait := time.Now().Add(frozenWait)
		if wait.After(deadline) {
			wait = deadline
		}
		r.Frozen = g.WaitFrozen(wait) == nil
		r.Took = time.Since(t0)
		onRound(r)
		if r.Outside == 0 {
			return res, nil
		}
		if len(r.FailedPIDs) > 0 && r.Moved == 0 {
			return res, fmt.Errorf("%w: %s (%s) could not be moved into %s in round %d (%w); each is stopped by SIGSTOP where it runs (kill -CONT PID resumes it)",
				ErrLeftOutside, show.Count(len(r.FailedPIDs), "process", "processes"), pidList(r.FailedPIDs), g.Where(), n, r.FailedErr)
		}
		if stop != nil && stop() {
			return res, fmt.Errorf("%w: round %d", ErrStopped, n)
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("%w: %d processes still outside %s after round %d", ErrDeadline, r.Outside-r.Moved, g.Where(), n)
		}
	}
}

// pinOutside pins every match of res that is not inside the set yet,
// counting the gone and the reused in r, and stops each one first where
// the method asks for it.
func pinOutside(fs proc.FS, g Group, res match.Result, inside func(match.Proc) bool, r *Round) ([]*proc.Handle, error) {
	var pinned []*proc.Handle
	for _, p := range res.Procs {
		if inside(p) {
			continue
		}
		r.Outside++
		h, err := fs.Open(p.ID)
		switch {
		case errors.Is(err, proc.ErrGone):
			r.Gone++
			continue
		case errors.Is(err, proc.ErrReused):
			r.Reused++
			continue
		case err != nil:
			closeAll(pinned)
			return nil, err
		}
		pinned = append(pinned, h)
		if g.StopFirst() {
			// Stop first: a signal is cheap, and a move waits for every
			// fork in flight on the machine (the kernel's
			// cgroup_threadgroup_rwsem), so moving a set that is still
			// forking is slow. The group holds what SIGSTOP alone cannot:
			// nobody can thaw it with SIGCONT, and children are born
			// inside it.
			h.Signal(unix.SIGSTOP)
		}
	}
	return pinned, nil
}

// failedPIDs is how many pids of failed moves an error names.
const failedPIDs = 10

// pidList names the first failedPIDs of pids: "pid 12, 13 and 2 more".
func pidList(pids []int) string {
	var b strings.Builder
	b.WriteString("pid ")
	for i, pid := range pids[:min(len(pids), failedPIDs)] {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(pid))
	}
	if len(pids) > failedPIDs {
		fmt.Fprintf(&b, " and %d more", len(pids)-failedPIDs)
	}
	return b.String()
}

func closeAll(hs []*proc.Handle) {
	for _, h := range hs {
		h.Close()
	}
}

// Support is whether a method can be used here, and why (not).
type Support struct {
	Method Method
	OK     bool
	Why    string
	// Kinds, for bpf, are the BPF program kinds tried, loaded or refused.
	Kinds []gate.Kind
}

// Probe reports which methods would work here without creating anything:
// the gate is loaded against btf (empty: the running kernel's) and never
// attached.
func Probe(btf string) []Support {
	kinds := gate.Probe(btf)
	out := []Support{{Method: Bpf, OK: kinds[0].OK, Why: kinds[0].Why, Kinds: kinds}}
	if mount, err := Cgroup2Mount(); err != nil {
		out = append(out, Support{Method: Cgroup2, Why: err.Error()})
	} else if !fileExists(mount + "/cgroup.procs") {
		out = append(out, Support{Method: Cgroup2, Why: "no cgroup.procs at " + mount})
	} else if !writable(mount + "/cgroup.procs") {
		out = append(out, Support{Method: Cgroup2, Why: "cannot write " + mount + "/cgroup.procs (not root)"})
	} else {
		out = append(out, Support{Method: Cgroup2, OK: true, Why: "cgroup v2 at " + mount})
	}
	switch {
	case !fileExists(freezerRoot + "/cgroup.procs"):
		out = append(out, Support{Method: Cgroup1, Why: "no v1 freezer hierarchy at " + freezerRoot})
	case !writable(freezerRoot + "/cgroup.procs"):
		out = append(out, Support{Method: Cgroup1, Why: "cannot write " + freezerRoot + " (not root)"})
	default:
		out = append(out, Support{Method: Cgroup1, OK: true, Why: "v1 freezer at " + freezerRoot})
	}
	out = append(out, Support{Method: Sigstop, OK: true, Why: "SIGSTOP by pidfd works for any process you may signal"})
	return out
}

// NothingToThaw is a set's ThawHint when it froze nothing.
const NothingToThaw = "nothing to thaw: nothing was frozen"

// None is no freezer at all: with --revoke-exec, kill rounds straight
// after the revocation (the order of the original incident).
const None Method = "none"

// noneGroup holds nothing: every match stays outside and the kill rounds
// signal each one.
type noneGroup struct{}

func (noneGroup) Method() Method       { return None }
func (noneGroup) Where() string        { return "no freezer (--method none)" }
func (noneGroup) Freezes() bool        { return false }
func (noneGroup) Holds() bool          { return false }
func (noneGroup) StopFirst() bool      { return false }
func (noneGroup) KillReachesAll() bool { return false }
func (noneGroup) ThawHint() string     { return NothingToThaw }
func (noneGroup) Reused() bool         { return false }
func (noneGroup) Snapshot() (func(match.Proc) bool, error) {
	return func(match.Proc) bool { return false }, nil
}
func (noneGroup) Move(*proc.Handle) error    { return nil }
func (noneGroup) WaitFrozen(time.Time) error { return nil }
func (noneGroup) Kill() error                { return nil }
func (noneGroup) Populated() (bool, error)   { return false, nil }
func (noneGroup) Remove() error              { return nil }
func (noneGroup) Notes() []string            { return nil }
func (noneGroup) Terms() (string, string)    { return cgroupTerms() }
