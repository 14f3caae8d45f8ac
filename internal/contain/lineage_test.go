package contain

import (
	"encoding/binary"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"freeze/internal/exefile"

	"golang.org/x/sys/unix"
)

// A process gone before freeze read what its exec ran is named by the
// name a rename gave it (a comm event carries it), and its fork's
// argv is said to be its parent's; a Go test binary read in time is
// named by its package.
func TestStartedByNamesWhatItCould(t *testing.T) {
	unread := []ancestor{
		{PID: 12, Parent: 11, Exe: "/usr/local/go/bin/go", Args: []string{"go", "test", "."}, Comm: "leaky.test", Unread: true},
		{PID: 11, Parent: 10, Exe: "/usr/local/go/bin/go", Args: []string{"go", "test", "."}},
	}
	got := startedBy(unread)
	if !strings.Contains(got, "pid 12 leaky.test (exited before freeze could read it; forked from: go test .)") || !strings.Contains(got, "<- pid 11 go test .") {
		t.Errorf("startedBy = %q", got)
	}
	read := []ancestor{{PID: 12, Parent: 11, Exe: "/tmp/go-build123/b001/leaky.test", Args: []string{"/tmp/go-build123/b001/leaky.test", "-test.run=TestX"}, Dir: "/src/leaky"}}
	if got := startedBy(read); got != "the Go test binary leaky.test of package /src/leaky (-test.run=TestX)" {
		t.Errorf("startedBy = %q", got)
	}
}

// The connector's exec event carries no argv: freeze reads /proc after
// it. A reader that lags behind two execs of one process (a shell that
// starts a helper and at once execs another program, rehearsal 33's
// 6.1 boot under stress) reads the later program; it must not name it
// as the first. Where a rename's comm event named the process, that
// name says which program the exec was (an exec itself sends no comm
// event: TestALaterExecQueuedMakesTheReadNotThisExecs covers the common
// case). A real process here, running a copy named "sleeper", plays the
// later program; the events have the kernel's format.
func TestAnExecReadAfterTheNextIsNotTakenForIt(t *testing.T) {
	sleeper, pid := runSleeper(t)
	shell := &ancestor{PID: 1000000, Exe: "/bin/sh", Args: []string{"sh", "-c", "x"}}
	events := func(named string) *ancestor {
		l := &lineage{procs: map[int]*ancestor{pid: {PID: pid, Parent: shell.PID, Exe: shell.Exe, Args: shell.Args, starter: shell}}}
		comm := make([]byte, 24)
		binary.NativeEndian.PutUint32(comm[0:], uint32(pid))
		binary.NativeEndian.PutUint32(comm[4:], uint32(pid))
		copy(comm[8:], named)
		l.event(procEventComm, comm)
		ex := make([]byte, 8)
		binary.NativeEndian.PutUint32(ex[0:], uint32(pid))
		binary.NativeEndian.PutUint32(ex[4:], uint32(pid))
		l.event(procEventExec, ex)
		return l.procs[pid]
	}
	// The exec that ran the copy, read in time: its argv.
	if a := events("sleeper"); a.Unread || a.Exe != sleeper || len(a.Args) != 2 || a.Args[1] != "30" {
		t.Errorf("an exec read in time: %+v, want the copy's argv", a)
	}
	// An exec of "starter", read once the process already ran the copy:
	// named starter, its argv not claimed.
	a := events("starter")
	got := startedBy([]ancestor{*a})
	if !a.Unread || !a.Again || strings.Contains(got, sleeper) || !strings.Contains(got, "starter (it exec'd again before freeze could read its argv; forked from: sh -c x)") {
		t.Errorf("an exec read after the next: %+v, said %q; want starter named, the copy not", a, got)
	}
}

