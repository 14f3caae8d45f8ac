// Package runlock keeps two freeze runs off the same chain. A run takes an
// exclusive flock(2) on a file named after the chain's group; a second run
// finds it held and is told who holds it: the holder's pid and start time
// (identity is the pair, never a pid alone), when it started, and its
// command. The kernel drops a flock when its holder dies, so a run that
// crashed or was killed leaves a lock file that nobody holds: the next run
// takes it over and says whose it was.
//
// It never signals or waits for the holder: deciding that is the
// operator's, with the facts in hand.
package runlock

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/safedir"

	"freeze/internal/proc"
)

// Holder is what a lock file says about the run that took it.
type Holder struct {
	PID     int       `json:"pid"`
	Start   uint64    `json:"start_ticks"` // stat field 22: with the pid, the process's identity
	Started time.Time `json:"started"`
	Command []string  `json:"command"`
}

func (h Holder) String() string {
	return fmt.Sprintf("pid %d (start time %d ticks after boot), running since %s: %q", h.PID, h.Start, h.Started.Format(time.RFC3339), h.Command)
}

// HeldError says that another live run holds the lock.
type HeldError struct {
	Path   string
	Holder Holder
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("another freeze run holds %s: %s", e.Path, e.Holder)
}

// Lock is a taken lock.
type Lock struct {
	path string
	f    *os.File
	// Stale is the holder recorded in the file when this run took the
	// lock over from a run that ended without releasing it; nil if the
	// file was new or empty.
	Stale *Holder
}

// Path is the lock file.
func (l *Lock) Path() string { return l.path }

// retries bounds the loop against a holder that releases (and removes the
// file) between our open and our flock: each retry is a new file.
const retries = 5

// Acquire takes the lock for name in dir, creating dir. It returns a
// *HeldError when a live run holds it.
func Acquire(fs proc.FS, dir, name string, command []string) (*Lock, error) {
	// The directory is the caller's own and no one else's to write: a
	// non-root user's /tmp/freeze-UID, made first by another user or as
	// a symlink, was opened through (#24, finding 10).
	if err := safedir.Ensure(dir); err != nil {
		return nil, fmt.Errorf("lock directory: %w", err)
	}
	path := filepath.Join(dir, name+".lock")
	for i := 0; i < retries; i++ {
		f, err := safedir.Open(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			h, _ := read(f)
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, &HeldError{Path: path, Holder: h}
			}
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		// The holder before us removes the file before it unlocks; if
		// that happened after our open, we hold a lock on a file that
		// is no longer there: start again.
		var a, b unix.Stat_t
		if unix.Fstat(int(f.Fd()), &a) != nil || unix.Stat(path, &b) != nil || a.Ino != b.Ino || a.Dev != b.Dev {
			f.Close()
			continue
		}
		l := &Lock{path: path, f: f}
		if h, err := read(f); err == nil && h.PID != 0 {
			l.Stale = &h
		}
		me := Holder{PID: os.Getpid(), Started: time.Now(), Command: command}
		if st, err := fs.ReadStat(me.PID); err == nil {
			me.Start = st.Start
		}
		body, _ := json.Marshal(me)
		if err := f.Truncate(0); err == nil {
			f.WriteAt(append(body, '\n'), 0)
		}
		return l, nil
	}
	return nil, fmt.Errorf("lock %s: it kept changing under us (%d tries)", path, retries)
}

func read(f *os.File) (Holder, error) {
	var h Holder
	b := make([]byte, 64<<10)
	n, _ := f.ReadAt(b, 0)
	if n == 0 {
		return h, errors.New("empty")
	}
	err := json.Unmarshal(b[:n], &h)
	return h, err
}

// Release removes the file, then drops the lock (in that order: see
// Acquire's retry).
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := os.Remove(l.path)
	l.f.Close()
	l.f = nil
	return err
}

// Dir is where locks live: /run/freeze for root (a tmpfs: no lock
// outlives a reboot), else a directory of the user's own.
func Dir() string {
	if os.Geteuid() == 0 {
		return "/run/freeze"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "freeze")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("freeze-%d", os.Geteuid()))
}
