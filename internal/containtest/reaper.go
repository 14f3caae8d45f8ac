package containtest

import (
	"flag"
	"fmt"
	"freeze/internal/testenv"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// reapInterval is how often the reaper looks for zombie children: short
// enough that a churning chain's orphans never pile up towards pid_max.
const reapInterval = 10 * time.Millisecond

// maxRest bounds the rest between two rounds, whatever a round cost: a
// zombie that waits longer than this holds its pid, and the exit of a
// chain's leader, from the test that waits on it.
const maxRest = 250 * time.Millisecond

var reaper struct {
	sync.Mutex
	started bool
	comms   map[string]bool // comm names of fixture copies
	leaders map[int]chan unix.WaitStatus
}

// Main is the TestMain of every package whose tests start chains: it makes
// the test process a child subreaper, reaps the chain processes it
// inherits, runs the tests, then removes the fixture build.
//
//	func TestMain(m *testing.M) { os.Exit(containtest.Main(m)) }
func Main(m *testing.M) int {
	if p := os.Getenv(sentinelEnv); p != "" {
		runSentinel(p)
		return 0
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		// The fixture tier (-short) starts no chain: it runs without a
		// reaper where the prctl is refused (qemu's user mode, which
		// runs the arm64 build's fixture tier here, does not emulate
		// it); a chain started without one fails its test (checkSpec).
		flag.Parse()
		if testing.Short() {
			fmt.Fprintf(os.Stderr, "containtest: PR_SET_CHILD_SUBREAPER: %v: no reaper, and so no chain, in this -short run\n", err)
			return m.Run()
		}
		fmt.Fprintf(os.Stderr, "containtest: PR_SET_CHILD_SUBREAPER: %v\n", err)
		return 1
	}
	reaper.Lock()
	reaper.started = true
	// "exe": a sentinel (started as /proc/self/exe) of a test binary of
	// ours that died reaches us as an orphan.
	reaper.comms = map[string]bool{"exe": true}
	reaper.leaders = map[int]chan unix.WaitStatus{}
	reaper.Unlock()
	stop := make(chan struct{})
	go func() {
		// On one thread, so that the round's own CPU time can be read
		// (RUSAGE_THREAD).
		runtime.LockOSThread()
		wait := reapInterval
		for {
			select {
			case <-stop:
				return
			case <-time.After(wait):
			}
			// A round reads the stat file of every child: with thousands
			// of orphans dying at once it takes a good part of a second,
			// and back-to-back rounds would take the CPU (at real-time
			// priority, in a benchmark that raised its own) from the
			// exits they wait for. So rest as long as the round used the
			// CPU, and skip the round when no child is a zombie. The CPU
			// time, not the wall time: a round at ordinary priority
			// beside a churning chain of 3,000 took 30 s of wall time
			// while it waited for its turns, and the rest that followed
			// (another 30 s) left the chain's zombies, and the exit of
			// the freeze under test, unreaped, so that a test of 1 s
			// took 100 s.
			c0 := threadCPU()
			if zombieChild() {
				reap()
			}
			wait = min(max(reapInterval, threadCPU()-c0), maxRest)
		}
	}()
	// A guard of the machine's must never receive a test's request:
	// every freeze the tests start looks for its guard in a directory
	// of this test binary's own (order.RunDirEnv).
	if os.Getenv("FREEZE_RUN_DIR") == "" {
		if d, err := os.MkdirTemp("", "containtest-run-"); err == nil {
			os.Setenv("FREEZE_RUN_DIR", d)
			defer os.RemoveAll(d)
		}
	}
	if g := testenv.AutoGuard(); g != "" {
		fmt.Fprintf(os.Stderr, "containtest: %s\n", g)
	}
	stopSentinel := startSentinel()
	code := m.Run()
	stopSentinel()
	close(stop)
	reap()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	if goBuilt.dir != "" {
		os.RemoveAll(goBuilt.dir)
	}
	return code
}

// reap waits for every zombie child that is a chain's leader or a chain
// process (known by the fixture's name). Children of other kinds (a
// compiler, the freeze binary run by a CLI test) belong to the os/exec
// call that started them and are left to it.
func reap() {
	reaper.Lock()
	defer reaper.Unlock()
	for _, pid := range children() {
		// Whether it is a zombie, by waitid (WNOWAIT: not reaped), and
		// only then its name by its stat file. A read of the stat file of
		// every child, each round, was 20-30% of the CPU of a benchmark's
		// window while bomb-2000 died (its orphans are ours), at
		// real-time priority: CPU the measured deaths wanted.
		if !zombie(pid) {
			continue
		}
		comm, state, ok := commState(pid)
		_, leader := reaper.leaders[pid]
		if !ok || state != 'Z' || !(leader || reaper.comms[comm]) {
			continue
		}
		var ws unix.WaitStatus
		got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		if err != nil || got != pid {
			continue
		}
		if ch, ok := reaper.leaders[pid]; ok {
			ch <- ws
			delete(reaper.leaders, pid)
		}
	}
}

// zombieChild reports whether any child of this process is a zombie,
// without reaping it (waitid(2) with WNOWAIT; Linux zeroes the siginfo
// when none is). A zombie may be a child os/exec is about to wait for.
func zombieChild() bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT|unix.WALL, nil)
	return err == nil && info.Signo != 0
}

// zombie reports whether pid, a child of this process, is a zombie,
// without reaping it.
func zombie(pid int) bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT|unix.WALL, nil)
	return err == nil && info.Signo != 0
}

// children lists the test process's children from
// /proc/self/task/*/children (proc(5)): a child belongs to the thread
// that forked it.
func children() []int {
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	var pids []int
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, s := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(s); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// threadCPU is the CPU time the calling thread has used.
func threadCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// commState reads the comm and state fields of /proc/PID/stat.
func commState(pid int) (comm string, state byte, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", 0, false
	}
	open := strings.IndexByte(string(b), '(')
	end := strings.LastIndexByte(string(b), ')')
	if open < 0 || end < open || end+2 >= len(b) {
		return "", 0, false
	}
	return string(b[open+1 : end]), b[end+2], true
}

func registerComm(name string) {
	if len(name) > 15 { // TASK_COMM_LEN - 1
		name = name[:15]
	}
	reaper.Lock()
	reaper.comms[name] = true
	reaper.Unlock()
}
