package proc

import (
	"os"
	"sync"
)

// HostPidNS reports whether freeze runs in the initial pid namespace,
// whose pids are the kernel's (its /proc/self/ns/pid is
// PROC_PID_INIT_INO). The kernel's own interfaces speak in those pids:
// the BPF gate's maps and iterators, and the process events connector,
// which ignores a listener in any other pid namespace.
var HostPidNS = sync.OnceValue(func() bool {
	l, err := os.Readlink("/proc/self/ns/pid")
	return err == nil && l == "pid:[4026531836]"
})
