package proc

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// PIDs appends the pid of every process in p.Root to dst. It parses the
// directory entries itself (getdents64) instead of making a string of each
// name: a scan does this once per pass, and with the collector off during
// a run every allocation stays until the run ends.
func (p FS) PIDs(dst []int) ([]int, error) {
	fd, err := unix.Open(p.Root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return dst, fmt.Errorf("open %s: %w", p.Root, err)
	}
	defer unix.Close(fd)
	buf := make([]byte, 32<<10)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			return dst, fmt.Errorf("read %s: %w", p.Root, os.NewSyscallError("getdents64", err))
		}
		if n <= 0 {
			return dst, nil
		}
		dst = appendPIDs(dst, buf[:n])
	}
}

// appendPIDs parses linux_dirent64 records (getdents64(2): d_ino u64,
// d_off s64, d_reclen u16, d_type u8, d_name NUL-terminated) and appends
// every name made only of digits.
func appendPIDs(dst []int, b []byte) []int {
	const nameOff = 19 // 8 + 8 + 2 + 1
	for len(b) >= nameOff {
		reclen := int(*(*uint16)(unsafe.Pointer(&b[16])))
		if reclen < nameOff || reclen > len(b) {
			return dst
		}
		name := b[nameOff:reclen]
		pid, ok := 0, len(name) > 0 && name[0] != 0
		for _, c := range name {
			if c == 0 {
				break
			}
			if c < '0' || c > '9' || pid > 1<<30 {
				ok = false
				break
			}
			pid = pid*10 + int(c-'0')
		}
		if ok {
			dst = append(dst, pid)
		}
		b = b[reclen:]
	}
	return dst
}
