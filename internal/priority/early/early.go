// Package early lifts the freeze command's main thread to a bounded
// real-time priority while the program is still starting. Under a chain
// spinning at its cap, a new process at ordinary priority gets one share
// among thousands, and every few milliseconds of CPU it needs before the
// lift cost a full turn of the chain (seconds): measured here, freeze took
// 10-23 s to reach its first line against a tree of 3,000 processes.
//
// On this machine a Go program has used about 10 ms of CPU by the time its
// first package init runs (the exec itself about 3 ms, the Go runtime's
// start the rest). So where cgo is available the lift is a C constructor
// (lift.c), which the loader runs before the Go runtime starts: about
// 3.4 ms of CPU after the exec began. Without cgo, a package init does the
// same, as early as Go allows: Go initializes packages in import-path
// order once their dependencies are ready, and built without cgo this
// package imports nothing but syscall and runtime, so its init runs before
// every third-party package's.
//
// Both take SCHED_RR 1 under RLIMIT_RTTIME (see internal/priority), only
// when root, never for the drill's chain fixture (the same binary, started
// with a hidden first argument), and only on the calling thread;
// internal/priority does the rest once main runs. The main goroutine is
// then locked to that thread. No thread carries SCHED_RESET_ON_FORK, so
// every thread the Go runtime starts inherits the class (with the flag
// they started at ordinary priority, and the main thread waited on them
// for 0.1-2 s, once 30 s, behind a spinning chain). No child process
// inherits it either: freeze starts processes only through
// priority.Start, which sets the flag on the forking thread for that
// fork, and the drill's chain (this binary) drops any inherited class in
// the constructor before it runs.
// FREEZE_PRIORITY=off in the environment turns all of it off (for a
// machine whose real-time work must not share the CPU, and to measure
// what the lift is worth).
package early

// Constants of sched(7) and setrlimit(2), as in lift.c and
// internal/priority.
const (
	schedRR      = 2
	rlimitRTTime = 15
	rtSoftLimit  = 2_000_000 // µs: as internal/priority
	rtHardLimit  = 5_000_000
	fixtureArg   = "__chain" // as internal/drill.FixtureArg
)

// Report is the lift as stop.Lift takes it: whether the process was
// lifted at its start, the CPU in microseconds it had used by then, and
// when (Unix ns).
func Report() (lifted bool, cpuUS, atNS int64) {
	ok, us := Lifted()
	return ok, us, LiftedAt()
}
