package proc

import (
	"errors"
	"fmt"
	"io/fs"

	"golang.org/x/sys/unix"
)

var (
	// ErrGone means the process exited before it could be pinned.
	ErrGone = errors.New("process is gone")
	// ErrReused means the pid now belongs to another process: its start
	// time differs from the one the scan saw.
	ErrReused = errors.New("pid was reused by another process")
)

// A Handle pins one process through a pidfd.
type Handle struct {
	ID
	fd   int
	fake func(ID, unix.Signal) error // FS.Signals, on a fixture tree
}

// ErrFixture refuses pidfds for a fixture tree that has no FS.Signals.
var ErrFixture = errors.New("a fixture /proc tree has no real processes to pin")

// Open pins the process id names. It opens a pidfd first and then checks
// the start time, so the pidfd refers to the scanned process or Open
// fails: after this, signals through the handle cannot reach a stranger.
func (p FS) Open(id ID) (*Handle, error) {
	if p.Signals != nil {
		return p.openFixture(id)
	}
	if p.Root != Default.Root {
		return nil, fmt.Errorf("pid %d in %s: %w", id.PID, p.Root, ErrFixture)
	}
	fd, err := unix.PidfdOpen(id.PID, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil, fmt.Errorf("pid %d: %w", id.PID, ErrGone)
		}
		return nil, fmt.Errorf("pidfd_open %d: %w", id.PID, err)
	}
	st, err := p.ReadStat(id.PID)
	if err != nil {
		unix.Close(fd)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("pid %d: %w", id.PID, ErrGone)
		}
		return nil, err
	}
	if st.Zombie() {
		// It has exited; only its parent's wait is left. Nothing to
		// signal or move.
		unix.Close(fd)
		return nil, fmt.Errorf("pid %d is a zombie: %w", id.PID, ErrGone)
	}
	if st.Start != id.Start {
		unix.Close(fd)
		return nil, fmt.Errorf("pid %d started at %d, scanned at %d: %w", id.PID, st.Start, id.Start, ErrReused)
	}
	return &Handle{ID: id, fd: fd}, nil
}

// openFixture checks id against a fixture tree as Open checks it against
// the kernel: gone, a zombie, or reused by another start time.
func (p FS) openFixture(id ID) (*Handle, error) {
	st, err := p.ReadStat(id.PID)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("pid %d: %w", id.PID, ErrGone)
	case err != nil:
		return nil, err
	case st.Zombie():
		return nil, fmt.Errorf("pid %d is a zombie: %w", id.PID, ErrGone)
	case st.Start != id.Start:
		return nil, fmt.Errorf("pid %d started at %d, scanned at %d: %w", id.PID, st.Start, id.Start, ErrReused)
	}
	return &Handle{ID: id, fd: -1, fake: p.Signals}, nil
}

// Signal sends sig through the pidfd (pidfd_send_signal(2)). A process
// that has exited (or is a zombie) gives ErrGone.
func (h *Handle) Signal(sig unix.Signal) error {
	if h.fake != nil {
		return h.fake(h.ID, sig)
	}
	err := unix.PidfdSendSignal(h.fd, sig, nil, 0)
	if errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("pid %d: %w", h.PID, ErrGone)
	}
	return err
}

// Close releases the pidfd.
func (h *Handle) Close() error {
	if h.fd < 0 {
		return nil
	}
	return unix.Close(h.fd)
}

// FD is the pidfd, for the kernel interfaces that take one (the gate's
// task storage is keyed by pidfd); -1 on a fixture tree.
func (h *Handle) FD() int { return h.fd }
