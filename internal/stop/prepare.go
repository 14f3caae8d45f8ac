package stop

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"freeze/internal/priority"
	"freeze/internal/proc"
	"freeze/internal/runlock"
	"freeze/internal/show"
	"freeze/internal/timeline"
)

// memoryLimit bounds freeze's heap during a run. The garbage collector is
// off below it: each collection stops every thread of freeze, and a thread
// the kernel keeps off the CPU behind a spinning chain makes that stop
// last as long as the chain's turn. A scan of 12,000 processes allocates
// a few MB, so a run stays far below the limit; above it, the collector
// runs as usual and the heap stays bounded.
const memoryLimit = 256 << 20

// Prepare lifts the calling goroutine's process above the chain
// (internal/priority) and quiets the collector; it returns what was done,
// for the timeline. Against a chain spinning at its cap an ordinary
// process gets one share among thousands: this comes first. A long-lived
// caller (the guard) turns the collector back on after the run
// (Armed.AfterRun).
func Prepare(o Output) []string {
	raised, err := priority.Raise()
	if ok, us := lifted(); ok {
		raised = append([]string{"lifted at start after " + show.Dur(time.Duration(us)*time.Microsecond) + " of CPU"}, raised...)
	}
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(memoryLimit)
	if err != nil && len(raised) == 0 && os.Geteuid() == 0 {
		o.warn("%v", err)
	}
	return raised
}

// Lift reports the lift at the process's start (package priority/early:
// whether it lifted, the CPU used before, and when, Unix ns), set by the
// command that links early (cmd/freeze's main). Nil in a process without
// it: a test binary that imports this package is not lifted at its
// start, and its children (a podman's runc, say) do not inherit a
// real-time class that a v1 cpu group refuses (EINVAL on cgroup.procs).
var Lift func() (lifted bool, cpuUS, atNS int64)

// lifted reports the start's lift and the CPU before it.
func lifted() (bool, int64) {
	if Lift == nil {
		return false, 0
	}
	ok, us, _ := Lift()
	return ok, us
}

// liftCPU is the CPU the process had used when package early lifted it.
func liftCPU() time.Duration {
	if ok, us := lifted(); ok {
		return time.Duration(us) * time.Microsecond
	}
	return 0
}

// liftedAt is when package early lifted the process, or the zero time.
func liftedAt() time.Time {
	if Lift == nil {
		return time.Time{}
	}
	if _, _, ns := Lift(); ns > 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// HidePIDError refuses a user who is not root where /proc hides other
// users' processes: a chain run by another user would be invisible, and
// zero could not be confirmed. Request.Force acts on what is visible.
type HidePIDError struct{ HidePID string }

func (e *HidePIDError) Error() string {
	return fmt.Sprintf("/proc is mounted with hidepid=%s, which hides other users' processes: freeze could not see a chain run by another user, nor confirm zero", e.HidePID)
}

func refuseHidePID(fs proc.FS, force bool, o Output) error {
	hide := fs.HidePID()
	if hide == "" || os.Geteuid() == 0 {
		return nil
	}
	if !force {
		return &HidePIDError{hide}
	}
	o.warn("/proc is mounted with hidepid=%s: other users' processes are hidden from you; acting only on your own (--force)", hide)
	return nil
}

// LockedError refuses a second run on a chain another run is working on.
type LockedError struct{ *runlock.HeldError }

// takeLock takes the run lock of the chain: one run per chain. A dry run
// changes nothing and takes none; a lock that cannot be taken at all
// (no state directory) is said, and the run carries on without it.
func takeLock(req Request, o Output) (*runlock.Lock, error) {
	if req.DryRun {
		return nil, nil
	}
	var held *runlock.HeldError
	lock, err := runlock.Acquire(req.fs(), runlock.Dir(), req.Name, req.Command)
	switch {
	case errors.As(err, &held):
		return nil, &LockedError{held}
	case err != nil:
		o.warn("cannot take the run lock: %v; carrying on without it, so a second run on this chain would not be kept out", err)
		return nil, nil
	}
	return lock, nil
}

// recordTakeover records a lock taken over from a run that died holding it.
func recordTakeover(lock *runlock.Lock, rec *timeline.Recorder) {
	if lock == nil || lock.Stale == nil {
		return
	}
	rec.RecordOf(timeline.StageNone, timeline.StepLockTakeover, fmt.Sprintf("took over the run lock from a run that ended without releasing it: %s", *lock.Stale),
		timeline.LockTakeover{Lock: lock.Path(), StalePID: lock.Stale.PID, StaleStartTicks: lock.Stale.Start, StaleCommand: lock.Stale.Command})
}