// A read that cannot be told apart from a later exec's is not taken for
// the exec's: a process whose executable is not the one its exec named,
// and whose name can no longer be read (it exited), and one read with
// no argv (its memory gone: exiting), are gone, not read. Rehearsal 38
// named a shell's helper as started by true: the reader, lagging, read
// true's executable after the shell had exec'd it, then found its argv
// and name gone.
func TestAnExecReadAsItsProcessWentIsNotTakenForIt(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "true")
	if err := exefile.Copy("/bin/true", tr); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tr, "marker-arg")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	gone := cmd.Process.Pid // exited and reaped: /proc has no name for it
	if got := readOf(gone, "starter", &ancestor{Exe: tr, Args: []string{tr, "marker-arg"}}); got != execGone {
		t.Errorf("another executable's read, the name unreadable: %d, want gone (%d)", got, execGone)
	}
	if got := readOf(gone, "true", &ancestor{Exe: tr, Args: []string{tr, "marker-arg"}}); got != execTaken {
		t.Errorf("the exec's own executable, argv read: %d, want taken (%d)", got, execTaken)
	}
	for _, args := range [][]string{nil, {""}} {
		if got := readOf(gone, "true", &ancestor{Exe: tr, Args: args}); got != execGone {
			t.Errorf("an executable read with argv %q: %d, want gone (%d)", args, got, execGone)
		}
	}
	// And through the events: the fork's copy stays, named by the exec.
	shell := &ancestor{PID: 1000000, Exe: "/bin/sh", Args: []string{"sh", "-c", "x"}}
	l := &lineage{procs: map[int]*ancestor{gone: {PID: gone, Parent: shell.PID, Exe: shell.Exe, Args: shell.Args, Comm: "starter", starter: shell}}}
	ex := make([]byte, 8)
	binary.NativeEndian.PutUint32(ex[0:], uint32(gone))
	binary.NativeEndian.PutUint32(ex[4:], uint32(gone))
	l.event(procEventExec, ex)
	if a := l.procs[gone]; !a.Unread || a.Exe != shell.Exe || a.Comm != "starter" {
		t.Errorf("an exec event for a process gone: %+v, want the fork's copy, unread, named starter", a)
	}
}

// An exec that comes between the reads of one exec's executable and
// argv is not taken for either program: rehearsal 72 (6.12 under
// emulation) read the starter's executable, then the argv of the true
// it exec'd at once, and named the helper's starter "true marker-arg
// (deleted)" (the shell's file, removed since). A real shell copy,
// named starter, waits on a pipe to exec a sleeper copy; the test lets
// it go between the two reads, and waits until it runs the copy.
func TestAnExecBetweenTheReadsIsNotTakenForEither(t *testing.T) {
	dir := t.TempDir()
	starter := filepath.Join(dir, "starter")
	sleeper := filepath.Join(dir, "sleeper")
	for _, c := range [][2]string{{"/bin/sh", starter}, {"/bin/sleep", sleeper}} {
		if err := exefile.Copy(c[0], c[1]); err != nil {
			t.Fatal(err)
		}
	}
	pid, w := startPiped(t, starter, "-c", "read x; exec "+sleeper+" 30")
	runs := func(path, argv string) bool {
		exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		return exe == path && (argv == "" || string(b) == argv)
	}
	waitUntil(t, "ran the starter", func() bool { return runs(starter, "") })

	execs := 0
	betweenReads = func(p int) {
		if p != pid || execs > 0 {
			return
		}
		execs++
		if _, err := w.Write([]byte("go\n")); err != nil {
			t.Errorf("letting the starter exec: %v", err)
			return
		}
		waitUntil(t, "exec'd the sleeper", func() bool { return runs(sleeper, sleeper+"\x0030\x00") })
	}
	t.Cleanup(func() { betweenReads = nil })

	shell := &ancestor{PID: 1000000, Exe: "/bin/sh", Args: []string{"sh", "-c", "x"}}
	l := &lineage{procs: map[int]*ancestor{pid: {PID: pid, Parent: shell.PID, Exe: shell.Exe, Args: shell.Args, starter: shell}}}
	ex := make([]byte, 8)
	binary.NativeEndian.PutUint32(ex[0:], uint32(pid))
	binary.NativeEndian.PutUint32(ex[4:], uint32(pid))
	l.event(procEventExec, ex)
	if execs != 1 {
		t.Fatalf("the reads were not made with the exec between them (%d)", execs)
	}
	a := l.procs[pid]
	got := startedBy([]ancestor{*a})
	if !a.Unread || !a.Again || strings.Contains(got, sleeper) || strings.Contains(got, starter) || !strings.Contains(got, "(it exec'd again before freeze could read its argv; forked from: sh -c x)") {
		t.Errorf("an exec read across the next: %+v, said %q; want neither program's argv taken", a, got)
	}
	// The same process read again, with no exec between: the sleeper's.
	l.event(procEventExec, ex)
	if a := l.procs[pid]; a.Unread || a.Exe != sleeper || len(a.Args) != 2 || a.Args[1] != "30" {
		t.Errorf("an exec read with nothing between the reads: %+v, want the copy's argv", a)
	}
}

