package safedir

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

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
// swapped before the chmod. The data is on disk (fsync) before the
// rename.
func WriteFile(path string, data []byte, mode os.FileMode) error {
	return writeFile(path, data, mode, true)
}

// WriteStatus is WriteFile without the fsync, for a status file whose
// line means nothing once its writer is gone (the guard's ack and
// heartbeat): a reader still never sees half a file, and nothing waits
// on the disk. Each fsync there cost 68 and 97 ms under a churning chain
// (perf trace), where a request's run waited for two.
func WriteStatus(path string, data []byte, mode os.FileMode) error {
	return writeFile(path, data, mode, false)
}

func writeFile(path string, data []byte, mode os.FileMode, durable bool) error {
	dir, base := filepath.Split(filepath.Clean(path))
	if dir == "" {
		dir = "."
	}
	if base == "" || base == "." || base == ".." || base == "/" {
		return fmt.Errorf("%s names no file", path)
	}
	dfd, tr, err := openDir(dir)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
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
	if err == nil && durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = replace(dfd, tr, tmp, base, path)
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
	return walk(dir, true, perm)
}

// replace renames tmp over base in dfd. In a sticky directory others
// write (trustNew), only a name that is free, or a regular file of the
// writer's, is replaced: sticky(7) keeps another user from swapping
// either before the rename.
func replace(dfd int, tr trust, tmp, base, path string) error {
	if tr == trustAll {
		return unix.Renameat(dfd, tmp, dfd, base)
	}
	var st unix.Stat_t
	err := unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return unix.Renameat2(dfd, tmp, dfd, base, unix.RENAME_NOREPLACE)
	}
	if err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() || st.Nlink > 1 {
		return fmt.Errorf("%s is there already and is not a file of freeze's (uid %d, type %#o) in a directory others can write: remove it, or name another file: %w", path, st.Uid, st.Mode&unix.S_IFMT, ErrUnsafe)
	}
	return unix.Renameat(dfd, tmp, dfd, base)
}
