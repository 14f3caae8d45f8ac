package stop

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"golang.org/x/sys/unix"

	"freeze/internal/freeze"
	"freeze/internal/match"
)

// Armed is the armed form of a run, as a guard keeps it between
// requests, so that a request costs what a run costs and nothing more:
// the process's memory faulted in and locked, the kernel's types read,
// and a gate's programs loaded and waiting (the spare). Requests run one
// at a time, so one spare is enough. A request takes the spare (Take),
// and AfterRun readies the next.
type Armed struct {
	spare *freeze.Spare
	// rec records each process's argv at its exec, from arming on, for
	// the requests named with --arg (freeze.Recorder); nil where it did
	// not attach (RecorderWhy says why).
	rec         *freeze.Recorder
	RecorderWhy string
	// GateOK and GateWhy are what the probe said when Arm armed it.
	GateOK  bool
	GateWhy string
}

// Arm locks the process's memory, reads the system's program
// directories (the judge's, match.LoadSystem: the first request would
// read them otherwise, and the first is the incident's), probes the gate
// and loads a spare where it loads; say prints the guard's own lines.
func Arm(say func(string)) *Armed {
	debug.SetGCPercent(100)
	if err := unix.Mlockall(unix.MCL_CURRENT | unix.MCL_FUTURE | unix.MCL_ONFAULT); err != nil {
		say(fmt.Sprintf("warning: mlockall: %v; the guard's memory may be paged out", err))
	}
	match.LoadSystem()
	ok, why := freeze.GateLoads()
	r := &Armed{GateOK: ok, GateWhy: why}
	say(fmt.Sprintf("gate: %s: %s", map[bool]string{true: "loads", false: "not available"}[r.GateOK], r.GateWhy))
	if r.GateOK {
		rec, err := freeze.StartRecorder()
		if err != nil {
			r.RecorderWhy = err.Error()
			say("warning: the argv recorder did not attach: " + err.Error() + "; a request with --arg reads each argv from /proc")
		} else {
			say("argv recorder: attached: a request with --arg matches a process by the argv of its exec, from now on, without waiting on its memory")
		}
		r.rec = rec
		r.load()
	} else {
		r.RecorderWhy = "the gate does not load here: " + r.GateWhy
	}
	return r
}

// Recording says the argv recorder is attached.
func (r *Armed) Recording() bool { return r.rec != nil }

// SpareLoaded says a spare gate waits for the next request.
func (r *Armed) SpareLoaded() bool { return r.spare != nil }

// load loads a spare gate if there is none; without one, a request loads
// its own.
func (r *Armed) load() {
	if r.spare != nil || !r.GateOK {
		return
	}
	if s, err := freeze.LoadSpare(); err == nil {
		r.spare = s.WithRecorder(r.rec)
	}
}

// Take hands the spare gate to a run (its Request.Spare), which owns it
// from then on; nil when there is none.
func (r *Armed) Take() *freeze.Spare {
	if r == nil {
		return nil
	}
	g := r.spare
	r.spare = nil
	return g
}

// AfterRun readies the process for the next request, while it is idle: a
// new spare, and the collector back on (a run turns it off; the guard
// lives on).
func (r *Armed) AfterRun() {
	r.load()
	debug.SetGCPercent(100)
	runtime.GC()
}

// Close unloads the spare and the recorder.
func (r *Armed) Close() {
	if r.spare != nil {
		r.spare.Close()
		r.spare = nil
	}
	r.rec.Close()
	r.rec = nil
}
