package freeze

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"freeze/internal/match"
	"freeze/internal/proc"
	"freeze/internal/show"
)

// Placing: where a cgroup2 run freezes each group the chain occupies
// (cgroup2.go's comment says why), and the tests on a group that decide
// it: only the chain in it, the root, a delegated subtree.

// Placements returns the places made since the last call: Grow reports
// them with its round.
func (g *cgroup2Group) Placements() []Placement {
	p := g.placed
	g.placed = nil
	return p
}

// Place freezes in place each group that res's live matches occupy,
// that is not frozen yet and that holds nothing but the chain. It runs
// before the round's snapshot, so what a group frozen in place holds is
// inside the set, and nothing of it moves. Every other group is left to
// the round's moves (placeFor, from Move), which make its nested group
// once the pinned chain is stopped: freeze makes no group beside a chain
// that still runs (a mkdir beside a growing chain took seconds, see
// inPlace). Where the chain is at its cap it does not grow, and there
// the order changed nothing measurable: a unit at TasksMax 300 (Debian's
// 6.12 with systemd, under QEMU 10.0), its nested group's mkdir 5-50 ms
// either way, and the round's time the moves' (3-4 ms each there).
func (g *cgroup2Group) Place(res match.Result) error {
	chain := map[int]bool{}
	for _, p := range res.Procs {
		chain[p.PID] = true
	}
	// Only what no place holds yet: a round's scan of thousands reads
	// the cgroup file of the newcomers alone.
	inside, err := g.Snapshot()
	if err != nil {
		return err
	}
	// Each group as soon as it is seen: a chain's one group is frozen
	// after one read, not after the cgroup file of every match (3.5 s for
	// 300 under emulation, while the chain grew by 47).
	seen := map[string]bool{}
	for _, p := range res.Procs {
		if inside(p) {
			continue
		}
		rel, err := g.groupOf(p.PID, p.PPID)
		if err != nil || seen[rel] {
			continue // gone (the round counts it), or looked at already
		}
		seen[rel] = true
		frozen, err := g.placeInPlace(rel, chain)
		if err != nil {
			return err
		}
		if frozen {
			// What the group holds is inside now.
			if inside, err = g.Snapshot(); err != nil {
				return err
			}
		}
	}
	return nil
}

// placeInPlace freezes the group rel (as /proc/PID/cgroup names it) in
// place if it is new to the run and holds nothing but the chain, and
// reports whether it did.
func (g *cgroup2Group) placeInPlace(rel string, chain map[int]bool) (bool, error) {
	dir, ok := g.resolve(rel)
	if !ok || dir == g.mount || g.placeOf(dir) != nil || writers(g.mount, dir, g.trust) != "" {
		return false, nil
	}
	why, ok := onlyChain(g.fs, dir, g.name, chain)
	if !ok {
		return false, nil
	}
	return g.inPlace(dir, why)
}

// placeFor returns the place of the group rel for a move, making it if
// the group is new to the run: nested in it, or at the top where the
// group cannot be used. Move calls it with the process stopped, and
// Grow stops every pinned process before it moves any.
func (g *cgroup2Group) placeFor(rel string) (*place, error) {
	dir, ok := g.resolve(rel)
	if !ok {
		return g.atTop(rel, "its group "+strconv.Quote(rel)+" is outside freeze's view of the hierarchy")
	}
	if p := g.placeOf(dir); p != nil {
		return p, nil
	}
	if dir == g.mount {
		return g.atTop(rel, "")
	}
	if who := writers(g.mount, dir, g.trust); who != "" {
		return g.atTop(rel, who)
	}
	why := g.nestWhy[dir]
	if why == "" {
		why = chainless(dir)
	}
	return g.nest(dir, rel, why)
}

