// Package early lifts the freeze command's main thread to a bounded
// real-time priority while the program is still starting. Under a chain
// spinning at its cap, a new process at ordinary priority gets one share
// among thousands, and the Go runtime's start and the package inits take
// tens of milliseconds of CPU: measured here, freeze took up to 20 s to
// reach its first line against a tree of 3,000 processes.
//
// Go initializes packages in import-path order once their dependencies
// are ready, so this package imports nothing but syscall and runtime, and
// its path sorts before every third-party package's: it runs before their
// inits. It must never raise the drill's chain fixture (the same binary,
// started with a hidden first argument), and it only ever touches the
// calling thread; internal/priority does the rest once main runs.
package early

import (
	"runtime"
	"syscall"
	"unsafe"
)

// Constants of sched(7) and setrlimit(2); syscall does not name them.
const (
	schedRR          = 2
	schedResetOnFork = 0x40000000
	rlimitRTTime     = 15
	rtSoftLimit      = 2_000_000 // µs: as internal/priority
	rtHardLimit      = 5_000_000
	fixtureArg       = "__chain" // as internal/drill.FixtureArg
)

func init() {
	if syscall.Geteuid() != 0 || isFixture() {
		return
	}
	// The bound first: RLIMIT_RTTIME, then the class.
	lim := syscall.Rlimit{Cur: rtSoftLimit, Max: rtHardLimit}
	if syscall.Setrlimit(rlimitRTTime, &lim) != nil {
		return
	}
	runtime.LockOSThread() // main runs on this thread
	param := struct{ prio int32 }{1}
	syscall.RawSyscall(syscall.SYS_SCHED_SETSCHEDULER, 0, schedRR|schedResetOnFork, uintptr(unsafe.Pointer(&param)))
	syscall.Setpriority(syscall.PRIO_PROCESS, 0, -20)
}

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
