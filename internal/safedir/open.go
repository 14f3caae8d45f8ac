package safedir

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// trust is how far root may trust a directory it writes in.
type trust int

const (
	// trustAll: the writer's own (or root's) and writable by no one
	// else. Nothing in it was put there by another user.
	trustAll trust = iota
	// trustNew: writable by others but sticky (/tmp, /var/tmp). Another
	// user may have planted any name, but cannot remove or rename a
	// file of the writer's (sticky(7) semantics): root creates new files
	// there (O_EXCL) and touches only files that are its own.
	trustNew
)

// openDir opens dir (O_PATH|O_DIRECTORY) following no symlink in any
// component and judges it (the third audit's S1 and S2: root appended
// to a link that the owner of a runner's directory swapped in, and
// wrote through links planted in a run directory others could write):
//   - another user's directory is refused: its owner can swap any name in
//     it between root's check and root's write;
//   - a directory others can write is refused unless it is sticky, and
//     then only new files and root's own may be written (trustNew).
func openDir(dir string) (int, trust, error) {
	if dir == "" {
		dir = "."
	}
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	dfd, err := unix.Openat2(unix.AT_FDCWD, dir, &how)
	if errors.Is(err, unix.ENOSYS) {
		// Before 5.6: component by component, none followed.
		dfd, err = walk(dir, false, 0)
	}
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
			return -1, 0, fmt.Errorf("%s is reached through a symlink: name it by its real path: %w", dir, ErrUnsafe)
		}
		return -1, 0, fmt.Errorf("open directory %s: %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(dfd, &st); err != nil {
		unix.Close(dfd)
		return -1, 0, err
	}
	me := uint32(os.Geteuid())
	switch {
	case st.Uid != me && st.Uid != 0:
		unix.Close(dfd)
		return -1, 0, fmt.Errorf("%s belongs to uid %d: its owner can swap a link in while freeze writes there as uid %d; write to a directory of your own (and copy the file), or run freeze as uid %d: %w", dir, st.Uid, me, st.Uid, ErrUnsafe)
	case st.Mode&0o022 == 0:
		return dfd, trustAll, nil
	case st.Mode&unix.S_ISVTX != 0:
		return dfd, trustNew, nil
	default:
		unix.Close(dfd)
		return -1, 0, fmt.Errorf("%s can be written by group or others and is not sticky (mode %#o): anyone who can write it can plant a link; write to a directory of your own, or chmod go-w it: %w", dir, st.Mode&0o7777, ErrUnsafe)
	}
}

