package containtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// alive reports whether pid is a live process (not a zombie) started at
// start (field 22 of /proc/PID/stat).
func alive(pid int, start string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	return f[0] != "Z" && f[19] == start
}

func startTime(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	return strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))[19]
}

// The incident this harness exists for: a timeout that killed only the
// direct child, while a grandchild in its own session went on.
func TestTimeoutKillsGrandchildInItsOwnSession(t *testing.T) {
	c := Start(t, Spec{Shape: Escape, Cap: 10, HopCap: 5, Timeout: 2 * time.Second})
	var pid int
	deadline := time.Now().Add(5 * time.Second)
	for pid == 0 && time.Now().Before(deadline) {
		fmt.Sscanf(c.Stdout(), "grandchild %d", &pid)
		time.Sleep(10 * time.Millisecond)
	}
	if pid == 0 {
		t.Fatalf("the fixture never reported its grandchild; stderr: %s", c.Stderr())
	}
	start := startTime(pid)
	if pgid, _ := getpgid(pid); pgid == c.Leader {
		t.Fatalf("grandchild %d is still in the leader's process group: the control proves nothing", pid)
	}
	// Leave out the sweep of the test cache, so that the cgroup kill is
	// the one thing that can reach the grandchild.
	c.noDir.Store(true)
	for !c.TimedOut() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !c.TimedOut() {
		t.Fatal("the harness's timeout did not fire")
	}
	if !gone(10*time.Second, func() bool { return !alive(pid, start) }) {
		t.Fatalf("grandchild %d in its own session is alive 10 s after the timeout: only the direct child was killed", pid)
	}
	if !gone(20*time.Second, func() bool { _, err := os.Stat(c.cap.dir); return err != nil }) {
		t.Fatalf("the chain's cgroup %s is still there 20 s after the timeout", c.cap.dir)
	}
}

// The process-group kill on its own must end every member of the leader's
// group: with it removed, this fails.
func TestGroupKillEndsTheLeadersGroup(t *testing.T) {
	c := Start(t, Spec{Shape: Tree, Cap: 30, HopCap: 1000, Timeout: 60 * time.Second, Interval: 20 * time.Millisecond})
	if n := c.WaitPopulation(30, 10*time.Second); n < 30 {
		t.Fatalf("the tree reached %d processes, want 30", n)
	}
	members := c.Survivors()
	starts := map[int]string{}
	for _, pid := range members {
		starts[pid] = startTime(pid)
	}
	c.noCgroup.Store(true) // only the group kill
	c.noDir.Store(true)
	c.Kill()
	var left []int
	gone(10*time.Second, func() bool {
		left = left[:0]
		for _, pid := range members {
			if alive(pid, starts[pid]) {
				left = append(left, pid)
			}
		}
		return len(left) == 0
	})
	if len(left) > 0 {
		t.Fatalf("%d of %d members of the leader's process group survived its group kill: %v", len(left), len(members), left)
	}
}

// A chain whose own hop cap is out of reach runs into the pids cap.
func TestPidsCapStopsAChainThatWouldGoOn(t *testing.T) {
	c := Start(t, Spec{Shape: Tree, Cap: 50, HopCap: 1000000, Timeout: 60 * time.Second, Interval: 5 * time.Millisecond})
	if n := c.WaitPopulation(50, 20*time.Second); n != 50 {
		t.Fatalf("population %d, want the cap of 50", n)
	}
	// The chain keeps trying: wait for the kernel to refuse a fork, then
	// the population must still be at the cap.
	if !gone(20*time.Second, func() bool { return c.ForkFailures() > 0 }) {
		t.Fatal("pids.events counts no refused fork in 20 s: the cap is not what stopped the chain")
	}
	if n := c.Population(); n > 50 {
		t.Fatalf("population %d went past the cap of 50", n)
	}
}

// The fixture's literal hop cap stops a hand-off line by itself.
func TestHopCapStopsALine(t *testing.T) {
	c := Start(t, Spec{Shape: Line, Cap: 100, HopCap: 20, Timeout: 30 * time.Second, Interval: time.Millisecond})
	ws, ok := c.Exit(20 * time.Second)
	if !ok {
		t.Fatalf("the line did not stop at its hop cap; population %d", c.Population())
	}
	if ws.ExitStatus() != 42 {
		t.Fatalf("exit status %d, want 42 (hop cap)", ws.ExitStatus())
	}
	if want := "chain: hop cap 20 reached"; !strings.Contains(c.Stderr(), want) {
		t.Fatalf("stderr %q lacks the marker %q", c.Stderr(), want)
	}
}

// A churning chain orphans everything; after Kill nothing is left: no
// process from the test cache, no cgroup, no zombie of ours.
func TestChurnLeavesNothingBehind(t *testing.T) {
	c := Start(t, Spec{Shape: Churn, Cap: 200, HopCap: 1000000, Timeout: 60 * time.Second, Interval: 5 * time.Millisecond})
	if n := c.WaitPopulation(150, 20*time.Second); n < 150 {
		t.Fatalf("churn reached %d processes, want 150", n)
	}
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	if left := c.Survivors(); len(left) > 0 {
		t.Fatalf("alive after Kill: %v", left)
	}
	if _, err := os.Stat(c.cap.dir); err == nil {
		t.Fatalf("cgroup %s left after Kill", c.cap.dir)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		reap()
		zombies := 0
		for _, pid := range children() {
			if comm, st, ok := commState(pid); ok && st == 'Z' && comm == filepath.Base(c.Path) {
				zombies++
			}
		}
		if zombies == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d zombie chain processes not reaped", zombies)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestOwnCgroups(t *testing.T) {
	v1, v2 := ownCgroups([]byte("9:name=systemd:/\n8:pids:/ci\n4:memory:/m\n2:cpu,cpuacct:/c\n0::/u\n"))
	if v1["pids"] != "/ci" || v1["cpuacct"] != "/c" || v1["memory"] != "/m" || v2 != "/u" {
		t.Fatalf("v1 %v v2 %q", v1, v2)
	}
}

// gone polls done every 10 ms until it reports true or within passes; it
// reports whether done did.
func gone(within time.Duration, done func() bool) bool {
	end := time.Now().Add(within)
	for !done() {
		if time.Now().After(end) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}
