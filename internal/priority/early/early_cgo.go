//go:build cgo

package early

// extern int freeze_early_lifted;
// extern long freeze_early_cpu_us;
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
