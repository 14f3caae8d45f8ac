package gate

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/containtest"
)

// On overlayfs across two filesystems and on a btrfs subvolume, stat(2)'s
// device is not the one the kernel holds for a running executable. The
// gate reads the kernel's through a descriptor: a chain running from
// such a mount is held, its decoy copy elsewhere is not, and the scan
// iterator reports the chain's executable as stat does, so a scan
// matches it.
func TestGateHoldsAChainOnOverlayfs(t *testing.T) {
	gateOnMount(t, containtest.Overlay(t))
}

func TestGateHoldsAChainOnBtrfs(t *testing.T) {
	gateOnMount(t, containtest.Btrfs(t))
}

func gateOnMount(t *testing.T, dir string) {
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Bomb, Cap: 100, HopCap: 1000000, Timeout: 300 * time.Second, Dir: dir})
	decoy := containtest.Start(t, containtest.Spec{Shape: containtest.Bomb, Cap: 20, HopCap: 1000000, Timeout: 300 * time.Second, Name: "chain-2"})
	if n := c.WaitPopulation(100, 90*time.Second); n < 100 {
		t.Fatalf("chain reached %d processes, want 100", n)
	}
	if n := decoy.WaitPopulation(20, 90*time.Second); n < 20 {
		t.Fatalf("decoy reached %d processes, want 20", n)
	}
	target := fileOf(t, c.Path)
	// The device the kernel holds for the file is its superblock's,
	// which mountinfo gives (major:minor of the mount): if stat says the
	// same, the case this test is about does not arise on this kernel.
	sb := superblockDev(t, c.Path)
	if sb == target.Stat.Dev {
		t.Skipf("stat's device of %s is its superblock's here (%d:%d): the mismatch this test is about does not arise", c.Path, unix.Major(sb), unix.Minor(sb))
	}
	g := attach(t, target)
	pids := held(t, g, c, 60*time.Second)
	t.Logf("form %s: %d of the chain held; stat said dev %#x, the kernel holds %+v", g.Form, len(pids), target.Stat.Dev, g.statOf)

	dfailed := decoy.ForkFailures()
	time.Sleep(300 * time.Millisecond)
	if now := decoy.ForkFailures(); now <= dfailed {
		t.Errorf("the decoy stopped forking (%d, then %d refused by its cap): the gate reached a copy elsewhere", dfailed, now)
	}
	if g.CanScan() {
		tasks, err := g.Tasks(nil)
		if err != nil {
			t.Fatal(err)
		}
		in := map[int]bool{}
		for _, pid := range pids {
			in[pid] = true
		}
		seen := 0
		for _, tk := range tasks {
			if in[tk.PID] {
				seen++
				if tk.Exe.Dev != target.Stat.Dev || tk.Exe.Ino != target.Stat.Ino {
					t.Errorf("pid %d: the scan iterator reports %+v, a scan compares with %+v", tk.PID, tk.Exe, target.Stat)
				}
			}
		}
		if seen != len(pids) {
			t.Errorf("the scan iterator reported %d of the chain's %d", seen, len(pids))
		}
	}
	if err := exec.Command("/bin/true").Run(); err != nil {
		t.Errorf("the exempt test process could not fork: %v", err)
	}
}

// superblockDev is the device of the mount holding path, from
// /proc/self/mountinfo (its third field, major:minor, is the
// superblock's s_dev): the longest mount point that is a prefix of path.
func superblockDev(t *testing.T, path string) uint64 {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	best, dev := "", uint64(0)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) < 5 {
			continue
		}
		mp := fl[4]
		if (path == mp || strings.HasPrefix(path, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > len(best) {
			mm := strings.SplitN(fl[2], ":", 2)
			ma, _ := strconv.ParseUint(mm[0], 10, 32)
			mi, _ := strconv.ParseUint(mm[1], 10, 32)
			best, dev = mp, unix.Mkdev(uint32(ma), uint32(mi))
		}
	}
	if best == "" {
		t.Fatalf("no mount holds %s", path)
	}
	return dev
}
