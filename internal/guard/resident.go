package guard

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"

	"golang.org/x/sys/unix"

	"freeze/internal/gate"
)

// Resident is what a guard keeps ready between requests, so that a
// request costs what a run costs and nothing more: its memory faulted in
// and locked, the kernel's types read, and a gate's programs loaded and
// waiting (the spare). Requests run one at a time, so one spare is
// enough.
type Resident struct {
	spare *gate.Gate
	// GateOK and GateWhy are what the probe said when NewResident armed it.
	GateOK  bool
	GateWhy string
}

// NewResident locks the guard's memory, probes the gate and loads a
// spare where it loads; say prints the guard's own lines.
func NewResident(say func(string)) *Resident {
	debug.SetGCPercent(100)
	if err := unix.Mlockall(unix.MCL_CURRENT | unix.MCL_FUTURE | unix.MCL_ONFAULT); err != nil {
		say(fmt.Sprintf("warning: mlockall: %v; the guard's memory may be paged out", err))
	}
	k := gate.Probe("")
	r := &Resident{GateOK: k[0].OK, GateWhy: k[0].Why}
	say(fmt.Sprintf("gate: %s: %s", map[bool]string{true: "loads", false: "not available"}[r.GateOK], r.GateWhy))
	if r.GateOK {
		r.load()
	}
	return r
}

// Armed is the guard log's "armed" line.
func (r *Resident) Armed() *ArmedLine {
	return &ArmedLine{Gate: r.GateOK, GateWhy: r.GateWhy, GateLoaded: r.spare != nil, PID: os.Getpid()}
}

// load loads a spare gate if there is none; without one, a request loads
// its own.
func (r *Resident) load() {
	if r.spare != nil || !r.GateOK {
		return
	}
	if g, err := gate.Load(gate.Config{Ahead: true}); err == nil {
		g.LoadExtras()
		r.spare = g
	}
}

// TakeSpare hands the spare gate to a run, which owns it from then on;
// nil when there is none.
func (r *Resident) TakeSpare() *gate.Gate {
	if r == nil {
		return nil
	}
	g := r.spare
	r.spare = nil
	return g
}

// AfterRun readies the guard for the next request, while it is idle: a
// new spare, and the collector back on (a run turns it off; the guard
// lives on).
func (r *Resident) AfterRun() {
	r.load()
	debug.SetGCPercent(100)
	runtime.GC()
}

// Close unloads the spare.
func (r *Resident) Close() {
	if r.spare != nil {
		r.spare.Close()
		r.spare = nil
	}
}

// ExplainAuto says why --auto could not start: it needs the gate's fork
// counter.
func ExplainAuto(err error) string { return gate.Explain(err) }
