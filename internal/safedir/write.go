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

// WriteFile replaces path with data, as root may on a user's behalf: the
// directory is opened without following a symlink in any component
// (openat2 RESOLVE_NO_SYMLINKS), the data goes to a new file made in it
// with O_CREAT|O_EXCL|O_NOFOLLOW (nothing a user planted is opened, or
// written through), its mode is set on the descriptor (fchmod), and it
// is renamed over path within that directory (renameat), which replaces
// whatever stood there, a symlink included, without following it. A
// reader never sees half a file. This is the one way freeze writes a
// file a user names or can reach (--report, the metrics file): a user's
// symlink in a world-writable directory must not make root truncate a
// file of its choosing, and a temporary file chmodded by name can be
// swapped before the chmod.
func WriteFile(path string, data []byte, mode os.FileMode) error {
	dir, base := filepath.Split(filepath.Clean(path))
	if dir == "" {
		dir = "."
	}
	if base == "" || base == "." || base == ".." || base == "/" {
		return fmt.Errorf("%s names no file", path)
	}
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	dfd, err := unix.Openat2(unix.AT_FDCWD, dir, &how)
	if errors.Is(err, unix.ENOSYS) {
		// Before 5.6: the last component unfollowed only.
		dfd, err = unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
			return fmt.Errorf("the directory of %s is reached through a symlink: name it by its real path: %w", path, err)
		}
		return fmt.Errorf("open the directory of %s: %w", path, err)
	}
	defer unix.Close(dfd)
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := "." + base + ".tmp-" + hex.EncodeToString(rnd[:])
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create a file beside %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), filepath.Join(dir, tmp))
	_, err = f.Write(data)
	if err == nil {
		err = unix.Fchmod(fd, uint32(mode.Perm()))
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dfd, tmp, dfd, base)
	}
	if err != nil {
		unix.Unlinkat(dfd, tmp, 0)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// MkdirAll makes dir and its missing parents (mode perm) the way root
// may in a path a user can write: component by component from the root
// (or the working directory), each opened with O_NOFOLLOW relative to
// its parent's descriptor and made with mkdirat where it is missing, so
// a symlink anywhere in the path is refused rather than followed (a
// user's link in the directory part of -t made root create a file where
// the link pointed). It returns a descriptor of dir (O_PATH), for the
// caller's openat; the caller closes it.
func MkdirAll(dir string, perm os.FileMode) (int, error) {
	start := "."
	if filepath.IsAbs(dir) {
		start = "/"
	}
	fd, err := unix.Open(start, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	for _, c := range strings.Split(filepath.Clean(dir), "/") {
		if c == "" || c == "." {
			continue
		}
		next, err := unix.Openat(fd, c, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			if err = unix.Mkdirat(fd, c, uint32(perm.Perm())); err == nil || errors.Is(err, unix.EEXIST) {
				next, err = unix.Openat(fd, c, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			}
		}
		unix.Close(fd)
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return -1, fmt.Errorf("%s: %s is a symlink or not a directory: name the directory by its real path", dir, c)
		}
		if err != nil {
			return -1, fmt.Errorf("%s: %s: %w", dir, c, err)
		}
		fd = next
	}
	return fd, nil
}
