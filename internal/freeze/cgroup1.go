package freeze

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/match"
	"freeze/internal/proc"
	"freeze/internal/safedir"
)

// freezerRoot is where the v1 freezer hierarchy is mounted.
const freezerRoot = "/sys/fs/cgroup/freezer"

// cgroup1Group is a group of the v1 freezer hierarchy only. The files are
// written directly: containerd's cgroup1 Freeze waits for FROZEN with no
// deadline, and its AddProc moves a pid in every v1 hierarchy (pids,
// memory, cpu...) unless told otherwise (freezer-subsystem.rst).
type cgroup1Group struct {
	fs     proc.FS
	dir    string
	reused bool
}

func openCgroup1(fs proc.FS, name string) (Group, error) {
	if _, err := os.Stat(filepath.Join(freezerRoot, "cgroup.procs")); err != nil {
		return nil, fmt.Errorf("%w: no v1 freezer hierarchy at %s", ErrNoCgroup, freezerRoot)
	}
	if unix.Access(filepath.Join(freezerRoot, "cgroup.procs"), unix.W_OK) != nil {
		return nil, fmt.Errorf("%w: cannot write %s (not root)", ErrNoCgroup, freezerRoot)
	}
	g := &cgroup1Group{fs: fs, dir: filepath.Join(freezerRoot, name)}
	if err := os.Mkdir(g.dir, 0o755); os.IsExist(err) {
		g.reused = true
	} else if err != nil {
		return nil, fmt.Errorf("%w: create %s: %v", ErrNoCgroup, g.dir, err)
	}
	if err := g.write("freezer.state", "FROZEN"); err != nil {
		if !g.reused {
			unix.Rmdir(g.dir)
		}
		return nil, fmt.Errorf("%w: freeze %s: %v", ErrNoCgroup, g.dir, err)
	}
	return g, nil
}

func (g *cgroup1Group) write(file, v string) error {
	return safedir.Knob(filepath.Join(g.dir, file), v)
}

func (g *cgroup1Group) Method() Method       { return Cgroup1 }
func (g *cgroup1Group) Where() string        { return g.dir }
func (g *cgroup1Group) Freezes() bool        { return true }
func (g *cgroup1Group) Holds() bool          { return true }
func (g *cgroup1Group) StopFirst() bool      { return true }
func (g *cgroup1Group) KillReachesAll() bool { return true }
func (g *cgroup1Group) ThawHint() string {
	return fmt.Sprintf("echo THAWED > %s/freezer.state  (then, once it is empty: rmdir %s)", g.dir, g.dir)
}
func (g *cgroup1Group) Reused() bool    { return g.reused }
func (g *cgroup1Group) Notes() []string { return nil }

func (g *cgroup1Group) Terms() (string, string) { return cgroupTerms() }

func (g *cgroup1Group) Snapshot() (func(match.Proc) bool, error) { return members(g.dir) }

func (g *cgroup1Group) Move(h *proc.Handle) error {
	err := g.write("cgroup.procs", strconv.Itoa(h.PID))
	if err != nil && (os.IsNotExist(err) || isESRCH(err)) {
		return fmt.Errorf("pid %d: %w", h.PID, proc.ErrGone)
	}
	return err
}

func isESRCH(err error) bool {
	pe, ok := err.(*os.PathError)
	return ok && pe.Err == unix.ESRCH
}

// WaitFrozen waits for FROZEN, writing FROZEN again on each look so that
// tasks moved in while the group was FREEZING are caught too.
func (g *cgroup1Group) WaitFrozen(deadline time.Time) error {
	return poll(deadline, func() (bool, error) {
		b, err := os.ReadFile(filepath.Join(g.dir, "freezer.state"))
		if err != nil {
			return false, err
		}
		if string(bytes.TrimSpace(b)) == "FROZEN" {
			return true, nil
		}
		return false, g.write("freezer.state", "FROZEN")
	})
}

// Kill sends SIGKILL to each member through a pidfd, then thaws: a task
// frozen by the v1 freezer acts on SIGKILL only once thawed. No member
// can fork between the two, because each has a fatal signal pending.
func (g *cgroup1Group) Kill() error {
	procs := filepath.Join(g.dir, "cgroup.procs")
	pids, err := readPids(procs)
	if err != nil {
		return err
	}
	// A member can exit between the read of cgroup.procs and its pidfd,
	// and its pid go to a process elsewhere: each is pinned by a pidfd
	// first, and only those still members afterwards are signalled. A
	// frozen group has no births, so a pid that is a member after its
	// pidfd was opened is the pinned process (#24, finding 10).
	var pinned []*proc.Handle
	defer func() {
		for _, h := range pinned {
			h.Close()
		}
	}()
	for pid := range pids {
		st, err := g.fs.ReadStat(pid)
		if err != nil {
			continue
		}
		if h, err := g.fs.Open(st.ID()); err == nil {
			pinned = append(pinned, h)
		}
	}
	still, err := readPids(procs)
	if err != nil {
		return err
	}
	for _, h := range pinned {
		if still[h.PID] {
			h.Signal(unix.SIGKILL)
		}
	}
	return g.write("freezer.state", "THAWED")
}

func (g *cgroup1Group) Populated() (bool, error) {
	pids, err := readPids(filepath.Join(g.dir, "cgroup.procs"))
	return len(pids) > 0, err
}

func (g *cgroup1Group) Remove() error { return unix.Rmdir(g.dir) }
