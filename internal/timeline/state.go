package timeline

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

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
