//go:build !cgo

package early

import (
	"runtime"
	"syscall"
	"unsafe"
)

func init() {
	if isFixture() {
		// The drill's chain never keeps a class it may have inherited.
		param := struct{ prio int32 }{0}
		syscall.RawSyscall(syscall.SYS_SCHED_SETSCHEDULER, 0, 0, uintptr(unsafe.Pointer(&param)))
		return
	}
	if v, _ := syscall.Getenv("FREEZE_PRIORITY"); v == "off" || syscall.Geteuid() != 0 {
		return
	}
	// The bound first: RLIMIT_RTTIME, then the class.
	lim := syscall.Rlimit{Cur: rtSoftLimit, Max: rtHardLimit}
	if syscall.Setrlimit(rlimitRTTime, &lim) != nil {
		return
	}
	runtime.LockOSThread() // main runs on this thread
	param := struct{ prio int32 }{1}
	syscall.RawSyscall(syscall.SYS_SCHED_SETSCHEDULER, 0, schedRR, uintptr(unsafe.Pointer(&param)))
	syscall.Setpriority(syscall.PRIO_PROCESS, 0, -20)
	lifted = true
	var tv syscall.Timeval
	if syscall.Gettimeofday(&tv) == nil {
		atNS = tv.Nano()
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		cpuUS = ru.Utime.Sec*1e6 + ru.Utime.Usec + ru.Stime.Sec*1e6 + ru.Stime.Usec
	}
}

var (
	lifted bool
	cpuUS  int64
	atNS   int64
)

// Lifted reports whether the init lifted the main thread, and the CPU
// time in microseconds the process had used by then.
func Lifted() (bool, int64) { return lifted, cpuUS }

// LiftedAt is the wall-clock time of the lift in Unix nanoseconds, or 0:
// with the start of the process it splits start-up into the part at
// ordinary priority and the part after the lift.
func LiftedAt() int64 { return atNS }

// isFixture reads this process's own argv[1] from /proc/self/cmdline
// (os.Args is not set up yet: package os may initialize after this).
func isFixture() bool {
	fd, err := syscall.Open("/proc/self/cmdline", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return true // cannot tell: do nothing
	}
	defer syscall.Close(fd)
	var buf [256]byte
	n, _ := syscall.Read(fd, buf[:])
	args := buf[:max(n, 0)]
	for i, b := range args {
		if b == 0 {
			rest := args[i+1:]
			return len(rest) >= len(fixtureArg) && string(rest[:len(fixtureArg)]) == fixtureArg &&
				(len(rest) == len(fixtureArg) || rest[len(fixtureArg)] == 0)
		}
	}
	return false
}
