//go:build cgo

package early

// extern int freeze_early_lifted;
// extern long freeze_early_cpu_us;
// extern long long freeze_early_at_ns;
import "C"

import (
	"os"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"
)

func init() {
	if C.freeze_early_lifted != 0 {
		runtime.LockOSThread() // main runs on the lifted thread
		seal()
	}
}

// seal sets SCHED_RESET_ON_FORK on every thread of the process. The
// constructor lifted the main thread without it, so that the threads the
// Go runtime started since inherited SCHED_RR 1 (at ordinary priority,
// each of them could keep the main thread waiting for seconds behind a
// spinning chain); from here on no child process inherits the class,
// and a thread started later starts at ordinary priority until
// internal/priority lifts it. Passes repeat until one finds every
// thread sealed, so a thread started during a pass is not missed.
func seal() {
	for pass := 0; pass < 10; pass++ {
		changed := false
		for _, tid := range threads() {
			pol, _, e := syscall.RawSyscall(syscall.SYS_SCHED_GETSCHEDULER, uintptr(tid), 0, 0)
			if e != 0 || pol&schedResetOnFork != 0 {
				continue
			}
			param := struct{ prio int32 }{1}
			syscall.RawSyscall(syscall.SYS_SCHED_SETSCHEDULER, uintptr(tid), schedRR|schedResetOnFork, uintptr(unsafe.Pointer(&param)))
			changed = true
		}
		if !changed {
			return
		}
	}
}

// threads lists the thread ids in /proc/self/task.
func threads() []int {
	ents, _ := os.ReadDir("/proc/self/task")
	var tids []int
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids
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
