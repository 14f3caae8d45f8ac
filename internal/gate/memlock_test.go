package gate

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"freeze/internal/proc"
	"freeze/internal/testenv"
)

// The gate loads as root without CAP_SYS_RESOURCE and under a hard
// RLIMIT_MEMLOCK of 64 KiB (a container's root, a sandbox: this machine's
// CI), where the kernel accounts BPF memory to the cgroup (5.11 on).
// Before 5.11 the limit is what the maps are charged to: there the load
// fails and says so. A gate that insisted on raising the limit failed
// every load here, and every gate test skipped.
func TestGateLoadsWithoutRaisingMemlock(t *testing.T) {
	if os.Getenv("FREEZE_GATE_MEMLOCK_CHILD") == "1" {
		memlockChild(t)
		return
	}
	testenv.RequireRoot(t, "loading BPF programs")
	g, err := Load(Config{Form: testForm(t), Exempt: Exempt(proc.Default)})
	// The regression: the refused raise itself failed the load (the
	// error began with it), before any map or program was tried. A load
	// refused for another reason (lockdown, no bpf(2): qemu's user mode)
	// only notes the refused raise after its own error, and skips.
	if err != nil && accountsToMemcg() && strings.HasPrefix(err.Error(), "raise RLIMIT_MEMLOCK") {
		t.Fatalf("on a kernel that accounts BPF memory to the cgroup, the load failed on RLIMIT_MEMLOCK: %s", Explain(err))
	}
	if err != nil {
		testenv.GateMissing(t, Explain(err))
	}
	g.Close()

	// The child is started from a thread whose bounding set lacks
	// CAP_SYS_RESOURCE: root's exec then permits it everything else.
	// The thread is never given back (its goroutine ends locked to it,
	// and the runtime ends it), and no tool is needed (the VMs' setpriv
	// is busybox's, without --bounding-set).
	type result struct {
		out []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, unix.CAP_SYS_RESOURCE, 0, 0, 0); err != nil {
			done <- result{nil, fmt.Errorf("PR_CAPBSET_DROP CAP_SYS_RESOURCE: %w", err)}
			return
		}
		out, err := testenv.Child(t, "FREEZE_GATE_MEMLOCK_CHILD=1", nil)
		done <- result{out, err}
	}()
	r := <-done
	out := r.out
	if r.err != nil {
		t.Fatalf("the gate without CAP_SYS_RESOURCE, RLIMIT_MEMLOCK 64 KiB: %v\n%s", r.err, out)
	}
	if !strings.Contains(string(out), "child: ") {
		t.Fatalf("the child said nothing of its load:\n%s", out)
	}
	t.Logf("%s", strings.TrimSpace(grepLine(string(out), "child: ")))
}

// memlockChild runs in a process without CAP_SYS_RESOURCE: it lowers its
// RLIMIT_MEMLOCK, checks that it cannot raise it again, and loads.
func memlockChild(t *testing.T) {
	low := unix.Rlimit{Cur: 64 << 10, Max: 64 << 10}
	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &low); err != nil {
		t.Fatalf("lower RLIMIT_MEMLOCK: %v", err)
	}
	inf := unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}
	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &inf); err == nil {
		t.Fatal("the child raised RLIMIT_MEMLOCK: CAP_SYS_RESOURCE was not dropped, and the test proves nothing")
	}
	g, err := Load(Config{Form: testForm(t), Exempt: Exempt(proc.Default)})
	if accountsToMemcg() {
		if err != nil {
			t.Fatalf("on a kernel that accounts BPF memory to the cgroup, the gate did not load without raising RLIMIT_MEMLOCK: %s", Explain(err))
		}
		g.Close()
		fmt.Println("child: loaded without CAP_SYS_RESOURCE under RLIMIT_MEMLOCK 64 KiB")
		return
	}
	if err == nil {
		g.Close()
		fmt.Println("child: loaded under RLIMIT_MEMLOCK 64 KiB on a kernel before 5.11")
		return
	}
	if !strings.Contains(err.Error(), "RLIMIT_MEMLOCK could not be raised") {
		t.Fatalf("before 5.11 a load under a limit it could not raise failed without naming the limit: %v", err)
	}
	fmt.Println("child: refused before 5.11, naming the limit:", err)
}

// accountsToMemcg: 5.11 moved BPF memory from RLIMIT_MEMLOCK to the
// memory cgroup.
func accountsToMemcg() bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return true
	}
	var major, minor int
	fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &major, &minor)
	return major > 5 || major == 5 && minor >= 11
}

func grepLine(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}
