package containtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"freeze/internal/testenv"
)

// helperOut is where TestHelperStartsAChainAndWaits, run in a copy of
// this test binary, writes its chain's file and group.
const helperOut = "CONTAINTEST_HELPER_OUT"

// A test binary killed mid-chain (go test's -timeout, a SIGKILL) runs no
// cleanup: its sentinel kills its chain and removes the chain's group.
// Before, such a chain ran on, re-parented to init (206 processes left by
// internal/stop/live, killed by an outer timeout).
func TestAKilledTestBinaryLeavesNoChain(t *testing.T) {
	testenv.RequireLive(t, "the chain's pids cgroup and the sentinel's sweep")
	dir := t.TempDir()
	out := filepath.Join(dir, "helper")
	cmd := exec.Command("/proc/self/exe", "-test.run", "^TestHelperStartsAChainAndWaits$", "-test.timeout", "5m")
	// The helper is killed and runs no cleanup: its temporary
	// directories (its t.TempDir, the chain's build, its run directory)
	// go under this test's, which this test's cleanup removes. Before,
	// each run left two under /tmp.
	cmd.Env = append(os.Environ(), helperOut+"="+out, "TMPDIR="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	t.Cleanup(func() { syscall.Kill(-pgid, syscall.SIGKILL) })
	var words []string
	for end := time.Now().Add(60 * time.Second); len(words) != 2; time.Sleep(50 * time.Millisecond) {
		b, _ := os.ReadFile(out)
		words = strings.Fields(string(b))
		if time.Now().After(end) {
			t.Fatal("the helper test binary did not start its chain in 60 s")
		}
	}
	exe, group := words[0], words[1]
	// Belt and braces: whatever the sentinel does, this test leaves
	// nothing (the chain's file is in the helper's temporary directory,
	// the group is the helper's).
	t.Cleanup(func() { sweep([]string{group}, []string{exe}, time.Now().Add(30*time.Second)) })
	if n := len(runningAny([]string{exe})); n < 20 {
		t.Fatalf("the helper's chain runs %d processes, want its 20: the test proves nothing", n)
	}
	syscall.Kill(-pgid, syscall.SIGKILL) // the test binary, no cleanup
	cmd.Wait()
	for end := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		n := len(runningAny([]string{exe}))
		_, err := os.Stat(group)
		if n == 0 && os.IsNotExist(err) {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("60 s after its test binary was killed: %d processes of its chain alive, its group %s there: %v", n, group, err == nil)
		}
	}
}

// TestHelperStartsAChainAndWaits is run by TestAKilledTestBinaryLeavesNoChain
// in a copy of this binary: it starts a chain of 20 and waits to be
// killed. Run directly, it skips.
func TestHelperStartsAChainAndWaits(t *testing.T) {
	out := os.Getenv(helperOut)
	if out == "" {
		t.Skip("a helper of TestAKilledTestBinaryLeavesNoChain")
	}
	c := Start(t, Spec{Shape: Tree, Cap: 20, HopCap: 1000, Timeout: 4 * time.Minute, Interval: 50 * time.Millisecond})
	if n := c.WaitPopulation(20, 30*time.Second); n != 20 {
		t.Fatalf("reached %d of 20", n)
	}
	if err := os.WriteFile(out, []byte(c.Path+" "+c.cap.dir+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Minute)
}

// The sweep removes an empty group of freeze's named after the chain's
// file, which freeze under test made and had not yet removed when its
// test binary was killed (an empty freezer group
// freeze-chain14363-39-700199c1 was left so), and leaves a group named
// after another file.
func TestSweepRemovesAnEmptyGroupNamedAfterTheChain(t *testing.T) {
	testenv.RequireRoot(t, "making cgroups")
	base := "chainsweep" + strconv.Itoa(os.Getpid())
	var root string
	for _, r := range []string{"/sys/fs/cgroup/freezer", "/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		if err := os.Mkdir(filepath.Join(r, "freeze-"+base+"-0badc0de"), 0o755); err == nil {
			root = r
			break
		}
	}
	if root == "" {
		t.Skip("no cgroup hierarchy here takes a group of this test's")
	}
	mine := filepath.Join(root, "freeze-"+base+"-0badc0de")
	other := filepath.Join(root, "freeze-"+base+"x-0badc0de")
	t.Cleanup(func() { syscall.Rmdir(mine); syscall.Rmdir(other) })
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	sweep(nil, []string{filepath.Join(t.TempDir(), base)}, time.Now().Add(10*time.Second))
	if _, err := os.Stat(mine); !os.IsNotExist(err) {
		t.Errorf("the sweep left %s, the empty group named after its chain's file: %v", mine, err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("the sweep removed %s, named after another file: %v", other, err)
	}
}
