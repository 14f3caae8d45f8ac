package freeze

import (
	"fmt"
	"time"

	"freeze/internal/gate"
	"freeze/internal/match"
	"freeze/internal/proc"
)

// Bpf is the kernel gate (package gate): no process of the chain
// completes a fork, clone or exec while it is attached, so the set is
// fixed by construction, and the gate's own kill (one pass of a task
// iterator in the kernel) takes it without moving anything. With --hold, or to finish a group an earlier --hold
// left, the gated set also goes into a group of the first cgroup method
// that works, and that group is what holds once the gate is gone.
const Bpf Method = "bpf"

// gated is the set the gate holds. The caller attaches the gate before
// the first scan and detaches it when the run ends; the group only marks.
type gated struct {
	gate *gate.Gate
	// files reports that the gate knows the targets by file, so a
	// process matched by path is gated without being marked.
	files bool
	// inner is the group that holds, with --hold or a reused group; nil
	// when the run kills straight from the gate.
	inner Group
	// lineage is the gate's lineage count at the last Populated.
	lineage uint64
}

// Opener opens a group for name with method m: Open, or a test's.
type Opener func(fs proc.FS, m Method, name string) (Group, string, error)

// OpenOptions are what OpenFor needs beyond the method.
type OpenOptions struct {
	Gate    *GateSet // attached before the first scan, or nil
	GateWhy string   // why the gate is not attached, where it was tried
	Hold    bool
	Open    Opener // nil is Open
}

// OpenFor opens a run's set: the attached gate's where there is one
// (OpenGated), else a group of m; for bpf without its gate, a group of
// the first method that works. It says why, and why the gate was passed
// over.
func OpenFor(fs proc.FS, m Method, name string, o OpenOptions) (Group, string, error) {
	open := o.Open
	if open == nil {
		open = Open
	}
	switch {
	case o.Gate != nil:
		return OpenGated(fs, o.Gate.Gate, o.Hold, name)
	case m.GateOnly():
		g, why, err := open(fs, Auto, name)
		return g, "asked for bpf, but the gate is not available (" + o.GateWhy + "); " + why, err
	default:
		g, why, err := open(fs, m, name)
		if o.GateWhy != "" {
			why += "; passed over bpf (" + o.GateWhy + ")"
		}
		return g, why, err
	}
}

// OpenGated wraps an attached gate as the run's Group. With hold, or
// where an earlier --hold left a group for name, the gated set is also
// moved into a group opened as Open(fs, Auto, name) would.
func OpenGated(fs proc.FS, gt *gate.Gate, hold bool, name string) (Group, string, error) {
	g := &gated{gate: gt, files: gt.Files > 0}
	if c, err := gt.Counters(); err == nil {
		g.lineage = c.Lineage
	}
	why := "the gate is attached: the chain cannot fork or exec, so its set is fixed; killed by the gate's own kill (one pass in the kernel), with no move"
	if !hold && len(GroupDirs(name)) == 0 {
		return g, why, nil
	}
	inner, innerWhy, err := Open(fs, Auto, name)
	if err != nil {
		return nil, "", err
	}
	g.inner = inner
	if hold {
		return g, fmt.Sprintf("the gate is attached; --hold moves the stopped set into %s (%s), which holds it once the gate is gone", inner.Method(), innerWhy), nil
	}
	return g, fmt.Sprintf("the gate is attached; an earlier --hold left %s, which is finished too", inner.Where()), nil
}

func (g *gated) Method() Method { return Bpf }

func (g *gated) Where() string {
	if g.inner != nil {
		return g.inner.Where()
	}
	return "the BPF gate"
}

func (g *gated) Freezes() bool { return true }
func (g *gated) Holds() bool   { return g.inner != nil && g.inner.Holds() }

// StopFirst is the inner group's: a move into a frozen cgroup waits for
// the forks in flight, and the chain has none (the gate refuses them
// before the pids charge and the threadgroup lock), but the stop and
// continue around the move is what turns a gate-stopped process into a
// frozen one that a thaw resumes.
func (g *gated) StopFirst() bool { return g.inner != nil && g.inner.StopFirst() }

// KillReachesAll: the gate's kill (a task iterator in the kernel) reaches
// every process the gate knows, by file or by mark: what Snapshot calls
// inside. Where the kill iterator did not load (its kfunc is Linux
// 6.13's), it reaches none, and the rounds signal each by pidfd.
func (g *gated) KillReachesAll() bool {
	if g.inner != nil {
		return g.inner.KillReachesAll()
	}
	return g.gate.CanKill()
}

func (g *gated) ThawHint() string {
	if g.inner != nil {
		return g.inner.ThawHint()
	}
	return "kill -CONT each stopped pid (the gate stopped them with SIGSTOP; a continued process stops again at its next fork only while the gate is attached)"
}

func (g *gated) Reused() bool { return g.inner != nil && g.inner.Reused() }

// Snapshot: inside the gate is a process known by its file, or marked in
// this run; with an inner group, only what is in that group.
func (g *gated) Snapshot() (func(match.Proc) bool, error) {
	if g.inner != nil {
		return g.inner.Snapshot()
	}
	return func(p match.Proc) bool {
		return (g.files && p.Reason == match.ByPath) || g.gate.Marked(p.ID)
	}, nil
}

// Move marks h in the gate, and moves it into the inner group if any.
func (g *gated) Move(h *proc.Handle) error {
	if err := g.gate.Mark(h); err != nil {
		return err
	}
	if g.inner != nil {
		return g.inner.Move(h)
	}
	return nil
}

func (g *gated) WaitFrozen(deadline time.Time) error {
	if g.inner != nil {
		return g.inner.WaitFrozen(deadline)
	}
	return nil
}

func (g *gated) Kill() error {
	if g.inner != nil {
		return g.inner.Kill()
	}
	if !g.gate.CanKill() {
		return nil // KillReachesAll is false: the rounds signal by pidfd
	}
	_, err := g.gate.KillAll()
	return err
}

// Populated: the gate's set is in no group, so no group can say whether
// it gained a member. A fork that was in flight when the gate attached
// can complete late under load (seen in CI: one process of a churning
// chain alive after zero was confirmed by two empty scans), and every
// child of the chain is counted by the gate's lineage program: a birth
// since the last look counts as populated, so the rounds look and kill
// again before they confirm zero.
func (g *gated) Populated() (bool, error) {
	if g.inner != nil {
		return g.inner.Populated()
	}
	c, err := g.gate.Counters()
	if err != nil {
		return false, nil
	}
	born := c.Lineage != g.lineage
	g.lineage = c.Lineage
	return born, nil
}

func (g *gated) Remove() error {
	if g.inner != nil {
		return g.inner.Remove()
	}
	return nil
}

// Terms: the gate marks a match and kills what it gates in one pass in
// the kernel.
func (g *gated) Terms() (string, string) {
	return "marked", "held by the gate, killed by its iterator"
}

func (g *gated) Notes() []string {
	notes := []string{fmt.Sprintf("gate knows %d file(s) by identity", g.gate.Files)}
	if g.inner != nil {
		notes = append(notes, g.inner.Notes()...)
	}
	return notes
}
