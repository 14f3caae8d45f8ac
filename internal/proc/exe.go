package proc

import (
	"os"
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

// HidePID returns the hidepid option of the proc mount at p.Root ("2",
// "invisible", "1", "noaccess"), or "" when it hides nothing. With it, a
// user who is not root sees only their own processes (proc(5)).
func (p FS) HidePID() string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	return parseHidePID(b, p.Root)
}

// parseHidePID finds the hidepid super option of the mount at root in a
// mountinfo file (proc(5): fields, " - ", fstype, source, super options).
func parseHidePID(mountinfo []byte, root string) string {
	hide := ""
	for _, line := range strings.Split(string(mountinfo), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || f[4] != root {
			continue
		}
		sep := -1
		for i, x := range f {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+3 >= len(f) || f[sep+1] != "proc" {
			continue
		}
		hide = "" // a later mount on the same point hides the earlier
		for _, o := range strings.Split(f[sep+3], ",") {
			if v, ok := strings.CutPrefix(o, "hidepid="); ok && v != "0" && v != "off" {
				hide = v
			}
		}
	}
	return hide
}
