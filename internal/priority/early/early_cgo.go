//go:build cgo

package early

// extern int freeze_early_lifted;
// extern long freeze_early_cpu_us;
// extern long long freeze_early_at_ns;
import "C"

import "runtime"

func init() {
	if C.freeze_early_lifted != 0 {
		runtime.LockOSThread() // main runs on the lifted thread
	}
}

// Lifted reports whether the constructor lifted the main thread, and the
// CPU time in microseconds the process had used by then.
func Lifted() (bool, int64) {
	return C.freeze_early_lifted != 0, int64(C.freeze_early_cpu_us)
}

// LiftedAt is the wall-clock time of the lift in Unix nanoseconds, or 0:
// with the start of the process it splits start-up into the part at
// ordinary priority and the part after the lift.
func LiftedAt() int64 { return int64(C.freeze_early_at_ns) }
