package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Child runs the calling test again in a child process of this test
// binary (-test.run=^NAME$, -test.v), with env ("NAME=VALUE") added for
// the test to see that it is the child. attr, if not nil, adds the
// child's attributes (its namespaces, say). The child runs in a process
// group of its own, killed whole if it runs past two minutes: a hung
// child (a BPF load, a lock) is never left to go test's own timeout,
// outside any group a test kills. It returns the child's output, and an
// error if the child failed or never said the test passed (a pattern
// that matched no test runs none, and exits 0).
//
// It calls no method of t but Name, so a test may call it from a
// goroutine of its own (from a thread it changed, such as a lowered
// bounding set, which the child inherits).
func Child(t testing.TB, env string, attr *syscall.SysProcAttr) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), env)
	if attr == nil {
		attr = &syscall.SysProcAttr{}
	}
	attr.Setpgid = true
	cmd.SysProcAttr = attr
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("the child of %s: %w", t.Name(), err)
	}
	if !strings.Contains(string(out), "--- PASS: "+t.Name()+" ") {
		return out, fmt.Errorf("the child of %s did not say the test passed", t.Name())
	}
	return out, nil
}
