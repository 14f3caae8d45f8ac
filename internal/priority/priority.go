// Package priority lifts freeze above the chain it fights. A chain at its
// pids cap keeps every member runnable (each retries fork), so a process
// at ordinary priority gets one share among thousands. Measured here
// against a tree of 1,500 processes spinning at its cap: a scan took 16 s
// at nice 0 and 20 s at nice -20 (CFS still gives nice -20 only about
// 88761/(88761+1500*1024), some 5%, of a core).
//
// So when root, freeze takes the lowest real-time priority, SCHED_RR 1,
// which runs ahead of every ordinary task. It is bounded twice: the
// kernel's RT throttling (sched_rt_runtime_us, 950 ms a second by
// default) always leaves time to everything else, and RLIMIT_RTTIME
// stops freeze from holding a CPU for more than rtSoftLimit without
// sleeping: at that point freeze gets SIGXCPU and drops back to
// SCHED_OTHER (setrlimit(2), sched(7)).
//
// It never changes anything but freeze's own threads.
package priority

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	// Nice is the nice value freeze takes when it may: the highest.
	Nice = -20
	// rtPriority is the lowest SCHED_RR priority: above every ordinary
	// task, below every real-time service the machine has.
	rtPriority = 1
	// rtSoftLimit bounds the CPU time, in microseconds, a thread may use
	// at real-time priority without blocking. A scan of 12,000 processes
	// takes about 0.3 s and freeze sleeps between polls, so 2 s is only
	// reached by a bug; the hard limit is the kernel's SIGKILL behind it.
	rtSoftLimit = 2_000_000
	rtHardLimit = 5_000_000
)

// Raise lifts every thread of this process: nice -20, SCHED_RR 1 bounded
// by RLIMIT_RTTIME, and oom_score_adj -1000 so the OOM killer passes over
// freeze. It sets SCHED_RESET_ON_FORK so that no child (a drill's chain,
// a test's fixture) inherits any of it. Threads the Go runtime starts
// later do not inherit it either, so Raise locks the calling goroutine to
// its thread (call it from the goroutine that runs the stop order) and
// lifts the runtime's new threads as they appear (startRelift). It
// returns what it did, for the timeline, and an error when it could do
// none of it (not root: freeze still works, slower).
func Raise() ([]string, error) {
	if os.Getenv("FREEZE_PRIORITY") == "off" {
		return nil, errors.New("priority unchanged: FREEZE_PRIORITY=off")
	}
	runtime.LockOSThread()
	var did []string
	var firstErr error
	keep := func(err error) {
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	tids := threads()
	n := 0
	for _, tid := range tids {
		// setpriority(2) with PRIO_PROCESS acts on one thread on Linux.
		if err := unix.Setpriority(unix.PRIO_PROCESS, tid, Nice); err == nil {
			n++
		} else {
			keep(err)
		}
	}
	if n > 0 {
		did = append(did, fmt.Sprintf("nice %d", Nice))
	}
	lim := unix.Rlimit{Cur: rtSoftLimit, Max: rtHardLimit}
	if err := unix.Setrlimit(unix.RLIMIT_RTTIME, &lim); err == nil {
		dropOnSIGXCPU()
		rt := 0
		for _, tid := range tids {
			// SCHED_RESET_ON_FORK: children (a drill's chain, a test's
			// fixture) start at ordinary priority, not freeze's.
			if err := setScheduler(tid, schedRR|schedResetOnFork, rtPriority); err == nil {
				rt++
			} else {
				keep(err)
			}
		}
		if rt > 0 {
			did = append(did, fmt.Sprintf("SCHED_RR %d (RLIMIT_RTTIME %d ms)", rtPriority, rtSoftLimit/1000))
			startRelift()
		}
	} else {
		keep(err)
	}
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte("-1000"), 0); err == nil {
		did = append(did, "oom_score_adj -1000")
	} else {
		keep(err)
	}
	if len(did) == 0 {
		return nil, fmt.Errorf("priority unchanged: %v", firstErr)
	}
	return did, firstErr
}

