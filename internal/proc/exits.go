package proc

import (
	"errors"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// Exits waits for processes to exit without reading /proc while it waits.
// Each process is pinned by a pidfd (as Open pins it: checked against its
// scanned start time) in one epoll set, and the kernel wakes the waiter as
// each one exits (a pidfd is readable once its process is a zombie).
//
// Why not poll /proc: freeze waits for a killed chain at real-time
// priority, and the chain dies at ordinary priority. A dying process may
// first have to finish what it was doing in the kernel (a fork of a tree
// at its pids cap waits for the whole tree's shared anon_vma lock), so
// the CPU freeze spends reading 1,500 stat files every 100 ms is taken
// from the deaths it waits for. Under emulation on Linux 7.2 that made a
// killed tree of 1,500 take 3 min 11 s to die, and 21.8 s with the
// waiter at ordinary priority (#34).
//
// A process that cannot be pinned (a fixture tree, no pidfds on this
// kernel, more than half the descriptors the run may open) is watched by
// reading its stat, at most once per pollEvery and never more than a
// fifth of the time. A caller that pinned a process already, to signal
// it, hands over that pidfd (Adopt) rather than have it opened twice.
type Exits struct {
	fs     FS
	ep     int
	byFD   map[int32]ID
	polled []ID // watched by reading /proc
	room   int  // how many may be pinned
	// unpinnable: an open failed for want of a pidfd; the rest are
	// watched by reading /proc.
	unpinnable bool
	next       time.Time
	events     []unix.EpollEvent
}

// pollEvery is how often the processes that are not pinned are counted.
const pollEvery = 100 * time.Millisecond

// NewExits makes an empty Exits; Watch and Adopt fill it (a kill round
// adopts the pidfds it signalled through, and watches the rest).
func (p FS) NewExits() *Exits {
	e := &Exits{fs: p, ep: -1, byFD: map[int32]ID{}}
	if p.Signals == nil && p.Root == Default.Root {
		if fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC); err == nil {
			e.ep = fd
		}
	}
	// Half the descriptors left at most: the round and the run need the
	// rest (the pidfds the round signals by, the group's files, the
	// record).
	var lim unix.Rlimit
	if open, err := os.ReadDir("/proc/self/fd"); err == nil && unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) == nil {
		e.room = max(int(min(lim.Cur, 1<<21))-len(open), 0) / 2
	}
	return e
}

// Watch pins id, or watches it through /proc if it cannot be pinned. It
// reports whether id was gone already (exited, a zombie, its pid reused).
func (e *Exits) Watch(id ID) (gone bool) {
	if !e.canPin() {
		e.polled = append(e.polled, id)
		return false
	}
	h, err := e.fs.Open(id)
	if errors.Is(err, ErrGone) || errors.Is(err, ErrReused) {
		return true
	}
	if err != nil {
		// No pidfd (EMFILE, ENOSYS): this one and the rest are counted
		// by /proc.
		e.unpinnable = true
		e.polled = append(e.polled, id)
		return false
	}
	e.Adopt(h)
	return false
}

// WatchKilled pins id by a pidfd alone, for a process already killed:
// no read of its stat to check its start time, a read that, made for
// each of thousands while they die, took the CPU their deaths needed.
// A pid reused since the scan (by another process) is then waited on
// until the round's deadline: a delay, never a signal to it. It
// reports whether id was gone already.
func (e *Exits) WatchKilled(id ID) (gone bool) {
	if !e.canPin() || e.fs.Signals != nil || e.fs.Root != Default.Root {
		return e.Watch(id)
	}
	fd, err := unix.PidfdOpen(id.PID, 0)
	if errors.Is(err, unix.ESRCH) {
		return true
	}
	if err != nil {
		return e.Watch(id)
	}
	e.Adopt(&Handle{ID: id, fd: fd})
	return false
}

// Adopt watches the process h pins, through h itself, and owns h from
// then on: a kill round that signalled through a pidfd waits on that
// same pidfd rather than opening it again (an open is a pidfd_open and a
// read of the stat file).
func (e *Exits) Adopt(h *Handle) {
	if !e.canPin() || h.fd < 0 {
		h.Close()
		e.polled = append(e.polled, h.ID)
		return
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(h.fd)}
	if err := unix.EpollCtl(e.ep, unix.EPOLL_CTL_ADD, h.fd, &ev); err != nil {
		h.Close()
		e.polled = append(e.polled, h.ID)
		return
	}
	e.byFD[int32(h.fd)] = h.ID
}

// canPin says whether one more process may be pinned.
func (e *Exits) canPin() bool {
	return e.ep >= 0 && !e.unpinnable && len(e.byFD) < e.room
}

// Left is how many are not yet known to be gone.
func (e *Exits) Left() int { return len(e.byFD) + len(e.polled) }

// Wait waits up to d for exits and returns how many it saw.
func (e *Exits) Wait(d time.Duration) int {
	gone := 0
	if len(e.byFD) > 0 {
		ms := int(d / time.Millisecond)
		if len(e.polled) > 0 {
			ms = min(ms, int(pollEvery/time.Millisecond))
		}
		gone += e.waitPinned(max(ms, 1))
	} else if len(e.polled) > 0 {
		time.Sleep(min(d, max(time.Until(e.next), 0)))
	} else {
		time.Sleep(d)
	}
	if len(e.polled) > 0 && !time.Now().Before(e.next) {
		t0 := time.Now()
		n := len(e.polled)
		e.polled = slices.DeleteFunc(e.polled, e.dead)
		gone += n - len(e.polled)
		// At most a fifth of the time reading /proc.
		e.next = time.Now().Add(max(pollEvery, 4*time.Since(t0)))
	}
	return gone
}

// waitPinned waits up to ms for pidfds to become readable.
func (e *Exits) waitPinned(ms int) int {
	if e.events == nil {
		e.events = make([]unix.EpollEvent, 256)
	}
	n, err := unix.EpollWait(e.ep, e.events, ms)
	if err != nil {
		return 0 // EINTR: the caller waits again
	}
	gone := 0
	for _, ev := range e.events[:n] {
		if _, ok := e.byFD[ev.Fd]; !ok {
			continue
		}
		delete(e.byFD, ev.Fd)
		unix.EpollCtl(e.ep, unix.EPOLL_CTL_DEL, int(ev.Fd), nil)
		unix.Close(int(ev.Fd))
		gone++
	}
	return gone
}

func (e *Exits) dead(id ID) bool {
	st, err := e.fs.ReadStat(id.PID)
	return err != nil || st.Start != id.Start || st.Zombie()
}

// Close releases the pidfds and the epoll set.
func (e *Exits) Close() {
	for fd := range e.byFD {
		unix.Close(int(fd))
	}
	e.byFD = nil
	if e.ep >= 0 {
		unix.Close(e.ep)
		e.ep = -1
	}
}
