package safedir

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Knob writes v to a kernel interface file that exists: a cgroup's
// cgroup.procs, cgroup.freeze, cgroup.kill, pids.max or freezer.state, a
// process's oom_score_adj. The path is opened following no symlink in
// any component (so /proc/self is not a way in: name the pid), never
// created, and written only if its descriptor is a file of cgroupfs,
// cgroup2 or procfs, or (a fixture tree a test made) a regular file of
// the writer's with one link. A path built from what a user controls (a
// group read from /proc/PID/cgroup, a delegated subtree) reaches no
// other file.
func Knob(path, v string) error { return knob(path, v, 0) }

// KnobAppend is Knob with O_APPEND, which cgroupfs ignores: a fixture's
// cgroup.procs collects what moved in.
func KnobAppend(path, v string) error { return knob(path, v, unix.O_APPEND) }

func knob(path, v string, flag int) error {
	how := unix.OpenHow{Flags: uint64(unix.O_WRONLY | flag | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC), Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &how)
	if errors.Is(err, unix.ENOSYS) {
		fd, err = unix.Open(path, unix.O_WRONLY|flag|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return &os.PathError{Op: "statfs", Path: path, Err: err}
	}
	switch fs.Type {
	case unix.CGROUP_SUPER_MAGIC, unix.CGROUP2_SUPER_MAGIC, unix.PROC_SUPER_MAGIC:
	default:
		if err := ownFile(fd, path); err != nil {
			return fmt.Errorf("%s is not a file of cgroupfs or procfs: %w", path, err)
		}
	}
	if _, err := unix.Write(fd, []byte(v)); err != nil {
		return &os.PathError{Op: "write", Path: path, Err: err}
	}
	return nil
}