// groupOf is the group pid runs in, as /proc/PID/cgroup names it; for a
// process that reads as the root group while its parent does not, its
// parent's. A child is listed in /proc before the kernel gives it its
// cgroup (copy_process: attach_pid, then cgroup_post_fork; until then it
// reads init_css_set, the root), so a chain caught forking shows
// newborns "in the root": sent to a group at the top, each would take
// the charge it is about to get out of the chain's cap (seen: 2 of a
// drill's 307 in Debian's 7.2 under TCG). A child is born in its
// parent's group (but for CLONE_INTO_CGROUP), where its place is.
func (g *cgroup2Group) groupOf(pid, ppid int) (string, error) {
	rel, err := g.fs.CgroupV2(pid)
	if err != nil || rel != "/" || ppid <= 1 {
		return rel, err
	}
	if prel, err := g.fs.CgroupV2(ppid); err == nil && prel != "/" {
		return prel, nil
	}
	return rel, nil
}

// resolve turns a group as /proc/PID/cgroup names it into a directory
// under the mount; false for one outside freeze's cgroup namespace.
func (g *cgroup2Group) resolve(rel string) (string, bool) {
	if !strings.HasPrefix(rel, "/") || strings.Contains(rel, "/..") || strings.HasSuffix(rel, " (deleted)") {
		return "", false
	}
	return filepath.Join(g.mount, rel), true
}

// placeOf is the place dir belongs to: the group of a place, its frozen
// directory, or any group below a frozen directory.
func (g *cgroup2Group) placeOf(dir string) *place {
	if p, ok := g.places[dir]; ok {
		return p
	}
	for _, k := range g.order {
		p := g.places[k]
		if dir == p.frozen || strings.HasPrefix(dir, p.frozen+"/") {
			return p
		}
	}
	return nil
}

// atTop nests the chain of rel in a group at the hierarchy's top: for
// the root group (no limit there to keep) and where the chain's own
// group cannot be used (why says which limit that loosens).
func (g *cgroup2Group) atTop(rel, why string) (*place, error) {
	if p, ok := g.places[g.mount]; ok {
		return p, nil
	}
	if why == "" {
		return g.nest(g.mount, rel, "the chain runs in the hierarchy's root group, which no limit covers")
	}
	return g.nest(g.mount, rel, "a group at the top: "+why+"; a limit on "+rel+" no longer counts what moves out of it")
}

// inPlace freezes dir itself, then marks it with an empty child named
// after the run, and reports whether dir is now a place frozen in
// place. The freeze first: a cgroup's mkdir beside a chain forking in
// it took seconds (up to 5.4 s, Debian's 7.2 under QEMU 10.0, the chain
// growing to as many as 840 meanwhile), and once the chain is frozen
// 5-150 ms. A mark that cannot be made gives the group back its
// cgroup.freeze, and the round's moves nest the chain instead; if that
// write fails too, the group stays frozen in place, unmarked, and its
// placement says so.
func (g *cgroup2Group) inPlace(dir, why string) (bool, error) {
	freeze := filepath.Join(dir, "cgroup.freeze")
	was := readTrim(freeze)
	if was != "0" && was != "1" {
		g.nestWhy[dir] = "it has no cgroup.freeze to freeze in place"
		return false, nil
	}
	if err := writeFile(freeze, "1"); err != nil {
		return false, fmt.Errorf("freeze %s in place: %w", dir, err)
	}
	mark := filepath.Join(dir, g.name)
	if err := g.mkdir(mark); err != nil && !errors.Is(err, unix.EEXIST) {
		rerr := writeFile(freeze, was)
		if rerr == nil {
			g.nestWhy[dir] = fmt.Sprintf("no mark can be made in it (%v)", err)
			return false, nil
		}
		why += fmt.Sprintf("; unmarked: no mark can be made in it (%v), and its cgroup.freeze could not be set back to %s (%v), so it stays frozen in place: a later run does not find it by name", err, was, rerr)
	}
	g.add(&place{group: dir, frozen: dir, inPlace: true, restore: was})
	g.placed = append(g.placed, Placement{Group: dir, Frozen: dir, InPlace: true, Why: why})
	return true, nil
}

