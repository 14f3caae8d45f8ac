package freeze

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup2"
	"golang.org/x/sys/unix"

	"freeze/internal/match"
	"freeze/internal/proc"
)

// cgroup2Group is a v2 group frozen before anything is moved in: a process
// written to its cgroup.procs is frozen on arrival, and everything it had
// started is born in its cgroup, so nothing escapes (cgroup-v2.rst,
// "Core Interface Files", cgroup.freeze).
type cgroup2Group struct {
	fs     proc.FS
	m      *cgroup2.Manager
	dir    string
	reused bool
	notes  []string
}

// Cgroup2Mount returns the cgroup v2 mount: /sys/fs/cgroup on a unified
// hierarchy, /sys/fs/cgroup/unified on a hybrid one.
func Cgroup2Mount() (string, error) {
	switch cgroups.Mode() {
	case cgroups.Unified:
		return "/sys/fs/cgroup", nil
	case cgroups.Hybrid:
		return "/sys/fs/cgroup/unified", nil
	}
	return "", fmt.Errorf("%w: no cgroup v2 hierarchy is mounted", ErrNoCgroup)
}

func openCgroup2(fs proc.FS, name string) (Group, error) {
	mount, err := Cgroup2Mount()
	if err != nil {
		return nil, err
	}
	// A top-level group: moving a process in needs write access to the
	// common ancestor's cgroup.procs, and the root is every process's
	// ancestor. That takes root (or delegation of the root, which no
	// distribution gives).
	if _, err := os.Stat(filepath.Join(mount, "cgroup.procs")); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoCgroup, err)
	}
	if unix.Access(filepath.Join(mount, "cgroup.procs"), unix.W_OK) != nil {
		return nil, fmt.Errorf("%w: cannot write %s (not root)", ErrNoCgroup, filepath.Join(mount, "cgroup.procs"))
	}
	dir := filepath.Join(mount, name)
	g := &cgroup2Group{fs: fs, dir: dir}
	if _, err := os.Stat(dir); err == nil {
		g.reused = true
	}
	g.m, err = cgroup2.NewManager(mount, "/"+name, &cgroup2.Resources{})
	if err != nil {
		return nil, fmt.Errorf("%w: create %s: %v", ErrNoCgroup, dir, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cgroup.freeze")); err != nil {
		g.m.Delete()
		return nil, fmt.Errorf("%w: %s has no cgroup.freeze (kernel before 5.2)", ErrNoCgroup, dir)
	}
	// Freeze first, then move: a process arrives frozen.
	if err := g.m.Freeze(); err != nil {
		if !g.reused {
			g.m.Delete()
		}
		return nil, fmt.Errorf("%w: freeze %s: %v", ErrNoCgroup, dir, err)
	}
	// Where the pids controller reaches the group, a cap of zero stops
	// forks even of a task caught mid-fork (systemd does the same before
	// a unit's final kill).
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte("0"), 0); err == nil {
		g.notes = append(g.notes, "pids.max set to 0")
	} else {
		g.notes = append(g.notes, "pids.max not set: the pids controller is not enabled for this group")
	}
	return g, nil
}

func (g *cgroup2Group) Method() Method       { return Cgroup2 }
func (g *cgroup2Group) Where() string        { return g.dir }
func (g *cgroup2Group) Freezes() bool        { return true }
func (g *cgroup2Group) Holds() bool          { return true }
func (g *cgroup2Group) StopFirst() bool      { return true }
func (g *cgroup2Group) KillReachesAll() bool { return true }
func (g *cgroup2Group) ThawHint() string {
	return fmt.Sprintf("echo 0 > %s/cgroup.freeze  (then, once it is empty: rmdir %s)", g.dir, g.dir)
}
func (g *cgroup2Group) Reused() bool    { return g.reused }
func (g *cgroup2Group) Notes() []string { return g.notes }

func (g *cgroup2Group) Terms() (string, string) { return cgroupTerms() }

func (g *cgroup2Group) Snapshot() (func(match.Proc) bool, error) { return members(g.dir) }

func (g *cgroup2Group) Move(h *proc.Handle) error {
	err := g.m.AddProc(uint64(h.PID))
	if errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("pid %d: %w", h.PID, proc.ErrGone)
	}
	return err
}

func (g *cgroup2Group) WaitFrozen(deadline time.Time) error {
	return poll(deadline, func() (bool, error) {
		ev, err := events(g.dir)
		return ev["frozen"] == 1 || ev["populated"] == 0, err
	})
}

// Kill writes cgroup.kill (Linux 5.14) itself rather than through the
// library, whose fallback logs to stderr. The caller falls back to
// signals by pidfd when this fails.
func (g *cgroup2Group) Kill() error {
	return os.WriteFile(filepath.Join(g.dir, "cgroup.kill"), []byte("1"), 0)
}

func (g *cgroup2Group) Populated() (bool, error) {
	ev, err := events(g.dir)
	return ev["populated"] == 1, err
}

func (g *cgroup2Group) Remove() error { return g.m.Delete() }

// events parses cgroup.events ("populated 1\nfrozen 0\n").
func events(dir string) (map[string]int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return nil, err
	}
	ev := map[string]int{}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if f := bytes.Fields(line); len(f) == 2 {
			n, _ := strconv.Atoi(string(f[1]))
			ev[string(f[0])] = n
		}
	}
	return ev, nil
}

// members snapshots a cgroup's cgroup.procs as a membership test.
func members(dir string) (func(match.Proc) bool, error) {
	pids, err := readPids(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	return func(p match.Proc) bool { return pids[p.PID] }, nil
}

// readPids reads a cgroup.procs file.
func readPids(path string) (map[int]bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pids := map[int]bool{}
	for _, f := range bytes.Fields(b) {
		if pid, err := strconv.Atoi(string(f)); err == nil {
			pids[pid] = true
		}
	}
	return pids, nil
}

// pollInterval is how often a wait looks again: short against the
// seconds a run takes, long enough not to compete with the kernel's work.
const pollInterval = 2 * time.Millisecond

// poll calls done until it reports true or deadline passes.
func poll(deadline time.Time, done func() (bool, error)) error {
	for {
		ok, err := done()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return ErrDeadline
		}
		time.Sleep(pollInterval)
	}
}
