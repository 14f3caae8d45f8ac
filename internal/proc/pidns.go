package proc

import (
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// initPidNSIno is the inode of the initial pid namespace
// (PROC_PID_INIT_INO, include/linux/proc_ns.h): the host's.
const initPidNSIno = 0xEFFFFFFC

// PidNS names this process's pid namespace ("pid:[4026531836]") and
// says whether it is the host's: the initial one, whose pids are the
// kernel's.
func PidNS() (name string, host bool) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/pid", &st); err != nil {
		return "unknown (" + err.Error() + ")", false
	}
	name, _ = os.Readlink("/proc/self/ns/pid")
	if name == "" {
		name = fmt.Sprintf("pid:[%d]", st.Ino)
	}
	return name, st.Ino == initPidNSIno
}

// HostPidNS reports, once, whether freeze runs in the initial pid
// namespace (PidNS). The kernel's own interfaces speak in its pids: the
// BPF gate's maps and iterators, and the process events connector,
// which ignores a listener in any other pid namespace.
var HostPidNS = sync.OnceValue(func() bool {
	_, host := PidNS()
	return host
})
