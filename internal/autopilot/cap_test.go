package autopilot

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"freeze/internal/testenv"
)

// On cgroup v2 a look reads a pids.events file only when the kernel's
// notice of its change came: a quiet look reads nothing, and a refused
// fork is read on its notice. The test's own group, with a cap of 1. v1
// is polled: there the kernel sends no notice (6.18, measured: the count
// rose and no inotify event came), and this test skips; the kernel
// matrix runs it on pure v2 (5.10 and the newest).
func TestCapLookReadsOnTheKernelsNotice(t *testing.T) {
	testenv.RequireRoot(t, "making a pids cgroup")
	roots := pidsRoots()
	if len(roots) == 0 || roots[0] != "/sys/fs/cgroup" {
		t.Skip("pids is not on cgroup v2 here (v1 is polled: its pids.events sends no notice)")
	}
	parent := roots[0]
	group := filepath.Join(parent, "captest-notice-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(group, 0o755); err != nil {
		t.Skipf("cannot make a pids group of this test's: %v", err)
	}
	t.Cleanup(func() { syscall.Rmdir(group) })
	if err := os.WriteFile(filepath.Join(group, "pids.max"), []byte("1"), 0); err != nil {
		t.Fatal(err)
	}

	c := newCap(false, nil, []string{group}, group)
	defer c.Close()
	if c.evIno < 0 {
		t.Skip("inotify is not available here")
	}
	if c.polled[filepath.Join(group, "pids.events")] {
		t.Fatal("the group's pids.events was not watched")
	}
	if hits := c.Look(); len(hits) != 0 || c.reads != 0 {
		t.Fatalf("a quiet look: %d hits, %d files read; want none", len(hits), c.reads)
	}

	// One process in the group (its cap: 1), which forks once when told.
	sh := exec.Command("/bin/sh", "-c", "read x; /bin/true; read x")
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := sh.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-sh.Process.Pid, syscall.SIGKILL)
		sh.Wait()
	})
	if err := os.WriteFile(filepath.Join(group, "cgroup.procs"), []byte(strconv.Itoa(sh.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	if hits := c.Look(); len(hits) != 0 || c.reads != 0 {
		t.Fatalf("a look after a move: %d hits, %d files read; want none", len(hits), c.reads)
	}
	fmt.Fprintln(in, "fork")
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if n, _ := maxCount(filepath.Join(group, "pids.events")); n > 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the group's cap of 1 refused no fork in 10 s")
		}
	}
	var hits []Hit
	for end := time.Now().Add(5 * time.Second); len(hits) == 0; time.Sleep(20 * time.Millisecond) {
		if hits = c.Look(); time.Now().After(end) {
			t.Fatal("the refused fork was not read within 5 s of its count: no notice came")
		}
	}
	if h := hits[0]; len(hits) != 1 || h.Group != group || h.Read != "notice" || h.Before != 0 || h.After < 1 || h.Max != "1" {
		t.Fatalf("the look after a refused fork: %+v; want one hit of %s, read on its notice, pids.max 1, 0 -> 1+", hits, group)
	}
	if hits := c.Look(); len(hits) != 0 || c.reads != 0 {
		t.Fatalf("the look after that: %d hits, %d files read; want none", len(hits), c.reads)
	}
}
