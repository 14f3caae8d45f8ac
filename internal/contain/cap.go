package contain

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"freeze/internal/freeze"
	"freeze/internal/safedir"
)

// Kinds of cap, strongest first.
const (
	CapCgroup2 = "cgroup2" // a v2 group with pids.max, CMD cloned into it (CLONE_INTO_CGROUP)
	CapCgroup1 = "cgroup1" // a v1 pids group nested in freeze's own, joined before CMD's exec
	CapRlimit  = "rlimit"  // RLIMIT_NPROC: per user, and root is not bound by it
)

// v1Root is where the v1 pids hierarchy is mounted (hybrid and v1 hosts).
const v1Root = "/sys/fs/cgroup/pids"

// freezerV1 is the v1 freezer hierarchy: the teardown freezes the set in
// a group of it, which the child joins beside its pids group.
const freezerV1 = "/sys/fs/cgroup/freezer"

// capped is the kernel's cap on CMD's tree and the groups that hold it.
type capped struct {
	kind string
	max  int
	name string // the groups' base name: freeze-run-PID-START
	// pids is the group whose pids.max caps the tree. On a v1 host, v2
	// is a v2 group beside it (a hybrid host's unified hierarchy, which
	// has cgroup.freeze and cgroup.kill without any controller) and
	// freezer, where there is no v2, a v1 freezer group: what the
	// teardown freezes and kills through. All are "" for the rlimit.
	pids, v2, freezer string
	// join are the cgroup.procs files the helper writes itself into
	// before its exec (v1); cgroupFD the v2 group CMD is cloned into.
	join     []string
	cgroupFD int
	// hop are the v1 groups (pids, freezer) that the thread starting
	// CMD joins for the fork alone, each with the group it goes back to:
	// CMD starts in them without the helper (start.go).
	hop []hop
	why string // why this kind, and why not a stronger one
}

// newCap makes the groups for a tree of at most max tasks, or says why
// it cannot and falls back to RLIMIT_NPROC.
func newCap(name string, max int) (*capped, error) {
	c := &capped{max: max, name: name, cgroupFD: -1}
	var whyNot []string
	readOnly := false
	if err := c.tryCgroup2(); err == nil {
		return c, nil
	} else {
		whyNot = append(whyNot, "cgroup2: "+err.Error())
		readOnly = errors.Is(err, unix.EROFS)
	}
	if err := c.tryCgroup1(); err == nil {
		c.why += "; not cgroup2 (" + strings.Join(whyNot, "; ") + ")"
		return c, nil
	} else {
		whyNot = append(whyNot, "cgroup1: "+err.Error())
		readOnly = readOnly || errors.Is(err, unix.EROFS)
	}
	c.kind = CapRlimit
	c.why = "RLIMIT_NPROC, which counts every process of your user and does not bind root; no cgroup could be made (" + strings.Join(whyNot, "; ") + ")"
	if readOnly {
		// A container's default: podman and docker mount the cgroup
		// filesystem read-only without --privileged.
		c.why += "; the cgroup filesystem is read-only here, as in a container run without --privileged: run the container with --privileged (or a writable cgroup mount) for a cap of freeze run's own, or run freeze run outside it; the container's own pids limit still holds"
	}
	return c, nil
}

// cmdLeaf is the group inside a v2 run group that CMD is cloned into:
// the run group itself holds no process, so it can hand the pids
// controller down, and a freeze run inside CMD can make its own group
// beside the leaf, under this run's cap.
const cmdLeaf = "cmd"