// Lower puts every thread back to SCHED_OTHER at nice 0.
func Lower() {
	dropped.Store(true)
	for _, tid := range threads() {
		setScheduler(tid, schedOther, 0)
		unix.Setpriority(unix.PRIO_PROCESS, tid, 0)
	}
}

// DropReason says why real-time priority was given up on SIGXCPU.
const DropReason = "SIGXCPU: a thread of freeze reached RLIMIT_RTTIME's soft limit (2 s of CPU at real-time priority without sleeping); freeze dropped to ordinary priority and carries on there, slower against a spinning chain"

var (
	xcpu   atomic.Bool // SIGXCPU made freeze drop
	onDrop atomic.Pointer[func(string)]
	told   atomic.Bool
)

// OnDrop sets a function told once, from another goroutine, when
// RLIMIT_RTTIME's soft limit makes freeze give up real-time priority
// (at once, if that already happened), so the timeline can say so.
func OnDrop(f func(reason string)) {
	onDrop.Store(&f)
	tellDrop()
}

// tellDrop calls the OnDrop function once both the drop and the function
// are there, whichever came second.
func tellDrop() {
	if f := onDrop.Load(); f != nil && xcpu.Load() && told.CompareAndSwap(false, true) {
		(*f)(DropReason)
	}
}

// dropOnSIGXCPU drops real-time priority when RLIMIT_RTTIME's soft limit
// is reached, instead of dying of SIGXCPU's default action.
func dropOnSIGXCPU() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, unix.SIGXCPU)
	go func() {
		<-ch
		dropped.Store(true)
		for _, tid := range threads() {
			setScheduler(tid, schedOther, 0)
		}
		xcpu.Store(true)
		tellDrop()
	}()
}

// reliftEvery is how often new threads are lifted. The Go runtime starts
// threads as it needs them (one for each goroutine blocked in a system
// call), and SCHED_RESET_ON_FORK starts each at ordinary priority. Such a
// thread can hold one of the runtime's Ps (or be the one a stop-the-world
// waits for) while the kernel keeps it off the CPU behind the chain for a
// second or more, and the real-time thread then waits for it. 20 ms is
// well under one such wait and costs one small directory read.
const reliftEvery = 20 * time.Millisecond

var (
	reliftOnce sync.Once
	// dropped is set once freeze has given up real-time priority
	// (SIGXCPU or Lower): nothing is lifted again after that.
	dropped atomic.Bool
)

// startRelift lifts, every reliftEvery, the threads started since Raise.
// Thread ids of a dead thread can be reused by another process's thread,
// but /proc/self/task lists only this process's threads, so only freeze's
// own threads are ever touched.
func startRelift() {
	reliftOnce.Do(func() {
		go func() {
			lifted := map[int]bool{}
			for _, tid := range threads() {
				lifted[tid] = true
			}
			for range time.Tick(reliftEvery) {
				if dropped.Load() {
					return
				}
				for _, tid := range threads() {
					if lifted[tid] {
						continue
					}
					lifted[tid] = true
					unix.Setpriority(unix.PRIO_PROCESS, tid, Nice)
					setScheduler(tid, schedRR|schedResetOnFork, rtPriority)
				}
			}
		}()
	})
}

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

// setScheduler is sched_setscheduler(2) for one thread.
func setScheduler(tid, policy, prio int) error {
	param := struct{ prio int32 }{int32(prio)}
	_, _, e := unix.RawSyscall(unix.SYS_SCHED_SETSCHEDULER, uintptr(tid), uintptr(policy), uintptr(unsafe.Pointer(&param)))
	if e != 0 {
		return e
	}
	return nil
}

// Policies of sched(7).
const (
	schedOther = 0
	schedRR    = 2
	// schedResetOnFork makes children start as SCHED_OTHER at nice 0
	// or above (sched(7)).
	schedResetOnFork = 0x40000000
)
