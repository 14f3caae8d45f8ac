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
type reaper struct {
	child  int
	exited chan unix.WaitStatus
	quit   chan struct{}
	done   chan struct{}
}

func newReaper(child int) *reaper {
	r := &reaper{child: child, exited: make(chan unix.WaitStatus, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go r.loop()
	return r
}

func (r *reaper) loop() {
	defer close(r.done)
	for {
		if r.reapOnce() == 0 {
			select {
			case <-r.quit:
				return
			case <-time.After(2 * time.Millisecond):
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
