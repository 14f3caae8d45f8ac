package contain

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/exefile"
	"freeze/internal/proc"
)

func statPIDs(sts []proc.Stat) []int {
	var pids []int
	for _, st := range sts {
		pids = append(pids, st.PID)
	}
	return pids
}

// The walk of the children lists finds what the scan of every process
// finds below this process: a child, its child, and one that left its
// session (setsid) and was re-parented here when its parent exited.
func TestDescendantsWalkFindsWhatTheScanFinds(t *testing.T) {
	dir := t.TempDir()
	sleep := filepath.Join(dir, "walk-sleep")
	if err := exefile.Copy("/bin/sleep", sleep); err != nil {
		t.Fatal(err)
	}
	// sh starts a sleep in the background (its child), and a setsid'd
	// sh whose sleep outlives it (re-parented to the nearest subreaper,
	// this test process, as freeze run is for its command).
	script := sleep + " 30 & setsid sh -c '" + sleep + " 31 & exit 0' ; wait"
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var orphan int
	// The sleeps, found by their file (this test's own copy), not by the
	// code under test: the setsid'd one is in a group of its own.
	copies := func() (pids []int) {
		dirs, _ := filepath.Glob("/proc/[0-9]*")
		for _, d := range dirs {
			if exe, _ := os.Readlink(d + "/exe"); exe == sleep {
				if pid, err := strconv.Atoi(filepath.Base(d)); err == nil {
					pids = append(pids, pid)
				}
			}
		}
		return pids
	}
	var seen []int
	t.Cleanup(func() {
		seen = append(seen, copies()...)
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		for _, pid := range seen {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		cmd.Wait()
		// sh is gone: each sleep is reaped by now, or re-parented to this
		// process (the subreaper) and reaped here; ECHILD otherwise.
		for _, pid := range seen {
			var ws syscall.WaitStatus
			syscall.Wait4(pid, &ws, 0, nil)
		}
	})
	ours := func(sts []int) (mine []int) {
		for _, pid := range sts {
			if exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe"); exe == sleep {
				mine = append(mine, pid)
			}
		}
		return mine
	}
	pidsOf := func(f func() []int) []int { s := f(); slices.Sort(s); return s }
	walk := func() []int { return statPIDs(descendants()) }
	scan := func() []int { return statPIDs(descendantsByScan(os.Getpid())) }
	deadline := time.Now().Add(10 * time.Second)
	for len(ours(pidsOf(scan))) < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	seen = copies()
	s := pidsOf(scan)
	if len(ours(s)) != 2 {
		t.Fatalf("the scan found %v of its sleeps below this process, want 2", ours(s))
	}
	for _, pid := range ours(s) {
		if st, err := proc.Default.ReadStat(pid); err == nil && st.PPID == os.Getpid() {
			orphan = pid
		}
	}
	if orphan == 0 {
		t.Fatalf("no sleep was re-parented to this process: the setsid'd one should be")
	}
	w := pidsOf(walk)
	if !slices.Equal(ours(w), ours(s)) {
		t.Errorf("the walk found %v of the sleeps, the scan %v", ours(w), ours(s))
	}
	if !slices.Contains(w, cmd.Process.Pid) {
		t.Errorf("the walk %v lacks the shell %d, this process's child", w, cmd.Process.Pid)
	}
}

// childrenOf reads every thread's list, and says when the kernel keeps
// none (a fixture tree).
func TestChildrenOfReadsEachThreadsList(t *testing.T) {
	root := t.TempDir()
	write := func(p, s string) {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("100/task/100/children", "101 102 ")
	write("100/task/105/children", "103")
	write("200/task/200/stat", "")
	kids, ok := childrenOf(root, 100)
	slices.Sort(kids)
	if !ok || !slices.Equal(kids, []int{101, 102, 103}) {
		t.Errorf("childrenOf 100 = %v, %v; want [101 102 103], true", kids, ok)
	}
	if _, ok := childrenOf(root, 200); ok {
		t.Errorf("a process with no children lists read as listed")
	}
	if kids, ok := childrenOf(root, 300); !ok || len(kids) != 0 {
		t.Errorf("a process gone: %v, %v; want none, true", kids, ok)
	}
}

// The reaper sees the command's exit when it happens, not at its next
// look for orphans: with that look an hour away, the status still
// comes, through the command's pidfd.
func TestReaperWakesAtTheCommandsExit(t *testing.T) {
	if fd, err := unix.PidfdOpen(os.Getpid(), unix.PIDFD_NONBLOCK); err != nil {
		t.Skipf("no pollable pidfd here (PIDFD_NONBLOCK, Linux 5.10): %v", err)
	} else {
		unix.Close(fd)
	}
	sleep := filepath.Join(t.TempDir(), "reaper-sleep")
	if err := exefile.Copy("/bin/sleep", sleep); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sleep, "0.3")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	reaped := false
	t.Cleanup(func() {
		if !reaped {
			syscall.Kill(-pid, syscall.SIGKILL)
			var ws syscall.WaitStatus
			syscall.Wait4(pid, &ws, 0, nil)
		}
	})
	r := startReaper(pid, time.Hour)
	defer r.stop()
	select {
	case ws := <-r.exited:
		reaped = true
		if !ws.Exited() || ws.ExitStatus() != 0 {
			t.Fatalf("the command's status is %v, want exit 0", ws)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no status 20 s after a 0.3 s command started: the reaper waited for its next look, not for the command's exit")
	}
}
