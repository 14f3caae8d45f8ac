package proc

import (
	"sync"

	"golang.org/x/sys/unix"
)

// initPidNSIno is the inode of the initial pid namespace's
// /proc/PID/ns/pid (PROC_PID_INIT_INO, include/linux/proc_ns.h).
const initPidNSIno = 0xEFFFFFFC

// OwnPidNS is this process's pid namespace as stat(2) gives
// /proc/self/ns/pid: its device and inode, what the kernel's
// bpf_get_ns_current_pid_tgid takes to name a namespace.
func OwnPidNS() (dev, ino uint64, err error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/pid", &st); err != nil {
		return 0, 0, err
	}
	return st.Dev, st.Ino, nil
}

// HostPidNS reports whether freeze runs in the initial pid namespace,
// whose pids are the kernel's (OwnPidNS's inode is PROC_PID_INIT_INO).
// The kernel's own interfaces speak in those pids: the BPF gate's maps
// and iterators, and the process events connector, which ignores a
// listener in any other pid namespace.
var HostPidNS = sync.OnceValue(func() bool {
	_, ino, err := OwnPidNS()
	return err == nil && ino == initPidNSIno
})
