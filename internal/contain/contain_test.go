package contain

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"freeze/internal/containtest"
	"freeze/internal/exefile"
	"freeze/internal/interrupt"
	"freeze/internal/proc"
	"freeze/internal/timeline"
)

func TestMain(m *testing.M) { os.Exit(containtest.Main(m)) }

// bystander starts a copy of sleep of the test's own, in its own
// process group, killed at cleanup: the process a reused pid now names.
func bystander(t *testing.T) proc.Stat {
	t.Helper()
	dir := t.TempDir()
	sleep := filepath.Join(dir, "sleep")
	if err := exefile.Copy("/bin/sleep", sleep); err != nil {
		t.Fatal(err)
	}
	c := exec.Command(sleep, "60")
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-c.Process.Pid, syscall.SIGKILL); c.Wait() })
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if st, err := proc.Default.ReadStat(c.Process.Pid); err == nil && st.Comm == "sleep" {
			return st
		}
	}
	t.Fatal("the bystander never ran")
	return proc.Stat{}
}

// groupListing is a stand-in for a group's cgroup.procs: a directory of
// the test's own whose listing it sets.
func groupListing(t *testing.T, pids ...int) *capped {
	t.Helper()
	dir := t.TempDir()
	var b []byte
	for _, p := range pids {
		b = append(b, strconv.Itoa(p)+"\n"...)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return &capped{kind: CapCgroup1, pids: dir, cgroupFD: -1}
}

func alive(pid int) bool {
	st, err := proc.Default.ReadStat(pid)
	return err == nil && !st.Zombie()
}

// A leftover seen at one start time whose pid now belongs to another
// process (it exited, and the pid was reused) is never signalled: the
// pidfd is opened for the identity seen, and fails for the new process.
func TestAReusedPidIsNeverSignalled(t *testing.T) {
	by := bystander(t)
	seen := by
	seen.Start-- // what the teardown saw: the pid's earlier process
	cp := groupListing(t, by.PID)
	killPinned(cp, []proc.Stat{seen})
	time.Sleep(50 * time.Millisecond)
	if !alive(by.PID) {
		t.Fatalf("pid %d was signalled: its process is not the one the teardown saw", by.PID)
	}
	// The same process, seen as it is, is killed: the check is not what
	// spared it above.
	killPinned(cp, []proc.Stat{by})
	for end := time.Now().Add(5 * time.Second); alive(by.PID) && time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
	}
	if alive(by.PID) {
		t.Fatalf("pid %d, a member seen as it is, survived its kill", by.PID)
	}
}

// A process pinned but no longer a member once pinned (it left the
// group, and a pid of the listing is someone else's) is not signalled.
func TestOnlyAMemberOnceItIsPinnedIsSignalled(t *testing.T) {
	by := bystander(t)
	cp := groupListing(t) // the group lists nobody: by is not a member
	killPinned(cp, []proc.Stat{by})
	time.Sleep(50 * time.Millisecond)
	if !alive(by.PID) {
		t.Fatalf("pid %d was signalled though the group does not list it", by.PID)
	}
}

// The look at the cap names what the group held; a look that finds the
// group at its cap listing nobody (only zombies, which cgroup.procs does
// not list) names nothing and leaves the naming to the next look.
func TestTheCapsLookWaitsForAGroupThatListsAProcess(t *testing.T) {
	cp := groupListing(t)
	if err := os.WriteFile(filepath.Join(cp.pids, "pids.events"), []byte("max 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var w capWatch
	w.look(cp)
	if len(w.held) != 0 {
		t.Fatalf("a group that lists nobody held %v", w.held)
	}
	if m := w.missed(); m != "1 looks at the group named nothing; the last saw 3 refused forks in pids.events and 0 processes in cgroup.procs" {
		t.Errorf("what the look saw: %q", m)
	}
	by := bystander(t)
	if err := os.WriteFile(filepath.Join(cp.pids, "cgroup.procs"), []byte(strconv.Itoa(by.PID)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w.look(cp)
	exe, _ := os.Readlink("/proc/" + strconv.Itoa(by.PID) + "/exe")
	if want := "1 x " + exe; len(w.held) != 1 || w.held[0] != want || exe == "" {
		t.Fatalf("the look after the group listed its process held %q, want [%q]", w.held, want)
	}
	if m := w.missed(); m != "" {
		t.Errorf("a look that named the group's process still says it missed: %q", m)
	}
}

// A Go test binary's leftover is classed by its package's import path,
// as go-junit-report and gotestsum class the package's own cases: from
// the nearest go.mod above the directory go test ran the binary in.
func TestGoImportPathFromTheModule(t *testing.T) {
	root := t.TempDir()
	sub := filepath.Join(root, "m", "sub", "pkg")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "m", "go.mod"), []byte("// a comment\nmodule example.com/m\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]string{
		sub:                      "example.com/m/sub/pkg",
		filepath.Join(root, "m"): "example.com/m",
		root:                     "",
		"relative/dir":           "",
	} {
		if got := goImportPath(dir); got != want {
			t.Errorf("goImportPath(%s) = %q, want %q", dir, got, want)
		}
	}
	for args, want := range map[string]string{
		"-test.run=TestLeak":       "TestLeak",
		"-test.run=^TestLeak$":     "TestLeak",
		"-test.run=TestA|TestB":    "",
		"-test.v -test.count=1":    "",
		"-test.run=^TestLeak$/sub": "",
	} {
		if got := oneGoTest(strings.Fields(args)); got != want {
			t.Errorf("oneGoTest(%s) = %q, want %q", args, got, want)
		}
	}
}

// A signal that comes after the wait returned, even before the grace
// began, ends the grace at once and is recorded; only a signal the wait
// passed on to the command has had its grace, and then a further one is
// needed. (Taken for the wait's, a SIGTERM in that gap left freeze run in
// its whole grace: 60 s, in the kernel matrix's systemd boot.)
func TestASignalBeforeTheGraceEndsIt(t *testing.T) {
	by := bystander(t)
	cp := groupListing(t, by.PID) // the grace sees a live process
	ctx, cancel := context.WithCancelCause(context.Background())
	interrupt.Cancel(cancel, syscall.SIGTERM)
	rec, _ := timeline.New("", nil)
	t0 := time.Now()
	settle(ctx, Config{WaitDelay: 20 * time.Second, Rec: rec}, cp, false, func() {})
	if took := time.Since(t0); took > 10*time.Second {
		t.Fatalf("a signal before the grace left it running %v", took)
	}
	if !slices.ContainsFunc(rec.Events(), func(e timeline.Event) bool { return e.Step == timeline.StepSignal }) {
		t.Errorf("the signal that ended the grace is not recorded")
	}
	// Passed on by the wait: the grace runs on until a further signal,
	// here until its end.
	rec2, _ := timeline.New("", nil)
	t0 = time.Now()
	settle(ctx, Config{WaitDelay: 300 * time.Millisecond, Rec: rec2}, cp, true, func() {})
	if took := time.Since(t0); took < 300*time.Millisecond {
		t.Errorf("the grace after a signal the wait passed on ended after %v, before its 300ms", took)
	}
}
