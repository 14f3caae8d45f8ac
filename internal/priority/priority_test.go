package priority

import (
	"freeze/internal/testenv"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// On SIGXCPU (RLIMIT_RTTIME's soft limit) freeze drops to ordinary
// priority and says so through OnDrop, so the timeline records it.
func TestSIGXCPUDropsAndTells(t *testing.T) {
	testenv.RequireRoot(t, "real-time priority needs root")
	did, err := Raise()
	if !strings.Contains(strings.Join(did, ","), "SCHED_RR") {
		t.Skipf("cannot take real-time priority here: %v", err)
	}
	defer Lower()
	told := make(chan string, 1)
	OnDrop(func(why string) { told <- why })
	if err := syscall.Kill(os.Getpid(), syscall.SIGXCPU); err != nil {
		t.Fatal(err)
	}
	select {
	case why := <-told:
		if why != DropReason {
			t.Fatalf("told %q", why)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("SIGXCPU: OnDrop's function was not called within 10 s")
	}
	for _, tid := range threads() {
		pol, _, e := unix.RawSyscall(unix.SYS_SCHED_GETSCHEDULER, uintptr(tid), 0, 0)
		if e == 0 && pol&^schedResetOnFork == schedRR {
			t.Errorf("thread %d still at SCHED_RR after SIGXCPU", tid)
		}
	}
}
