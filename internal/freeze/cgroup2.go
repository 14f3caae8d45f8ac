package freeze

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/cgroups/v3"
	"golang.org/x/sys/unix"

	"freeze/internal/match"
	"freeze/internal/proc"
	"freeze/internal/safedir"
)

// cgroup2Group freezes the chain in place, where it runs: every member
// stays charged to every limit it was under (a unit's TasksMax, a
// container's pids, memory and CPU limits, freeze run's own cap) for the
// whole run. A move takes a process's pids charge with it
// (cgroup-v2.rst, "PID"; KERNEL.md, measured): moving a member of a
// group at its pids.max out of that group frees a slot, and a chain at
// its cap refills it at once (on Debian's 7.2 a drill capped at 300 grew
// to 1,157 while the old top-level group took its members one by one).
//
// For each group the chain occupies (a place), one of two:
//   - in place: the group holds nothing but the chain (a container, a
//     pod, a freeze run, a drill), so the group itself is frozen: one
//     write, nothing moves. An empty child named after the run marks it
//     as freeze's, so a later run (after --hold) finds and finishes it;
//   - nested: the group holds other processes too (a unit's main
//     process), so a child named after the run is made inside it, frozen
//     before anything moves in (a process arrives frozen, and what it
//     starts is born there), with pids.max 0 where the controller
//     reaches it. A move to a child keeps the charge in every ancestor.
//
// The hierarchy's root caps nothing and cannot be frozen: a chain there
// is nested in a group at the top, as before. A group that someone
// other than root may write (a delegated subtree: systemd's user@.service
// hands one to each user) is never used: its owner could thaw it or move
// the chain out of it; the chain is nested at the top instead, and the
// timeline says which limit that loosened.
type cgroup2Group struct {
	fs     proc.FS
	mount  string // the v2 hierarchy's mount (a fixture tree in tests)
	name   string // the run's group name: the nested group's and the marker's
	places map[string]*place
	order  []string // places' groups, in the order they were placed
	reused bool
	notes  []string
	placed []Placement // placements not yet reported (Grow's round)
	// nestWhy says why a group that holds nothing but the chain is
	// nested into all the same (no cgroup.freeze, no mark).
	nestWhy map[string]string
	// trust is the one uid that may write a group freeze uses: freeze's
	// own (root). mkdir and rmdir make and remove a group (the kernel
	// fills and empties it; a test's fixture tree does it by hand).
	trust uint32
	mkdir func(path string) error
	rmdir func(path string) error
}

// place is one group the chain occupies and how it was frozen.
type place struct {
	group   string // the occupied group's directory
	frozen  string // the directory frozen: group (in place) or group/name
	inPlace bool
	restore string // in place: what group's cgroup.freeze held before ("0" or "1")
}

// A Placement is where a round froze a group the chain occupies, and why
// there: the timeline's record of the choice.
type Placement struct {
	Group   string // the chain's own group
	Frozen  string // what was frozen: Group itself, or a group inside it
	InPlace bool
	Why     string
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
	// Moving a process needs write access to the common ancestor's
	// cgroup.procs; freezing a group, to its cgroup.freeze: root.
	if _, err := os.Stat(filepath.Join(mount, "cgroup.procs")); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoCgroup, err)
	}
	if unix.Access(filepath.Join(mount, "cgroup.procs"), unix.W_OK) != nil {
		return nil, fmt.Errorf("%w: cannot write %s (not root)", ErrNoCgroup, filepath.Join(mount, "cgroup.procs"))
	}
	if !freezeSupported() {
		return nil, fmt.Errorf("%w: cgroup v2 has no cgroup.freeze before Linux 5.2", ErrNoCgroup)
	}
	return openCgroup2At(fs, mount, name)
}