// A later exec that came during the read (its event drained after it)
// leaves the read ambiguous unless /proc read again, surely the later
// program, differs from it; a read again that is itself across an exec
// is not surely the later program, and the read stays ambiguous (not
// taken). A real shell copy, starter, execs a second copy, mid, whose
// event the socket then holds; mid execs a sleeper copy between the
// reads of the read again.
func TestAMixedReadAgainLeavesTheReadAmbiguous(t *testing.T) {
	dir := t.TempDir()
	starter, mid, sleeper := filepath.Join(dir, "starter"), filepath.Join(dir, "mid"), filepath.Join(dir, "sleeper")
	for _, c := range [][2]string{{"/bin/sh", starter}, {"/bin/sh", mid}, {"/bin/sleep", sleeper}} {
		if err := exefile.Copy(c[0], c[1]); err != nil {
			t.Fatal(err)
		}
	}
	pid, w := startPiped(t, starter, "-c", "read x; exec "+mid+" -c 'read y; exec "+sleeper+" 30'")
	blockedIn := func(path string) func() bool {
		return func() bool {
			exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
			i := strings.LastIndexByte(string(b), ')')
			return exe == path && i > 0 && i+2 < len(b) && b[i+2] == 'S'
		}
	}
	waitUntil(t, "waited in the starter", blockedIn(starter))

	l := listenLineage()
	if l == nil {
		t.Skip("the process events connector cannot be listened to here (it needs CAP_NET_ADMIN)")
	}
	t.Cleanup(func() { unix.Close(l.fd); unix.Close(l.wake[0]); unix.Close(l.wake[1]) })
	if _, err := w.Write([]byte("1\n")); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "waited in mid", blockedIn(mid)) // its exec event is sent by now
	first := &ancestor{PID: pid, Exe: starter, Args: []string{starter, "-c", "x"}}

	execs := 0
	betweenReads = func(p int) {
		if p != pid || execs > 0 {
			return
		}
		execs++
		if _, err := w.Write([]byte("2\n")); err != nil {
			t.Errorf("letting mid exec: %v", err)
			return
		}
		waitUntil(t, "exec'd the sleeper", func() bool {
			exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
			return exe == sleeper && string(b) == sleeper+"\x0030\x00"
		})
	}
	t.Cleanup(func() { betweenReads = nil })
	later := l.laterExec(pid, false, first)
	if execs != 1 {
		t.Fatalf("the read again was not made with an exec between its reads (%d): the exec's event was not drained", execs)
	}
	if !later {
		t.Errorf("a read again across an exec was taken as the later program, different from the read: the read was taken as the exec's")
	}
}

// startPiped starts path with args in a process group of its own, its
// stdin a pipe the test writes to; the group is killed at cleanup.
func startPiped(t *testing.T, path string, args ...string) (pid int, w io.WriteCloser) {
	t.Helper()
	cmd := exec.Command(path, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	w, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid = cmd.Process.Pid
	t.Cleanup(func() { syscall.Kill(-pid, syscall.SIGKILL); w.Close(); cmd.Wait() })
	return pid, w
}

// waitUntil looks every 2 ms, for up to 10 s, until ok; then it fails
// the test, saying what the process never did.
func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !ok(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the process never %s", what)
		}
	}
}

// A child's rename (a comm event: prctl, never an exec) and exec events
// that come before its parent's fork event (the kernel sends the fork's
// after it wakes the child, which can run on another CPU first) are kept
// and replayed at the fork, so its exec is still judged by that name.
// (bd2c4e8 added this for rehearsal 45's failure, whose cause was
// another: an exec sends no comm event, see laterExec.) A real process
// running a copy named "sleeper" plays the later program.
func TestAChildsEventsBeforeItsForkAreNotLost(t *testing.T) {
	sleeper, pid := runSleeper(t)
	const shellPID = 1000000
	shell := &ancestor{PID: shellPID, Exe: "/bin/sh", Args: []string{"sh", "-c", "x"}}
	comm := make([]byte, 24)
	binary.NativeEndian.PutUint32(comm[0:], uint32(pid))
	binary.NativeEndian.PutUint32(comm[4:], uint32(pid))
	copy(comm[8:], "starter")
	fork := func(parent, child int) []byte {
		b := make([]byte, 16)
		binary.NativeEndian.PutUint32(b[0:], uint32(parent))
		binary.NativeEndian.PutUint32(b[4:], uint32(parent))
		binary.NativeEndian.PutUint32(b[8:], uint32(child))
		binary.NativeEndian.PutUint32(b[12:], uint32(child))
		return b
	}
	ex := make([]byte, 8)
	binary.NativeEndian.PutUint32(ex[0:], uint32(pid))
	binary.NativeEndian.PutUint32(ex[4:], uint32(pid))

	// The name, then the fork, then the exec.
	l := &lineage{procs: map[int]*ancestor{shellPID: shell}}
	l.at = 1e9
	l.event(procEventComm, comm)
	l.at += 1e6
	l.event(procEventFork, fork(shellPID, pid))
	l.at += 1e6
	l.event(procEventExec, ex)
	l.event(procEventFork, fork(pid, pid+1)) // the helper it started
	got := startedBy(l.chain(pid + 1))
	if a := l.procs[pid]; !a.Unread || !a.Again || strings.Contains(got, sleeper) || !strings.Contains(got, "starter (it exec'd again before freeze could read its argv; forked from: sh -c x)") {
		t.Errorf("a name before the fork: %+v, said %q; want starter named, the copy not", a, got)
	}

	// The name and the exec, both before the fork: replayed in order.
	l = &lineage{procs: map[int]*ancestor{shellPID: shell}}
	l.at = 1e9
	l.event(procEventComm, comm)
	l.event(procEventExec, ex)
	l.at += 1e6
	l.event(procEventFork, fork(shellPID, pid))
	if a := l.procs[pid]; !a.Unread || !a.Again || a.Comm != "starter" {
		t.Errorf("a name and an exec before the fork: %+v, want starter's exec, unread", a)
	}

	// One older than the window is another process's, never replayed.
	l = &lineage{procs: map[int]*ancestor{shellPID: shell}}
	l.at = 1e9
	l.event(procEventComm, comm)
	l.at += int64(earlyWindow) + 1
	l.event(procEventFork, fork(shellPID, pid))
	if a := l.procs[pid]; a.Comm != "" || a.Unread {
		t.Errorf("an event older than the window was replayed: %+v", a)
	}
}

