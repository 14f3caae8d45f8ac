// Package safedir is freeze's one writer: every file that freeze, as
// root, creates or changes goes through it (the timeline, reports, JUnit,
// the step summary, the guard's ack, log, state and lock, metrics, run
// state, locks, cgroup and /proc knobs), and a test (TestOneWriter) fails
// on a write flag spelled anywhere else. Its rules, on paths another user
// may control:
//   - no symlink is followed in any component (openat2
//     RESOLVE_NO_SYMLINKS), and what is written is written by descriptor;
//   - a directory another user owns is refused, and so is one others can
//     write unless it is sticky, where only files root makes new (O_EXCL)
//     or its own are written;
//   - an existing file is written only if it is a regular file of the
//     writer's with one link; a FIFO at the name never blocks the open;
//   - a knob (Knob) is written only if it is a file of cgroupfs or procfs.
//
// It never changes a directory it did not make, and never chmods one.
package safedir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ErrUnsafe means a path is not one freeze, as root, may write: a
// directory another user owns or can write, a link, a file not its own.
var ErrUnsafe = errors.New("not a place root may write")

// Ensure makes dir (mode 0700, parents 0755) if it is missing and checks,
// on a descriptor opened without following a symlink, that it is a
// directory owned by the caller and writable by no one else.
func Ensure(dir string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	if err := unix.Mkdir(dir, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("make %s: %w", dir, err)
	}
	return Check(dir)
}

// Check is Ensure without making anything: dir, opened without
// following a symlink, is a directory owned by the caller and writable
// by no one else.
func Check(dir string) error {
	fd, err := openChecked(dir)
	if err == nil {
		unix.Close(fd)
	}
	return err
}

// EnsureShared is Ensure for a directory every user may read and
// search (mode 0755, whatever the umask): made if missing, then checked
// and chmodded on one descriptor, opened without following a symlink.
func EnsureShared(dir string) error {
	if err := unix.Mkdir(dir, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("make %s: %w", dir, err)
	}
	fd, err := openChecked(dir)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fchmod(fd, 0o755)
}

// openChecked opens dir without following a symlink and checks, on
// that descriptor, that it is a directory owned by the caller and
// writable by no one else; the caller closes it.
func openChecked(dir string) (fd int, err error) {
	fd, err = unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("%s is not a directory freeze made (%v): remove it and run again: %w", dir, err, ErrUnsafe)
	}
	var st unix.Stat_t
	switch {
	case unix.Fstat(fd, &st) != nil:
		err = fmt.Errorf("stat %s: %w", dir, ErrUnsafe)
	case int(st.Uid) != os.Geteuid():
		err = fmt.Errorf("%s belongs to uid %d, not to you: whoever made it can plant or forge what freeze keeps there; check it, remove it, and run again: %w", dir, st.Uid, ErrUnsafe)
	case st.Mode&0o022 != 0:
		err = fmt.Errorf("%s is writable by group or others (mode %#o): chmod 700 it: %w", dir, st.Mode&0o777, ErrUnsafe)
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// OpenNoSymlinks opens path O_PATH, following no symlink in any component
// (openat2 RESOLVE_NO_SYMLINKS, Linux 5.6; before it, O_NOFOLLOW guards
// the last one). The caller fstats the descriptor and acts on it.
func OpenNoSymlinks(path string) (int, error) {
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &how)
	if errors.Is(err, unix.ENOSYS) {
		fd, err = unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	return fd, err
}