// openCgroup2At opens the set for name in the v2 hierarchy at mount,
// taking over what an earlier --hold or interrupted run left: every
// group named name (nested, or the mark of a group frozen in place).
func openCgroup2At(fs proc.FS, mount, name string) (*cgroup2Group, error) {
	g := &cgroup2Group{fs: fs, mount: mount, name: name, places: map[string]*place{}, nestWhy: map[string]string{},
		trust: uint32(os.Geteuid()), mkdir: func(p string) error { return unix.Mkdir(p, 0o755) }, rmdir: unix.Rmdir}
	for _, d := range findNamed(mount, name) {
		parent := filepath.Dir(d)
		if parent != mount && isEmpty(d) && readTrim(filepath.Join(parent, "cgroup.freeze")) == "1" {
			// A mark: its parent was frozen in place. Once the chain is
			// gone it is thawed (the mark says freeze froze it).
			g.add(&place{group: parent, frozen: parent, inPlace: true, restore: "0"})
			continue
		}
		// A nested group: frozen again, as a run that reuses it expects.
		if err := writeFile(filepath.Join(d, "cgroup.freeze"), "1"); err != nil {
			return nil, fmt.Errorf("%w: freeze %s: %v", ErrNoCgroup, d, err)
		}
		g.add(&place{group: parent, frozen: d})
	}
	g.reused = len(g.places) > 0
	g.notes = append(g.notes, "frozen in place: each group the chain occupies is frozen where it is (or a group nested in it), so every limit the chain is under keeps holding")
	return g, nil
}

// freezeSupported: cgroup.freeze came with Linux 5.2.
func freezeSupported() bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return true
	}
	var major, minor int
	fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &major, &minor)
	return major > 5 || major == 5 && minor >= 2
}

func (g *cgroup2Group) add(p *place) {
	if _, ok := g.places[p.group]; ok {
		return
	}
	g.places[p.group] = p
	g.order = append(g.order, p.group)
}

func (g *cgroup2Group) Method() Method       { return Cgroup2 }
func (g *cgroup2Group) Freezes() bool        { return true }
func (g *cgroup2Group) Holds() bool          { return true }
func (g *cgroup2Group) StopFirst() bool      { return true }
func (g *cgroup2Group) KillReachesAll() bool { return true }
func (g *cgroup2Group) Reused() bool         { return g.reused }
func (g *cgroup2Group) Notes() []string      { return g.notes }

func (g *cgroup2Group) Terms() (string, string) { return cgroupTerms() }

// Where names the first frozen directory, and how many more there are;
// before anything is placed, where the places will be.
func (g *cgroup2Group) Where() string {
	switch len(g.order) {
	case 0:
		return g.mount + " (in place, in each group the chain occupies)"
	case 1:
		return g.places[g.order[0]].frozen
	}
	return fmt.Sprintf("%s (and %d more groups)", g.places[g.order[0]].frozen, len(g.order)-1)
}

func (g *cgroup2Group) ThawHint() string {
	var hs []string
	for _, k := range g.order {
		p := g.places[k]
		if p.inPlace {
			hs = append(hs, fmt.Sprintf("echo 0 > %s/cgroup.freeze; rmdir %s", p.frozen, filepath.Join(p.group, g.name)))
		} else {
			hs = append(hs, fmt.Sprintf("echo 0 > %s/cgroup.freeze  (then, once it is empty: rmdir %s)", p.frozen, p.frozen))
		}
	}
	if len(hs) == 0 {
		return NothingToThaw
	}
	return strings.Join(hs, "; ")
}

func (g *cgroup2Group) Snapshot() (func(match.Proc) bool, error) {
	in := map[int]bool{}
	for _, k := range g.order {
		pids, err := readPids(filepath.Join(g.places[k].frozen, "cgroup.procs"))
		if err != nil {
			return nil, err
		}
		for pid := range pids {
			in[pid] = true
		}
	}
	return func(p match.Proc) bool { return in[p.PID] }, nil
}

// Move puts one pinned, stopped process into the frozen group of its
// own group's place, made now if its group is new to the run: nested,
// since Place froze in place every group it found holding nothing but
// the chain.
func (g *cgroup2Group) Move(h *proc.Handle) error {
	ppid := 0
	if st, err := g.fs.ReadStat(h.PID); err == nil {
		ppid = st.PPID
	}
	rel, err := g.groupOf(h.PID, ppid)
	if err != nil {
		return err
	}
	p, err := g.placeFor(rel)
	if err != nil {
		return err
	}
	if p.inPlace {
		return nil // frozen where it is
	}
	// One pid a write (KERNEL.md); the newline is stripped by the
	// kernel, and keeps a fixture tree's file readable.
	err = appendFile(filepath.Join(p.frozen, "cgroup.procs"), strconv.Itoa(h.PID)+"\n")
	if errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("pid %d: %w", h.PID, proc.ErrGone)
	}
	return err
}

