package proc

import (
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// deletedSuffix is what the kernel appends to /proc/PID/exe when the file
// was removed or replaced after exec (d_path(), fs/d_path.c).
const deletedSuffix = " (deleted)"

// File is the device and inode of a file: the identity of a binary.
type File struct {
	Dev, Ino uint64
	Nlink    uint64
}

// ExeFile stats /proc/PID/exe, which follows to the running file even
// when it was deleted. Nlink is 0 for a deleted file.
func (p FS) ExeFile(pid int) (File, error) {
	var st unix.Stat_t
	if err := unix.Stat(p.Root+"/"+strconv.Itoa(pid)+"/exe", &st); err != nil {
		return File{}, gone(err)
	}
	return File{Dev: st.Dev, Ino: st.Ino, Nlink: uint64(st.Nlink)}, nil
}

// ExePath reads the exe link. deleted reports the " (deleted)" suffix,
// which is removed from path.
func (p FS) ExePath(pid int) (path string, deleted bool, err error) {
	var buf [4096]byte
	n, err := unix.Readlink(p.Root+"/"+strconv.Itoa(pid)+"/exe", buf[:])
	if err != nil {
		return "", false, gone(err)
	}
	path = string(buf[:n])
	if strings.HasSuffix(path, deletedSuffix) {
		return strings.TrimSuffix(path, deletedSuffix), true, nil
	}
	return path, false, nil
}

// StatFile returns the identity of the file at path, following symlinks.
func StatFile(path string) (File, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return File{}, err
	}
	return File{Dev: st.Dev, Ino: st.Ino, Nlink: uint64(st.Nlink)}, nil
}
