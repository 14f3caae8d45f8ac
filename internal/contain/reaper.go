package contain

import (
	"os"
	"strconv"
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
// re-parented to freeze, the subreaper).
func descendants() []proc.Stat {
	self := os.Getpid()
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