// runSleeper runs a copy of sleep named "sleeper" in a process group of
// its own, killed at cleanup, and returns once its exec is done as the
// kernel's exec event says it: the executable is the copy and its argv
// is there. The executable changes first (a read between the two, under
// load, found the copy with no argv: a process exiting, to readOf).
func runSleeper(t *testing.T) (path string, pid int) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "sleeper")
	if err := exefile.Copy("/bin/sleep", path); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid = cmd.Process.Pid
	t.Cleanup(func() { syscall.Kill(-pid, syscall.SIGKILL); cmd.Wait() })
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
		argv, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if exe == path && string(argv) == path+"\x0030\x00" {
			return path, pid
		}
		if time.Now().After(end) {
			t.Fatal("the process never ran the copy")
		}
	}
}

// An exec whose read of /proc lags behind the process's next exec is
// not taken for it: the next exec's event, queued after it, says the
// read may be the later program's. The kernel's exec event has no name
// (an exec sends no comm event), so the starter is "a program" that
// exec'd again. Rehearsals 33, 38, 45 and 46 named a starter by the
// program it became ("started by … true marker-arg"). A real process
// running a copy named "sleeper" plays the later program.
func TestALaterExecQueuedMakesTheReadNotThisExecs(t *testing.T) {
	sleeper, pid := runSleeper(t)
	const shellPID = 1000000
	shell := &ancestor{PID: shellPID, Exe: "/bin/sh", Args: []string{"sh", "-c", "x"}}
	ex := make([]byte, 8)
	binary.NativeEndian.PutUint32(ex[0:], uint32(pid))
	binary.NativeEndian.PutUint32(ex[4:], uint32(pid))
	fork := make([]byte, 16)
	binary.NativeEndian.PutUint32(fork[0:], uint32(pid))
	binary.NativeEndian.PutUint32(fork[4:], uint32(pid))
	binary.NativeEndian.PutUint32(fork[8:], uint32(pid+1))
	binary.NativeEndian.PutUint32(fork[12:], uint32(pid+1))

	// The starter's exec; its helper's fork; then its next exec, read
	// from the socket already.
	l := &lineage{procs: map[int]*ancestor{pid: {PID: pid, Parent: shellPID, Exe: shell.Exe, Args: shell.Args, starter: shell}}}
	l.queue = []queued{{what: procEventFork, body: fork}, {what: procEventExec, body: ex}}
	l.event(procEventExec, ex)
	l.event(procEventFork, fork)
	got := startedBy(l.chain(pid + 1))
	if a := l.procs[pid]; !a.Unread || !a.Again || strings.Contains(got, sleeper) || !strings.Contains(got, "a program (it exec'd again before freeze could read its argv; forked from: sh -c x)") {
		t.Errorf("an exec read with the next queued: %+v, said %q; want the program unnamed, the copy not", a, got)
	}
	// With no later exec queued, the read is the exec's.
	l = &lineage{procs: map[int]*ancestor{pid: {PID: pid, Parent: shellPID, Exe: shell.Exe, Args: shell.Args, starter: shell}}}
	l.queue = []queued{{what: procEventFork, body: fork}}
	l.event(procEventExec, ex)
	if a := l.procs[pid]; a.Unread || a.Exe != sleeper {
		t.Errorf("an exec read with nothing after it: %+v, want the copy's argv", a)
	}
}
