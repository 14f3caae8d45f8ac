package contain

import (
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/proc"
)

// reaper reaps every child of freeze, the command and each descendant
// re-parented to freeze (the child subreaper): on these machines PID 1
// does not reliably reap, and a zombie holds its pid. The command's own
// status goes to exited.
//
// It looks every 2 ms, and at once when the command exits: the
// command's pidfd sits in the Go runtime's poller (no thread of its
// own) and wakes the loop (#51: a run's end waited for the next look).
type reaper struct {
	child  int
	exited chan unix.WaitStatus
	quit   chan struct{}
	done   chan struct{}
	pidfd  *os.File      // nil where the kernel cannot poll a pidfd (PIDFD_NONBLOCK: 5.10)
	woke   chan struct{} // closed when the command has exited
	every  time.Duration // between looks for the orphans
}

func newReaper(child int) *reaper { return startReaper(child, 2*time.Millisecond) }

// startReaper opens the command's pidfd and starts the loop; every is
// the time between its looks for orphans.
func startReaper(child int, every time.Duration) *reaper {
	r := &reaper{child: child, exited: make(chan unix.WaitStatus, 1), quit: make(chan struct{}), done: make(chan struct{}), woke: make(chan struct{}), every: every}
	// Opened before the loop's first look: until then nothing reaps
	// the command, so the pid is still the command's (a zombie at worst,
	// whose pidfd is readable at once).
	if fd, err := unix.PidfdOpen(child, unix.PIDFD_NONBLOCK); err == nil {
		r.pidfd = os.NewFile(uintptr(fd), "pidfd")
		go r.watch()
	}
	go r.loop()
	return r
}

// watch closes woke once the command's pidfd is readable: it has
// exited. It ends there, or when stop closes the pidfd.
func (r *reaper) watch() {
	rc, err := r.pidfd.SyscallConn()
	if err != nil {
		return
	}
	asked := false
	err = rc.Read(func(uintptr) bool {
		// The first call only asks to wait: the runtime then waits for
		// the descriptor to be readable and calls again.
		if !asked {
			asked = true
			return false
		}
		return true
	})
	if err == nil {
		close(r.woke)
	}
}

func (r *reaper) loop() {
	defer close(r.done)
	woke := r.woke
	for {
		if r.reapOnce() == 0 {
			select {
			case <-r.quit:
				return
			case <-woke:
				woke = nil // once: it stays closed
			case <-time.After(r.every):
			}
		}
	}
}

// reapOnce reaps what has exited, without blocking; it returns how many.
func (r *reaper) reapOnce() int {
	n := 0
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err != nil || pid <= 0 {
			return n
		}
		n++
		if pid == r.child {
			r.exited <- ws
		}
	}
}

// stop ends the loop after one last pass.
func (r *reaper) stop() {
	close(r.quit)
	<-r.done
	if r.pidfd != nil {
		r.pidfd.Close() // ends watch, if the command never exited
	}
	r.reapOnce()
}

// descendants are the live processes below freeze: with the rlimit, the
// only set freeze knows to be the command's (every orphan of it is
// re-parented to freeze, the subreaper). They are found by walking the
// children lists down from freeze (/proc/PID/task/TID/children), so a
// run's end reads its own tree, not every process of the machine
// (#51: two reads of all 930 processes' stat files, most of freeze
// run's /proc reads for a /bin/true on a busy machine). A kernel
// without those lists (CONFIG_PROC_CHILDREN) gets the scan of /proc.
func descendants() []proc.Stat {
	self := os.Getpid()
	selfKids, ok := childrenOf(proc.Default.Root, self)
	if !ok {
		return descendantsByScan(self)
	}
	var out []proc.Stat
	seen := map[int]bool{self: true}
	next := []int{self}
	for len(next) > 0 {
		p := next[0]
		next = next[1:]
		kids := selfKids // read once, for the check above
		if p != self {
			kids, _ = childrenOf(proc.Default.Root, p)
		}
		for _, pid := range kids {
			if seen[pid] {
				continue
			}
			seen[pid] = true
			st, err := proc.Default.ReadStat(pid)
			// Its parent, read again: a pid listed, then gone and
			// reused by another process, is not p's child.
			if err != nil || st.Zombie() || st.PPID != p {
				continue
			}
			out = append(out, st)
			next = append(next, pid)
		}
	}
	return out
}

// childrenOf lists pid's children, from the children list of each of its
// threads (a child belongs to the thread that forked it); ok is false
// where the kernel has no such lists. A process gone lists none.
func childrenOf(root string, pid int) (kids []int, ok bool) {
	dir := root + "/" + strconv.Itoa(pid) + "/task"
	f, err := os.Open(dir)
	if err != nil {
		return nil, true
	}
	tids, _ := f.Readdirnames(-1)
	f.Close()
	ok = len(tids) == 0
	for _, tid := range tids {
		b, err := os.ReadFile(dir + "/" + tid + "/children")
		if err != nil {
			continue
		}
		ok = true
		for _, w := range strings.Fields(string(b)) {
			if k, err := strconv.Atoi(w); err == nil {
				kids = append(kids, k)
			}
		}
	}
	return kids, ok
}

// descendantsByScan is descendants from one read of every process's
// stat file.
func descendantsByScan(self int) []proc.Stat {
	pids, _ := proc.Default.PIDs(nil)
	kids := map[int][]proc.Stat{}
	for _, pid := range pids {
		st, err := proc.Default.ReadStat(pid)
		if err != nil || st.Zombie() || pid == self {
			continue
		}
		kids[st.PPID] = append(kids[st.PPID], st)
	}
	var out []proc.Stat
	next := []int{self}
	for len(next) > 0 {
		p := next[0]
		next = next[1:]
		for _, st := range kids[p] {
			out = append(out, st)
			next = append(next, st.PID)
		}
	}
	return out
}

// live counts the command's live processes: the group's members, or
// freeze's descendants with the rlimit.
func live(cp *capped) (int, error) {
	if cp.pids == "" {
		return len(descendants()), nil
	}
	pids, err := cp.members()
	n := 0
	for _, pid := range pids {
		if st, err := proc.Default.ReadStat(pid); err == nil && !st.Zombie() {
			n++
		}
	}
	return n, err
}

// stats are the command's live processes as stats.
func stats(cp *capped) []proc.Stat {
	if cp.pids == "" {
		return descendants()
	}
	pids, _ := cp.members()
	var out []proc.Stat
	for _, pid := range pids {
		if st, err := proc.Default.ReadStat(pid); err == nil && !st.Zombie() {
			out = append(out, st)
		}
	}
	return out
}

func pidDir(pid int) string { return "/proc/" + strconv.Itoa(pid) }
