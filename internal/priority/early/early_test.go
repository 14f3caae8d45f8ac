package early_test

import (
	"context"
	"freeze/internal/testenv"
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
	schedOther = 0
	schedRR    = 2
)

// TestChildrenNeverInherit runs a program that imports early, as freeze
// does, as root. Every thread of it must be at SCHED_RR without
// SCHED_RESET_ON_FORK (a thread at ordinary priority stalls the run
// behind a spinning chain), and a process it starts through
// priority.Start, from the main thread or another, must start at
// ordinary priority. The control: one started with a plain Start
// inherits SCHED_RR, which is why freeze starts nothing that way.
func TestChildrenNeverInherit(t *testing.T) {
	testenv.RequireLive(t, "the lift happens only as root")
	bin := filepath.Join(t.TempDir(), "forkcheck")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/forkcheck").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	out := runOwned(t, bin)
	t.Logf("%s", out)
	var threads, children int
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 6 && f[0] == "thread":
			threads++
			if pol, _ := strconv.Atoi(f[5]); pol != schedRR {
				t.Errorf("thread %s (main %s) at policy %#x, want SCHED_RR (%d) without SCHED_RESET_ON_FORK", f[1], f[3], pol, schedRR)
			}
		case len(f) == 8 && f[0] == "child":
			children++
			want := strconv.Itoa(schedOther)
			if f[4] == "plain" {
				want = strconv.Itoa(schedRR)
			}
			if f[7] != want {
				t.Errorf("a child started from the %s thread by %s has policy %s, want %s", f[2], f[4], f[7], want)
			}
		}
	}
	if threads < 2 || children != 3 {
		t.Fatalf("forkcheck reported %d threads and %d children, want at least 2 and 3", threads, children)
	}
}

// A subcommand that only reads or writes files (freeze timeline,
// restore, runbook, help) is not lifted: at SCHED_RR a render of a large
// timeline took a CPU from the machine for nothing (#24, finding 10).
func TestFileSubcommandsAreNotLifted(t *testing.T) {
	testenv.RequireLive(t, "the lift happens only as root")
	bin := filepath.Join(t.TempDir(), "forkcheck")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/forkcheck").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	for arg, want := range map[string]int{"timeline": schedOther, "restore": schedOther, "--path": schedRR} {
		out := runOwned(t, bin, arg)
		if checkThreads(t, "argv[1] "+arg, out, want) == 0 {
			t.Fatalf("forkcheck %s printed no thread:\n%s", arg, out)
		}
	}
}

// runOwned runs path with arg as root would, lift allowed, in a process
// group of its own killed whole when it ends or overruns, and returns
// its output.
func runOwned(t *testing.T, path string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = append(os.Environ(), "FREEZE_PRIORITY=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	// Whatever it did, nothing of its process group outlives it.
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(path), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// checkThreads checks that every thread forkcheck reported is at policy
// want, and returns how many it reported.
func checkThreads(t *testing.T, what, out string, want int) int {
	t.Helper()
	seen := 0
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 6 && f[0] == "thread" {
			seen++
			if pol, _ := strconv.Atoi(f[5]); pol&0xff != want {
				t.Errorf("%s: thread %s at policy %#x, want %d", what, f[1], pol, want)
			}
		}
	}
	return seen
}

// The package's first stage (deploy/package/stage.c) runs the same
// constructor, then execs freeze: freeze starts lifted, reports the
// stage's figures (the CPU before the lift, counted from the process's
// start), and the variable that carried them is gone from its
// environment. A subcommand that is not lifted is not lifted through
// the stage either (#34).
func TestTheFirstStageLiftsAndHandsOver(t *testing.T) {
	testenv.RequireLive(t, "the lift happens only as root")
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no cc to build the first stage")
	}
	dir := t.TempDir()
	real, stage := filepath.Join(dir, "forkcheck"), filepath.Join(dir, "stage")
	if out, err := exec.Command("go", "build", "-o", real, "./testdata/forkcheck").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	if out, err := exec.Command(cc, "-O2", "-static", `-DFREEZE_REAL="`+real+`"`, "-o", stage, "../../../deploy/package/stage.c").CombinedOutput(); err != nil {
		// Without glibc's static libraries: dynamic, as the test only
		// checks the hand-over.
		if out2, err2 := exec.Command(cc, "-O2", `-DFREEZE_REAL="`+real+`"`, "-o", stage, "../../../deploy/package/stage.c").CombinedOutput(); err2 != nil {
			t.Fatalf("cc stage.c: %v\n%s\n%s", err2, out, out2)
		}
	}
	for arg, want := range map[string]int{"--path": schedRR, "timeline": schedOther} {
		s := runOwned(t, stage, arg)
		if want == schedRR && !strings.Contains(s, "lifted true cpu_us ") || want == schedOther && !strings.Contains(s, "lifted false") {
			t.Errorf("stage %s: %s", arg, s)
		}
		if !strings.Contains(s, `env ""`) {
			t.Errorf("stage %s: FREEZE_EARLY_LIFT was passed on: %s", arg, s)
		}
		if checkThreads(t, "stage "+arg, s, want) == 0 {
			t.Errorf("stage %s: forkcheck printed no thread:\n%s", arg, s)
		}
	}
}
