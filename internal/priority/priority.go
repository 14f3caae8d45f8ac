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
	"freeze/internal/safedir"
	"os"
	"os/exec"
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
// freeze. It returns what it did, for the timeline, and an error when it
// could do none of it (not root: freeze still works, slower).
//
// No thread carries SCHED_RESET_ON_FORK: a thread the Go runtime starts
// later is cloned from a lifted thread and inherits the class, so no
// thread of freeze ever waits at ordinary priority behind the chain (a
// goroutine the run needs can be scheduled on any thread, and the old
// way, lifting new threads from a goroutine every 20 ms, starved when
// that goroutine itself landed on an unlifted thread: measured 5-30 s
// stalls against a churn of 3,000). Children must start processes with
// Start, which keeps the class from them.
//
// Raise locks the calling goroutine to its thread (call it from the
// goroutine that runs the stop order).
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
	n := 0
	for _, tid := range threads() {
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
		if err := setAll(schedRR, rtPriority); err == nil {
			did = append(did, fmt.Sprintf("SCHED_RR %d (RLIMIT_RTTIME %v)", rtPriority, time.Duration(rtSoftLimit)*time.Microsecond))
		} else {
			keep(err)
		}
	} else {
		keep(err)
	}
	if err := safedir.Knob("/proc/"+strconv.Itoa(os.Getpid())+"/oom_score_adj", "-1000"); err == nil {
		did = append(did, "oom_score_adj -1000")
	} else {
		keep(err)
	}
	if len(did) == 0 {
		return nil, fmt.Errorf("priority unchanged: %v", firstErr)
	}
	return did, firstErr
}

// setPasses bounds the passes of setAll. A pass lists the threads and
// sets each one not yet at the policy; a thread started during a pass by
// a thread not yet set is found by the next. The runtime starts a handful
// of threads at most, so two passes are the rule.
const setPasses = 10

// setAll puts every thread of the process at policy (no
// SCHED_RESET_ON_FORK) and prio, pass after pass until a pass changes
// nothing. It holds mu, so a Start cannot put its thread back to
// real-time priority in the middle of a drop. Once dropped, only a drop
// (policy schedOther) is carried out: nothing is lifted again.
func setAll(policy, prio int) error {
	mu.Lock()
	defer mu.Unlock()
	var firstErr error
	for pass := 0; pass < setPasses; pass++ {
		if policy != schedOther && dropped.Load() {
			return errors.New("real-time priority was given up (SIGXCPU or Lower)")
		}
		changed, set := false, 0
		for _, tid := range threads() {
			if pol, err := getScheduler(tid); err == nil && pol == policy {
				set++
				continue
			}
			if err := setScheduler(tid, policy, prio); err != nil {
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
			changed = true
			set++
		}
		if set == 0 {
			return firstErr
		}
		if !changed {
			return nil
		}
	}
	return nil
}

// Lower puts every thread back to SCHED_OTHER at nice 0, for good.
func Lower() {
	dropped.Store(true)
	dropAll()
	for _, tid := range threads() {
		unix.Setpriority(unix.PRIO_PROCESS, tid, 0)
	}
}

// Start starts cmd so that the child begins at ordinary priority
// whatever the calling thread's class: it sets SCHED_RESET_ON_FORK on the
// calling thread for the fork only (sched(7): the child then starts as
// SCHED_OTHER, nice 0 or above). The runtime forks on the calling
// goroutine's thread, which Start locks; while a goroutine is locked the
// runtime starts any new thread from its template thread, not from this
// one, so no thread of freeze starts with the flag. A process freeze
// starts must go through here (the drill's chain, a test's fixture).
func Start(cmd *exec.Cmd) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pol, err := getScheduler(0)
	if err != nil || pol == schedOther || pol&schedResetOnFork != 0 {
		return cmd.Start() // nothing to keep from the child
	}
	var param struct{ prio int32 }
	if _, _, e := unix.RawSyscall(unix.SYS_SCHED_GETPARAM, 0, uintptr(unsafe.Pointer(&param)), 0); e != 0 {
		return fmt.Errorf("start %s: read this thread's priority: %w", cmd.Path, e)
	}
	if err := setScheduler(0, pol|schedResetOnFork, int(param.prio)); err != nil {
		return fmt.Errorf("start %s: keep real-time priority from the child: %w", cmd.Path, err)
	}
	err = cmd.Start()
	mu.Lock()
	if !dropped.Load() {
		setScheduler(0, pol, int(param.prio))
	} else {
		setScheduler(0, schedOther, 0)
	}
	mu.Unlock()
	return err
}

// DropReason says why real-time priority was given up on SIGXCPU.
const DropReason = "SIGXCPU: a thread of freeze reached RLIMIT_RTTIME's soft limit (2 s of CPU at real-time priority without sleeping); freeze dropped to ordinary priority and carries on there, slower against a spinning chain"

var (
	xcpu   atomic.Bool // SIGXCPU made freeze drop
	onDrop atomic.Pointer[func(string)]
	told   atomic.Bool
	// dropped is set once freeze has given up real-time priority
	// (SIGXCPU or Lower): nothing is lifted again after that.
	dropped atomic.Bool
	// mu orders setAll and Start's restore of its thread.
	mu sync.Mutex
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

var sigxcpuOnce sync.Once

// dropOnSIGXCPU drops real-time priority when RLIMIT_RTTIME's soft limit
// is reached, instead of dying of SIGXCPU's default action. Every thread
// goes down together (setAll), and nothing lifts one again. The goroutine
// that does it is scheduled like any other: every thread is lifted, so
// it cannot starve behind the chain.
func dropOnSIGXCPU() {
	sigxcpuOnce.Do(func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, unix.SIGXCPU)
		go func() {
			<-ch
			dropped.Store(true)
			dropAll()
			xcpu.Store(true)
			tellDrop()
		}()
	})
}

// dropAll puts every thread at SCHED_OTHER, then once more a moment
// later: a thread the runtime was cloning from a real-time one while the
// first drop ran is listed only once its clone returns, after the pass
// that found nothing left to change (seen under load: one thread still
// at SCHED_RR after the drop).
func dropAll() {
	setAll(schedOther, 0)
	time.Sleep(5 * time.Millisecond)
	setAll(schedOther, 0)
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

// getScheduler is sched_getscheduler(2) for one thread (0: the calling
// one); the policy carries schedResetOnFork when that is set.
func getScheduler(tid int) (int, error) {
	pol, _, e := unix.RawSyscall(unix.SYS_SCHED_GETSCHEDULER, uintptr(tid), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(pol), nil
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