// tryCgroup2 makes a v2 group with the pids controller beside freeze's
// own group, in its parent, where that parent hands out pids (a unified
// host, as root): a cap on the parent or above it (an outer freeze
// run's, a systemd slice's TasksMax) still holds over CMD. Where the
// parent does not, the group goes at the root, and why says so.
func (c *capped) tryCgroup2() error {
	parent, notAbove, err := freeze.PidsParentV2()
	if err != nil {
		return err
	}
	var outside string
	if notAbove != "" {
		outside = "; at the root, because " + notAbove + ": a cap above freeze's own group does not hold over CMD"
	}
	dir := filepath.Join(parent, c.name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	leaf := filepath.Join(dir, cmdLeaf)
	fd := -1
	err = write(dir, "pids.max", strconv.Itoa(c.max))
	if err == nil {
		err = write(dir, "cgroup.subtree_control", "+pids")
	}
	if err == nil {
		err = os.Mkdir(leaf, 0o755)
	}
	if err == nil {
		fd, err = unix.Open(leaf, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		removeTree(dir)
		return err
	}
	c.kind, c.pids, c.cgroupFD = CapCgroup2, dir, fd
	c.why = fmt.Sprintf("a cgroup v2 group %s with pids.max=%d, which CMD is cloned into (CLONE_INTO_CGROUP): capped from its first instruction%s", dir, c.max, outside)
	return nil
}

// tryCgroup1 makes a v1 pids group nested in freeze's own (so a cap
// around freeze, such as an outer freeze run's, still holds) and, for
// the teardown, a group nested in freeze's own in the v2 hierarchy
// (which on a hybrid host has no controllers, so a group there may hold
// processes and groups at once), else in the v1 freezer. The child joins
// them before its exec. Nested, an outer run's teardown reaches what an
// inner run holds.
func (c *capped) tryCgroup1() error {
	own, err := freeze.OwnV1("pids", v1Root)
	if err != nil {
		return err
	}
	dir := filepath.Join(v1Root, own, c.name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	if err := safedir.Knob(filepath.Join(dir, "pids.max"), strconv.Itoa(c.max)); err != nil {
		unix.Rmdir(dir)
		return err
	}
	c.kind, c.pids = CapCgroup1, dir
	c.join = []string{filepath.Join(dir, "cgroup.procs")}
	c.hop = []hop{{to: dir, back: filepath.Join(v1Root, own)}}
	c.why = fmt.Sprintf("a cgroup v1 pids group %s with pids.max=%d, which CMD joins before its exec", dir, c.max)
	// The teardown's group: v2 (freeze and kill in one write each),
	// else the v1 freezer, else SIGSTOP.
	if mount, err := freeze.Cgroup2Mount(); err == nil {
		if own2, err := freeze.OwnV2(); err == nil {
			v2 := filepath.Join(mount, own2, c.name)
			if err := os.Mkdir(v2, 0o755); err == nil {
				c.v2 = v2
				c.join = append(c.join, filepath.Join(v2, "cgroup.procs"))
				c.why += fmt.Sprintf(", and a cgroup v2 group %s for the teardown (cgroup.freeze, cgroup.kill)", v2)
				return nil
			}
		}
	}
	ownF, err := freeze.OwnV1("freezer", freezerV1)
	if err != nil {
		c.why += fmt.Sprintf("; no v1 freezer group (%v): the teardown stops processes with SIGSTOP instead", err)
		return nil
	}
	fdir := filepath.Join(freezerV1, ownF, c.name)
	if err := os.Mkdir(fdir, 0o755); err == nil {
		c.freezer = fdir
		c.join = append(c.join, filepath.Join(fdir, "cgroup.procs"))
		c.hop = append(c.hop, hop{to: fdir, back: filepath.Join(freezerV1, ownF)})
	} else {
		c.why += fmt.Sprintf("; no v1 freezer group (%v): the teardown stops processes with SIGSTOP instead", err)
	}
	return nil
}

func hasWord(b []byte, w string) bool {
	for _, f := range strings.Fields(string(b)) {
		if f == w {
			return true
		}
	}
	return false
}

// members are the pids in the cap's group and in the groups below it
// (an inner freeze run's); for the rlimit, nil.
func (c *capped) members() ([]int, error) {
	if c.pids == "" {
		return nil, nil
	}
	if _, err := os.Stat(c.pids); err != nil {
		return nil, err
	}
	var out []int
	for _, d := range subtree(c.pids) {
		pids, _ := readPids(filepath.Join(d, "cgroup.procs"))
		out = append(out, pids...)
	}
	return out, nil
}

// subtree lists dir and the groups below it, deepest first.
func subtree(dir string) []string {
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	slices.Reverse(out)
	return out
}

// removeTree removes dir and the groups below it, deepest first; each
// must be empty.
func removeTree(dir string) error {
	var errs []string
	for _, d := range subtree(dir) {
		if err := unix.Rmdir(d); err != nil && err != unix.ENOENT {
			errs = append(errs, fmt.Sprintf("rmdir %s: %v", d, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

func readPids(path string) ([]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out, nil
}

// refused is how many forks the cap refused (pids.events, "max N"): the
// largest over the group and the groups below it. Older kernels count a
// refusal in the forking task's own group (the v2 leaf, an inner run's
// group); newer ones, where pids.events is hierarchical, in the refusing
// group and each above.
func (c *capped) refused() int {
	if c.pids == "" {
		return 0
	}
	most := 0
	for _, d := range subtree(c.pids) {
		b, _ := os.ReadFile(filepath.Join(d, "pids.events"))
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[0] == "max" {
				n, _ := strconv.Atoi(f[1])
				most = max(most, n)
			}
		}
	}
	return most
}

// peak is the most tasks the group held (pids.peak), -1 if unknown.
func (c *capped) peak() int {
	if c.pids == "" {
		return -1
	}
	b, err := os.ReadFile(filepath.Join(c.pids, "pids.peak"))
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return -1
	}
	return n
}

// remove deletes the groups and any below them (an inner run's); each
// must be empty.
func (c *capped) remove() error {
	if c.cgroupFD >= 0 {
		unix.Close(c.cgroupFD)
		c.cgroupFD = -1
	}
	var errs []string
	for _, d := range []string{c.freezer, c.v2, c.pids} {
		if d == "" {
			continue
		}
		if err := removeTree(d); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}
