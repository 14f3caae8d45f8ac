package stop

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"freeze/internal/match"
)

// An armed guard has read the system's program directories (the judge's)
// before its first request, which is the incident's: that request's
// start-up was 4.8-6.1 ms against 1.1-1.6 for the ones after it. Checked
// in a process of its own, which has read nothing before Arm.
func TestArmReadsTheSystemsProgramsBeforeTheFirstRequest(t *testing.T) {
	if os.Getenv("FREEZE_TEST_ARM_CHILD") == "1" {
		if match.SystemLoaded() {
			t.Fatal("the system's programs were read before Arm: this check cannot tell")
		}
		r := Arm(func(string) {})
		defer r.Close()
		if !match.SystemLoaded() {
			t.Fatal("Arm returned and the system's programs are not read: the first request reads them")
		}
		return
	}
	// In a group of its own, killed as a group if Arm hangs; -test.v,
	// so that a child that ran no test (a pattern that matched none)
	// is not taken for one that passed.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestArmReadsTheSystemsProgramsBeforeTheFirstRequest$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "FREEZE_TEST_ARM_CHILD=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the armed process: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "--- PASS: TestArmReadsTheSystemsProgramsBeforeTheFirstRequest") {
		t.Fatalf("the armed process ran no such test:\n%s", out)
	}
}