// walk opens dir component by component with O_NOFOLLOW, each relative
// to its parent's descriptor, making missing ones (mode perm) when make
// is set. It returns an O_PATH descriptor of dir.
func walk(dir string, make bool, perm os.FileMode) (int, error) {
	start := "."
	if filepath.IsAbs(dir) {
		start = "/"
	}
	fd, err := unix.Open(start, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	for _, c := range splitPath(dir) {
		next, err := unix.Openat(fd, c, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if make && errors.Is(err, unix.ENOENT) {
			if err = unix.Mkdirat(fd, c, uint32(perm.Perm())); err == nil || errors.Is(err, unix.EEXIST) {
				next, err = unix.Openat(fd, c, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			}
		}
		unix.Close(fd)
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return -1, fmt.Errorf("%s: %s is a symlink or not a directory: name the directory by its real path: %w", dir, c, unix.ELOOP)
		}
		if err != nil {
			return -1, fmt.Errorf("%s: %s: %w", dir, c, err)
		}
		fd = next
	}
	return fd, nil
}

// Open opens path for writing (flag holds O_WRONLY or O_RDWR, and may
// hold O_CREATE, O_EXCL, O_APPEND, O_TRUNC), the one way freeze opens a
// file to write it:
//   - the directory is opened and judged as openDir says;
//   - no symlink is followed at the name (O_NOFOLLOW) and the open never
//     waits (O_NONBLOCK: a FIFO planted at the name would hang root);
//   - in a sticky directory others write, a file is created only new
//     (O_EXCL), and an existing one is opened only if it is the writer's;
//   - what was opened is checked on its descriptor: a regular file, the
//     writer's own, with one link (a hard link of a file root owns,
//     made where a user can write, is not a file root made there).
//
// The file is closed on exec.
func Open(path string, flag int, perm os.FileMode) (*os.File, error) {
	dir, base := filepath.Split(filepath.Clean(path))
	if base == "" || base == "." || base == ".." || base == "/" {
		return nil, fmt.Errorf("%s names no file", path)
	}
	dfd, tr, err := openDir(dir)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	return openAt(dfd, tr, path, base, flag, perm)
}

func openAt(dfd int, tr trust, path, base string, flag int, perm os.FileMode) (*os.File, error) {
	// O_TRUNC waits for the checks: opened with it, a hard link of a
	// file of root's is emptied before its descriptor can be looked at.
	trunc := flag&unix.O_TRUNC != 0
	flag = flag&^unix.O_TRUNC | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	var fd int
	var err error
	if tr == trustNew && flag&unix.O_CREAT != 0 && flag&unix.O_EXCL == 0 {
		// An existing file first (checked below to be the writer's),
		// else a new one: never O_CREAT alone, which opens whatever a
		// user made at the name.
		fd, err = unix.Openat(dfd, base, flag&^unix.O_CREAT, 0)
		if errors.Is(err, unix.ENOENT) {
			fd, err = unix.Openat(dfd, base, flag|unix.O_EXCL, uint32(perm.Perm()))
		}
	} else {
		fd, err = unix.Openat(dfd, base, flag, uint32(perm.Perm()))
	}
	switch {
	case errors.Is(err, unix.ELOOP):
		return nil, fmt.Errorf("%s is a symbolic link: freeze writes only to a file of its own: remove it and run again: %w", path, ErrUnsafe)
	case errors.Is(err, unix.ENXIO):
		return nil, fmt.Errorf("%s is a FIFO or a socket, not a file: remove it and run again: %w", path, ErrUnsafe)
	case err != nil:
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := ownFile(fd, path); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if trunc {
		if err := unix.Ftruncate(fd, 0); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("truncate %s: %w", path, err)
		}
	}
	// Writes block as file writes do; O_NONBLOCK was for the open.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

// ownFile checks, on its descriptor, that fd is a regular file of the
// writer's with one link.
func ownFile(fd int, path string) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return fmt.Errorf("%s is not a regular file: remove it and run again: %w", path, ErrUnsafe)
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%s belongs to uid %d: freeze writes only to a file of its own; remove it, or name another file: %w", path, st.Uid, ErrUnsafe)
	case st.Nlink > 1:
		return fmt.Errorf("%s has %d hard links: another name of it may be in a place freeze must not write; remove it and run again: %w", path, st.Nlink, ErrUnsafe)
	}
	return nil
}

// Append appends data to path, creating it (mode perm) if it is missing,
// through Open: only to a file that the writer made or owns (the step
// summary, guard.log).
func Append(path string, data []byte, perm os.FileMode) error {
	f, err := Open(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, perm)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// CreateNew makes path, which must not exist, and opens it for writing.
func CreateNew(path string, perm os.FileMode) (*os.File, error) {
	return Open(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
}

// OpenFIFO opens the FIFO at path (flag O_WRONLY or O_RDWR, never
// waiting for a reader), following no symlink, in a directory openDir
// trusts fully, and checks that it is a FIFO of the writer's or root's
// that no one else may open: the guard's door, as the guard and its
// asker open it.
func OpenFIFO(path string, flag int) (*os.File, error) {
	dir, base := filepath.Split(filepath.Clean(path))
	dfd, tr, err := openDir(dir)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	if tr != trustAll {
		return nil, fmt.Errorf("%s: others can write its directory: %w", path, ErrUnsafe)
	}
	fd, err := unix.Openat(dfd, base, flag|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO || (int(st.Uid) != os.Geteuid() && st.Uid != 0) || st.Mode&0o077 != 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("%s is not a FIFO of root's that only root may open: %w", path, ErrUnsafe)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// splitPath is dir's components, without empty ones and ".".
func splitPath(dir string) []string {
	var out []string
	for _, c := range strings.Split(filepath.Clean(dir), "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

// CreateTemp makes a new file in dir whose name is pattern with its last
// "*" replaced by a random string (os.CreateTemp's), through Open: the
// directory judged, the file made with O_EXCL and checked on its
// descriptor. It is the fallback record's writer.
func CreateTemp(dir, pattern string, perm os.FileMode) (*os.File, error) {
	prefix, suffix := pattern, ""
	if i := strings.LastIndex(pattern, "*"); i >= 0 {
		prefix, suffix = pattern[:i], pattern[i+1:]
	}
	var err error
	for try := 0; try < 100; try++ {
		var rnd [6]byte
		rand.Read(rnd[:])
		var f *os.File
		f, err = CreateNew(filepath.Join(dir, prefix+hex.EncodeToString(rnd[:])+suffix), perm)
		if !errors.Is(err, unix.EEXIST) {
			return f, err
		}
	}
	return nil, err
}