func (g *cgroup2Group) WaitFrozen(deadline time.Time) error {
	for _, k := range g.order {
		dir := g.places[k].frozen
		err := poll(deadline, func() (bool, error) {
			ev, err := events(dir)
			return ev["frozen"] == 1 || ev["populated"] == 0, err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// Kill writes cgroup.kill (Linux 5.14) of every frozen directory. The
// caller falls back to signals by pidfd when this fails.
func (g *cgroup2Group) Kill() error {
	var errs []error
	for _, k := range g.order {
		if err := writeFile(filepath.Join(g.places[k].frozen, "cgroup.kill"), "1"); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (g *cgroup2Group) Populated() (bool, error) {
	for _, k := range g.order {
		ev, err := events(g.places[k].frozen)
		if err != nil {
			return false, err
		}
		if ev["populated"] == 1 {
			return true, nil
		}
	}
	return false, nil
}

// Remove undoes every place once it is empty: a nested group is
// removed, a group frozen in place gets back the cgroup.freeze it had
// and loses its mark. A place that still holds a process stays frozen,
// and Remove says which.
func (g *cgroup2Group) Remove() error {
	var errs []error
	for i := len(g.order) - 1; i >= 0; i-- {
		p := g.places[g.order[i]]
		if !p.inPlace {
			if err := g.rmdir(p.frozen); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("rmdir %s: %w", p.frozen, err))
			}
			continue
		}
		if ev, err := events(p.group); err == nil && ev["populated"] == 1 {
			errs = append(errs, fmt.Errorf("%s still holds processes: it stays frozen", p.group))
			continue
		}
		if err := writeFile(filepath.Join(p.group, "cgroup.freeze"), p.restore); err != nil {
			errs = append(errs, fmt.Errorf("thaw %s: %w", p.group, err))
		}
		if err := g.rmdir(filepath.Join(p.group, g.name)); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("rmdir %s: %w", filepath.Join(p.group, g.name), err))
		}
	}
	return errors.Join(errs...)
}

func (g *cgroup2Group) removedWords() string {
	var ws []string
	for _, k := range g.order {
		p := g.places[k]
		if p.inPlace {
			ws = append(ws, fmt.Sprintf("gave %s back its cgroup.freeze (%s) and removed its mark %s", p.group, p.restore, g.name))
		} else {
			ws = append(ws, "removed "+p.frozen)
		}
	}
	if len(ws) == 0 {
		return "nothing was placed: nothing to remove"
	}
	return strings.Join(ws, "; ")
}

// findNamed lists the directories named name in the hierarchy at mount:
// an earlier run's nested groups and marks.
func findNamed(mount, name string) []string {
	var out []string
	var walk func(dir string, depth int)
	walk = func(dir string, depth int) {
		if depth > maxDepth {
			return
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			return
		}
		for _, e := range ents {
			if !e.IsDir() {
				continue
			}
			d := filepath.Join(dir, e.Name())
			if e.Name() == name {
				out = append(out, d)
				continue
			}
			walk(d, depth+1)
		}
	}
	walk(mount, 0)
	return out
}

// maxDepth bounds the walk for earlier runs' groups: systemd's deepest
// (a user's service in a slice) and a pod's are under 10 levels.
const maxDepth = 16

func isEmpty(dir string) bool {
	pids, err := readPids(filepath.Join(dir, "cgroup.procs"))
	return err == nil && len(pids) == 0
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return string(bytes.TrimSpace(b))
}

// writeFile writes one value to a cgroup file that exists: no create,
// no link followed.
func writeFile(path, v string) error { return safedir.Knob(path, v) }

// appendFile is writeFile for cgroup.procs: O_APPEND means nothing to
// cgroupfs, and lets a fixture's cgroup.procs collect what moved in.
func appendFile(path, v string) error { return safedir.KnobAppend(path, v) }

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
