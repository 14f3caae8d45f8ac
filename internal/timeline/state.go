package timeline

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/safedir"
)

// RootStateDir is where root's runs keep their timelines by default:
// /var/tmp survives a reboot, which a postmortem needs.
const RootStateDir = "/var/tmp/freeze"

// ErrStateDir means the state directory is not one freeze may write
// records into: another user's, or writable by others, so anyone could
// have planted a symlink, a FIFO or a forged record there.
var ErrStateDir = errors.New("unsafe state directory")

// StateDir is the caller's timeline directory: RootStateDir for root,
// $XDG_STATE_HOME/freeze (else ~/.local/state/freeze) for anyone else.
func StateDir() string {
	if os.Geteuid() == 0 {
		return RootStateDir
	}
	if x := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(x) {
		return filepath.Join(x, "freeze")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "state", "freeze")
	}
	return filepath.Join(os.TempDir(), "freeze-"+strconv.Itoa(os.Geteuid()))
}

// CheckStateDir makes dir (mode 0700) if it is missing and checks that
// it is a directory of the caller's that no one else can write
// (safedir.Ensure). A directory someone else made first (a non-root
// user's drill made /var/tmp/freeze 0755, theirs) is refused, with what
// to do.
func CheckStateDir(dir string) error {
	if err := safedir.Ensure(dir); err != nil {
		return fmt.Errorf("%w (%w)", ErrStateDir, err)
	}
	return nil
}

// RunName is a timeline file name unique to this run: the prefix, the
// time to the millisecond, and the pid. Two runs in one second (a --hold
// and the run that finishes it, a guard's back-to-back requests) shared
// one file when names had seconds only.
func RunName(prefix string) string {
	return fmt.Sprintf("%s-%s-%d.jsonl", prefix, time.Now().UTC().Format("20060102T150405.000Z"), os.Getpid())
}

// openFile opens a timeline for appending in the directory dfd (opened
// by safedir.MkdirAll, no symlink in its path), following no symlink at
// its last component and never blocking (a FIFO planted at the name would
// hang the run before containment), and checks that it is a regular file
// owned by the caller.
func openFile(dfd int, path string) (*os.File, error) {
	fd, err := unix.Openat(dfd, filepath.Base(path), unix.O_WRONLY|unix.O_CREAT|unix.O_APPEND|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o644)
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("%s is a symbolic link: freeze writes records only to a file of its own", path)
	}
	if errors.Is(err, unix.ENXIO) {
		return nil, fmt.Errorf("%s is a FIFO or a socket, not a file", path)
	}
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, err
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		unix.Close(fd)
		return nil, fmt.Errorf("%s is not a regular file", path)
	case int(st.Uid) != os.Geteuid():
		unix.Close(fd)
		return nil, fmt.Errorf("%s belongs to uid %d: freeze appends only to a timeline of its own", path, st.Uid)
	}
	// The writer blocks as a file write does; O_NONBLOCK was for the open.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}
