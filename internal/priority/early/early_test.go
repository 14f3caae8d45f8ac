package early_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	schedOther       = 0
	schedRR          = 2
	schedResetOnFork = 0x40000000
)

// TestChildrenNeverInherit runs a program that imports early, as freeze
// does, as root: its main thread must be at SCHED_RR, every thread must
// be either at ordinary priority or carry SCHED_RESET_ON_FORK, and a
// process it starts, from the main thread or another, must start at
// ordinary priority.
func TestChildrenNeverInherit(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the lift happens only as root")
	}
	bin := filepath.Join(t.TempDir(), "forkcheck")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/forkcheck").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), "FREEZE_PRIORITY=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	// Whatever forkcheck did, nothing of its process group outlives it.
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if err != nil {
		t.Fatalf("forkcheck: %v\n%s", err, out)
	}
	t.Logf("%s", out)
	var threads, children int
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 6 && f[0] == "thread":
			threads++
			pol, _ := strconv.Atoi(f[5])
			if f[3] == "true" && pol&^schedResetOnFork != schedRR {
				t.Errorf("main thread at policy %#x, want SCHED_RR: the lift did not happen", pol)
			}
			if pol != schedOther && pol&schedResetOnFork == 0 {
				t.Errorf("thread %s at policy %#x without SCHED_RESET_ON_FORK: a process it starts inherits real-time priority", f[1], pol)
			}
		case len(f) == 7 && f[0] == "child":
			children++
			if f[6] != strconv.Itoa(schedOther) {
				t.Errorf("a child started from the %s thread has policy %s, want SCHED_OTHER (0)", f[2], f[6])
			}
		}
	}
	if threads < 2 || children != 2 {
		t.Fatalf("forkcheck reported %d threads and %d children, want at least 2 and 2", threads, children)
	}
}
