package live

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"freeze/internal/testenv"
)

// freeze node in a pod without hostPID (here: a pid namespace of its
// own) says which namespace it is in and refuses: PID 1 is then the
// pod's, /proc/1/root the pod's root, and freeze would run inside the
// pod alone while it said "node". Before, it went on without a word.
// --allow-pod-namespace lets it through, with a warning.
func TestNodeRefusesAPidNamespaceNotTheHosts(t *testing.T) {
	testenv.RequireRoot(t, "a pid namespace of the test's own (CLONE_NEWPID)")
	bin := buildFreeze(t)
	run := func(args ...string) (string, int) {
		cmd := exec.Command(bin, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Setpgid: true}
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Skipf("a new pid namespace: %v", err)
		}
		return string(out), code
	}
	out, code := run("node", "--", "--version")
	if code != 3 || !strings.Contains(out, "is not the host's") || !strings.Contains(out, "hostPID: true") {
		t.Fatalf("freeze node in a pid namespace of its own: exit %d, want 3 naming the namespace and hostPID:\n%s", code, out)
	}
	out, _ = run("node", "--allow-pod-namespace", "--root", "/", "--", "--version")
	if !strings.Contains(out, "warning: node: pid namespace") || strings.Contains(out, "error") {
		t.Fatalf("--allow-pod-namespace: want a warning and the run:\n%s", out)
	}
}
