package containtest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A pidsCap is a pids cgroup made for one chain. Its pids.max is the cap
// the kernel enforces on the chain, whatever the code under test does.
type pidsCap struct {
	dir      string // absolute cgroup directory
	v2       bool
	relative string // the group as it reads in /proc/PID/cgroup
	// leaf is where the chain starts, on v2: a group inside dir, so that
	// dir holds no process itself and can hand the pids controller down
	// (cgroup v2's no-internal-process rule). A group the code under test
	// makes beside its own (freeze run's) is then still under dir's cap.
	leaf string
}

// errNoCap means no pids cgroup can be made here; callers skip.
var errNoCap = errors.New("no pids cgroup can be made")

// handsOutPids: the v2 group dir enables pids for its children. The
// harness reads this itself rather than through internal/freeze: what
// caps a hostile chain reads nothing from the code under test.
func handsOutPids(dir string) bool {
	ctl, _ := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	return hasWord(ctl, "pids")
}

// newPidsCap makes a pids cgroup named name and sets pids.max to max. It
// prefers the v1 pids hierarchy (nested in the test process's own pids
// group); on v2 the group goes beside the test's own group, in its
// parent, where that parent hands out pids, else at the root.
func newPidsCap(name string, max int) (*pidsCap, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: not root", errNoCap)
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNoCap, err)
	}
	v1, v2 := ownCgroups(self)
	var c *pidsCap
	if rel, ok := v1["pids"]; ok && isDir("/sys/fs/cgroup/pids") {
		c = &pidsCap{dir: filepath.Join("/sys/fs/cgroup/pids", rel, name), relative: filepath.Join(rel, name)}
	} else if v2 != "" {
		// Beside the test's own group, in its parent: under systemd the
		// test runs in a unit's or a session's group, which holds
		// processes and so hands out no controller. Else at the root.
		rel := filepath.Dir(v2)
		if !handsOutPids(filepath.Join("/sys/fs/cgroup", rel)) {
			rel = "/"
		}
		parent := filepath.Join("/sys/fs/cgroup", rel)
		if !handsOutPids(parent) {
			return nil, fmt.Errorf("%w: neither the v2 cgroup %s nor the root delegates the pids controller", errNoCap, filepath.Join("/sys/fs/cgroup", filepath.Dir(v2)))
		}
		c = &pidsCap{dir: filepath.Join(parent, name), v2: true, relative: filepath.Join(rel, name)}
	} else {
		return nil, fmt.Errorf("%w: no v1 pids hierarchy and no v2 pids controller", errNoCap)
	}
	if err := os.Mkdir(c.dir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: %v", errNoCap, err)
	}
	note("group", c.dir)
	if err := c.setMax(max); err != nil {
		os.Remove(c.dir)
		return nil, fmt.Errorf("%w: set pids.max: %v", errNoCap, err)
	}
	if c.v2 {
		leaf := filepath.Join(c.dir, "chain")
		err := os.WriteFile(filepath.Join(c.dir, "cgroup.subtree_control"), []byte("+pids"), 0)
		if err == nil {
			err = os.Mkdir(leaf, 0o755)
		}
		if err != nil {
			c.remove()
			return nil, fmt.Errorf("%w: the chain's leaf group: %v", errNoCap, err)
		}
		c.leaf = leaf
	}
	return c, nil
}

// ownCgroups parses /proc/self/cgroup: v1 controller to path, and the v2 path.
func ownCgroups(b []byte) (v1 map[string]string, v2 string) {
	v1 = map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = parts[2]
			continue
		}
		for _, ctl := range strings.Split(parts[1], ",") {
			v1[ctl] = parts[2]
		}
	}
	return v1, v2
}

func (c *pidsCap) setMax(n int) error {
	return os.WriteFile(filepath.Join(c.dir, "pids.max"), []byte(strconv.Itoa(n)), 0)
}

func (c *pidsCap) add(pid int) error {
	dir := c.dir
	if c.leaf != "" {
		dir = c.leaf
	}
	return os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
}

// members lists the pids in the group and in any group below it (a
// command under test, such as freeze drill, makes its own groups there);
// zombies have already left.
func (c *pidsCap) members() ([]int, error) {
	var pids []int
	for _, d := range c.dirs() {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	if _, err := os.Stat(c.dir); err != nil {
		return nil, err
	}
	return pids, nil
}

// dirs lists the group and the groups below it, deepest first.
func (c *pidsCap) dirs() []string {
	var out []string
	filepath.WalkDir(c.dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// forkFailures reads the "max" counter of pids.events: how many forks the
// cap refused. It is the largest over the group and the groups below it:
// before Linux 6.12 the kernel counts a refusal in the forking task's own
// group (the leaf), since then in the group whose limit refused it and
// each above.
func (c *pidsCap) forkFailures() int {
	most := 0
	for _, d := range c.dirs() {
		most = max(most, pidsEventsMax(d))
	}
	return most
}

// pidsEventsMax is the "max" line of dir's pids.events.
func pidsEventsMax(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "pids.events"))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "max" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}

// holds reports whether a process whose /proc/PID/cgroup reads b is in
// this group or one below it.
func (c *pidsCap) holds(b []byte) bool {
	v1, v2 := ownCgroups(b)
	g := v1["pids"]
	if c.v2 {
		g = v2
	}
	return g == c.relative || strings.HasPrefix(g, c.relative+"/")
}

// remove removes the group and any group below it.
func (c *pidsCap) remove() error {
	var first error
	for _, d := range c.dirs() {
		if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) && first == nil {
			first = err
		}
	}
	return first
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

func hasWord(b []byte, w string) bool {
	for _, f := range strings.Fields(string(b)) {
		if f == w {
			return true
		}
	}
	return false
}

func getpgid(pid int) (int, error) { return unix.Getpgid(pid) }

// RemoveGroups kills the members of each cgroup directory in dirs and
// removes it, waiting up to killDeadline (a group of 12,000 processes
// spinning at their cap took over 10 s to empty after cgroup.kill here);
// it reports one it could not remove. For
// groups that the code under test made for the test's own chain (named
// after the chain's file in the test's temporary directory) and that a
// failed run left behind.
func RemoveGroups(t testing.TB, dirs ...string) {
	for _, d := range dirs {
		if _, err := os.Stat(d); err != nil {
			continue
		}
		os.WriteFile(filepath.Join(d, "cgroup.kill"), []byte("1"), 0)
		os.WriteFile(filepath.Join(d, "freezer.state"), []byte("THAWED"), 0)
		end := time.Now().Add(killDeadline)
		for os.Remove(d) != nil && time.Now().Before(end) {
			time.Sleep(10 * time.Millisecond)
		}
		if _, err := os.Stat(d); err == nil {
			t.Errorf("cgroup %s left behind and could not be removed", d)
		}
	}
}