// nest makes (or reuses) dir/name, frozen before anything moves in, and
// caps it at zero where the pids controller reaches it.
func (g *cgroup2Group) nest(dir, rel, why string) (*place, error) {
	frozen := filepath.Join(dir, g.name)
	if err := g.mkdir(frozen); err != nil && !errors.Is(err, unix.EEXIST) {
		if dir != g.mount {
			return g.atTop(rel, fmt.Sprintf("no group can be made in %s (%v)", dir, err))
		}
		return nil, fmt.Errorf("%w: create %s: %v", ErrNoCgroup, frozen, err)
	}
	if err := writeFile(filepath.Join(frozen, "cgroup.freeze"), "1"); err != nil {
		g.rmdir(frozen)
		return nil, fmt.Errorf("%w: freeze %s: %v", ErrNoCgroup, frozen, err)
	}
	// Where the pids controller reaches the group, a cap of zero stops
	// forks even of a task caught mid-fork (systemd does the same before
	// a unit's final kill).
	capped := writeFile(filepath.Join(frozen, "pids.max"), "0") == nil
	if capped {
		why += "; pids.max 0 in it"
	}
	p := &place{group: dir, frozen: frozen}
	g.add(p)
	g.placed = append(g.placed, Placement{Group: dir, Frozen: frozen, Why: why})
	return p, nil
}

// onlyChain reports whether dir holds nothing but the chain: no group
// below it but the run's own, and every process in it a live match or a
// descendant of one born since the scan. chain nil: false.
func onlyChain(fs proc.FS, dir, name string, chain map[int]bool) (string, bool) {
	if chain == nil {
		return "", false
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", false
	}
	for _, e := range ents {
		if e.IsDir() && e.Name() != name {
			return "", false
		}
	}
	pids, err := readPids(filepath.Join(dir, "cgroup.procs"))
	if err != nil || len(pids) == 0 {
		return "", false
	}
	for pid := range pids {
		if !ofChain(fs, pid, chain) {
			return "", false
		}
	}
	return fmt.Sprintf("it holds nothing but the chain (%s)", show.Count(len(pids), "process", "processes")), true
}

// ofChain: pid is in the chain, or its parents lead to it (a child born
// after the scan). A process whose parent cannot be read is not.
func ofChain(fs proc.FS, pid int, chain map[int]bool) bool {
	for i := 0; i < 64 && pid > 1; i++ {
		if chain[pid] {
			return true
		}
		st, err := fs.ReadStat(pid)
		if err != nil {
			return false
		}
		pid = st.PPID
	}
	return false
}

// chainless says why a group was nested into rather than frozen whole.
func chainless(dir string) string {
	pids, _ := readPids(filepath.Join(dir, "cgroup.procs"))
	return fmt.Sprintf("it holds other processes or groups too (%s in all): a group nested in it", show.Count(len(pids), "process", "processes"))
}

// writers says who other than root could undo a freeze in dir: the
// owner of a delegated group (a writable cgroup.procs or cgroup.freeze,
// in dir or above it, up to the mount) can thaw it or move the chain out
// of it. "" when nobody but root can.
func writers(mount, dir string, trust uint32) string {
	for d := dir; ; d = filepath.Dir(d) {
		for _, f := range []string{"cgroup.procs", "cgroup.freeze"} {
			var st unix.Stat_t
			if unix.Lstat(filepath.Join(d, f), &st) != nil {
				continue
			}
			if st.Uid != trust || st.Mode&0o022 != 0 {
				return fmt.Sprintf("%s is delegated (%s/%s is writable by uid %d or others), and its owner could thaw the chain or move it out", dir, d, f, st.Uid)
			}
		}
		if d == mount || len(d) <= len(mount) {
			return ""
		}
	}
}
