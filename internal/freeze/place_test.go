package freeze_test

import (
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/freeze"
	"freeze/internal/match"
	"freeze/internal/proctest"
)

// cgroup2 freezes in place: Grow, on a fixture /proc and a fixture v2
// hierarchy (no root, no real process), never moves a member of the
// chain out of a group it occupies. A group that holds nothing but the
// chain is frozen itself, with nothing moved; a group that holds another
// process too gets a frozen group nested in it, and only the chain moves
// there; only the hierarchy's root, or a group someone else may write,
// sends the chain to a group at the top. Before, every member moved to a
// group at the top, out of its own group's pids.max, and a chain at its
// cap refilled each slot the move freed (on Debian's 7.2 a drill capped at
// 300 grew to 1,157). The live proof is the kernel matrix's cap line.
func TestCgroup2FreezesInPlace(t *testing.T) {
	for _, tc := range []struct {
		name     string
		group    string // where the chain runs
		stranger bool   // another process in the chain's group
		newborn  bool   // a child mid-fork: /proc lists it, its cgroup still reads the root
		open     bool   // the group's cgroup.procs writable by others (delegated)
		// want
		frozen  string // the directory frozen, relative to the mount
		inPlace bool
		moved   bool // the chain moved into frozen
	}{
		{name: "container", group: "/kubepods/pod1/ctr", frozen: "/kubepods/pod1/ctr", inPlace: true},
		{name: "newborn", group: "/kubepods/pod1/ctr", newborn: true, frozen: "/kubepods/pod1/ctr", inPlace: true},
		{name: "unit", group: "/system.slice/x.service", stranger: true, frozen: "/system.slice/x.service/NAME", moved: true},
		{name: "root", group: "/", frozen: "/NAME", moved: true},
		{name: "delegated", group: "/user.slice/user@1000.service/app.scope", open: true, frozen: "/NAME", moved: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := proctest.New(t)
			mount := filepath.Join(t.TempDir(), "cgroup")
			mkGroup(t, mount, true)
			dir := filepath.Join(mount, tc.group)
			var above []string
			for d := filepath.Join(mount, filepath.Dir(tc.group)); tc.group != "/" && len(d) > len(mount); d = filepath.Dir(d) {
				above = append([]string{d}, above...)
			}
			for _, d := range above {
				mkGroup(t, d, true) // the ancestors, pids handed out
			}
			if tc.group != "/" {
				mkGroup(t, dir, false)
				os.WriteFile(filepath.Join(dir, "pids.max"), []byte("300\n"), 0o644)
			}
			if tc.open {
				os.Chmod(filepath.Join(dir, "cgroup.procs"), 0o666)
			}
			root := tr.Add(0, tr.Target)
			chain := []int{root, tr.Add(root, tr.Target), tr.Add(root, tr.Target)}
			in := slices.Clone(chain)
			if tc.stranger {
				in = append(in, tr.Add(0, tr.Other))
			}
			for _, pid := range in {
				putIn(t, tr, mount, tc.group, pid)
			}
			var settle func()
			if tc.newborn {
				// Listed in /proc before cgroup_post_fork: it reads the
				// root group, and no group lists it yet. The fork ends
				// after the first round: it is then in its parent's group.
				child := tr.Add(root, tr.Target)
				os.WriteFile(filepath.Join(tr.Root, strconv.Itoa(child), "cgroup"), []byte("0::/\n"), 0o644)
				settle = func() { putIn(t, tr, mount, tc.group, child) }
			}
			before := map[string]string{}
			for _, f := range []string{"cgroup.procs", "cgroup.freeze"} {
				b, _ := os.ReadFile(filepath.Join(dir, f))
				before[f] = string(b)
			}

			name := freeze.GroupName(tr.Spec(t))
			// The run's group (a mark, a nested group or one at the top)
			// is made only once the chain cannot fork: a cgroup's mkdir
			// beside a growing chain took up to 5.4 s (Debian's 7.2 under
			// emulation). In place, the group is frozen first; anywhere
			// else, every member is stopped first.
			var early []string
			mkdir := func(p string) error {
				if filepath.Base(p) != name {
					return mkGroupErr(p)
				}
				if tc.inPlace {
					if b, _ := os.ReadFile(filepath.Join(dir, "cgroup.freeze")); !strings.HasPrefix(string(b), "1") {
						early = append(early, "the mark "+p+" was made before the group was frozen")
					}
				} else {
					for _, pid := range chain {
						if !slices.Contains(tr.Signals, strconv.Itoa(pid)+":SIGSTOP") {
							early = append(early, p+" was made before pid "+strconv.Itoa(pid)+" was stopped")
						}
					}
				}
				return mkGroupErr(p)
			}
			g, err := freeze.OpenCgroup2At(tr.FS, mount, name, mkdir)
			if err != nil {
				t.Fatal(err)
			}
			var rounds []freeze.Round
			s := match.NewScanner(tr.FS, tr.Spec(t))
			onRound := func(r freeze.Round) {
				rounds = append(rounds, r)
				if settle != nil {
					settle()
					settle = nil
				}
			}
			if _, err := freeze.Grow(tr.FS, s, g, time.Now().Add(20*time.Second), nil, onRound); err != nil {
				t.Fatalf("grow: %v (%d rounds, the first %+v)", err, len(rounds), rounds[0])
			}

			if len(early) > 0 {
				t.Fatalf("made too soon: %s", strings.Join(early, "; "))
			}
			if tc.stranger {
				for _, s := range tr.Signals {
					if strings.HasPrefix(s, strconv.Itoa(in[len(in)-1])+":") {
						t.Fatalf("the stranger in the chain's group was signalled (%s): it is not the chain's", s)
					}
				}
			}
			want := filepath.Join(mount, strings.ReplaceAll(tc.frozen, "NAME", name))
			var placed []freeze.Placement
			for _, r := range rounds {
				placed = append(placed, r.Placed...)
			}
			if len(placed) != 1 || placed[0].Frozen != want || placed[0].InPlace != tc.inPlace {
				t.Fatalf("placed %+v, want one, %s, in place %v", placed, want, tc.inPlace)
			}
			if b, _ := os.ReadFile(filepath.Join(want, "cgroup.freeze")); !strings.HasPrefix(string(b), "1") {
				t.Fatalf("%s/cgroup.freeze reads %q: not frozen", want, b)
			}
			moved := readPids(t, filepath.Join(want, "cgroup.procs"))
			switch {
			case tc.inPlace:
				for f, was := range before {
					if f == "cgroup.procs" && !tc.newborn { // the newborn's fork ends in it
						if b, _ := os.ReadFile(filepath.Join(dir, f)); string(b) != was {
							t.Fatalf("%s changed from %q to %q: something moved", f, was, b)
						}
					}
				}
				if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
					t.Fatalf("no mark %s in the group frozen in place: %v", name, err)
				}
				if !tc.newborn && (rounds[0].Moved != 0 || rounds[0].Outside != 0) {
					t.Fatalf("round 1 %+v: frozen in place, nothing is outside or moved", rounds[0])
				}
			case tc.moved:
				if !slices.Equal(moved, chain) {
					t.Fatalf("%s holds %v, want the chain %v and nothing else", want, moved, chain)
				}
			}
			if top := filepath.Join(mount, name); want != top {
				if _, err := os.Stat(top); err == nil {
					t.Fatalf("a group at the top (%s) was made: the chain's limits would no longer count it", top)
				}
			}
			if tc.open && !strings.Contains(placed[0].Why, "delegated") {
				t.Errorf("the placement at the top does not say why (the group is delegated): %q", placed[0].Why)
			}
			if tc.stranger {
				if b, _ := os.ReadFile(filepath.Join(dir, "cgroup.freeze")); !strings.HasPrefix(string(b), "0") {
					t.Fatalf("the unit's own group was frozen (%q): its main process is not the chain's", b)
				}
			}

			// Undone once empty: the nested group goes, the group frozen
			// in place is thawed and loses its mark; and a new run finds
			// what a --hold would have left.
			again, err := freeze.OpenCgroup2At(tr.FS, mount, name, func(p string) error { return mkGroupErr(p) })
			if err != nil || !again.Reused() || again.Where() != want {
				t.Fatalf("a second run's set: reused %v at %q (%v), want %s", again != nil && again.Reused(), whereOf(again), err, want)
			}
			os.WriteFile(filepath.Join(want, "cgroup.procs"), nil, 0o644)
			os.WriteFile(filepath.Join(want, "cgroup.events"), []byte("populated 0\nfrozen 1\n"), 0o644)
			if err := g.Remove(); err != nil {
				t.Fatalf("remove: %v", err)
			}
			if tc.inPlace {
				if b, _ := os.ReadFile(filepath.Join(dir, "cgroup.freeze")); !strings.HasPrefix(string(b), "0") {
					t.Fatalf("the group frozen in place reads %q after Remove: not given back", b)
				}
				want = filepath.Join(dir, name)
			}
			if _, err := os.Stat(want); err == nil {
				t.Fatalf("%s left after Remove", want)
			}
		})
	}
}

func whereOf(g freeze.Group) string {
	if g == nil {
		return ""
	}
	return g.Where()
}

// mkGroup lays out a fixture v2 group: the files the kernel puts in
// one. handsOut: pids in its subtree_control.
func mkGroup(t *testing.T, dir string, handsOut bool) {
	t.Helper()
	if err := mkGroupErr(dir); err != nil {
		t.Fatal(err)
	}
	if handsOut {
		os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("pids\n"), 0o644)
	}
}

func mkGroupErr(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	files := map[string]string{"cgroup.procs": "", "cgroup.freeze": "0\n", "cgroup.kill": "", "cgroup.events": "populated 1\nfrozen 1\n", "cgroup.subtree_control": ""}
	if b, _ := os.ReadFile(filepath.Join(filepath.Dir(dir), "cgroup.subtree_control")); strings.Contains(string(b), "pids") {
		files["pids.max"] = "max\n"
	}
	for f, v := range files {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(v), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// putIn puts a fixture process in a group: its /proc/PID/cgroup and the
// group's cgroup.procs.
func putIn(t *testing.T, tr *proctest.Tree, mount, group string, pid int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(tr.Root, strconv.Itoa(pid), "cgroup"), []byte("0::"+group+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(mount, group, "cgroup.procs"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(strconv.Itoa(pid) + "\n")
	f.Close()
}

func readPids(t *testing.T, path string) []int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("%s: %q", path, b)
		}
		out = append(out, n)
	}
	sort.Ints(out)
	return out
}

// A group that holds nothing but the chain, whose mark cannot be made:
// the group is frozen first (the mark comes after), so the failure must
// give the group back its cgroup.freeze, and the chain is then placed by
// the moves (here at the top, as the same name cannot be made in the
// group either). If giving it back fails too, the group is already
// holding the chain: it stays frozen in place, unmarked, and the
// placement says so, rather than a frozen group nobody is told about.
func TestCgroup2MarkThatCannotBeMade(t *testing.T) {
	for _, giveBackFails := range []bool{false, true} {
		t.Run(map[bool]string{false: "given-back", true: "give-back-fails"}[giveBackFails], func(t *testing.T) {
			tr := proctest.New(t)
			mount := filepath.Join(t.TempDir(), "cgroup")
			mkGroup(t, mount, true)
			mkGroup(t, filepath.Join(mount, "kubepods"), false)
			const group = "/kubepods"
			dir := filepath.Join(mount, group)
			root := tr.Add(0, tr.Target)
			chain := []int{root, tr.Add(root, tr.Target)}
			for _, pid := range chain {
				putIn(t, tr, mount, group, pid)
			}
			name := freeze.GroupName(tr.Spec(t))
			mkdir := func(p string) error {
				if filepath.Dir(p) != dir {
					return mkGroupErr(p)
				}
				if giveBackFails {
					// Frozen already; its cgroup.freeze now refuses writes.
					os.Remove(filepath.Join(dir, "cgroup.freeze"))
					os.Mkdir(filepath.Join(dir, "cgroup.freeze"), 0o755)
				}
				return unix.EACCES
			}
			g, err := freeze.OpenCgroup2At(tr.FS, mount, name, mkdir)
			if err != nil {
				t.Fatal(err)
			}
			var placed []freeze.Placement
			s := match.NewScanner(tr.FS, tr.Spec(t))
			if _, err := freeze.Grow(tr.FS, s, g, time.Now().Add(20*time.Second), nil, func(r freeze.Round) { placed = append(placed, r.Placed...) }); err != nil {
				t.Fatalf("grow: %v", err)
			}
			if len(placed) != 1 {
				t.Fatalf("placed %+v, want one", placed)
			}
			if giveBackFails {
				if !placed[0].InPlace || placed[0].Frozen != dir || !strings.Contains(placed[0].Why, "unmarked") {
					t.Fatalf("placed %+v: want %s frozen in place, unmarked, and said so", placed[0], dir)
				}
				if got := readPids(t, filepath.Join(dir, "cgroup.procs")); !slices.Equal(got, chain) {
					t.Fatalf("%s holds %v, want the chain %v: nothing moves out of a group frozen in place", dir, got, chain)
				}
				return
			}
			if b, _ := os.ReadFile(filepath.Join(dir, "cgroup.freeze")); !strings.HasPrefix(string(b), "0") {
				t.Fatalf("%s/cgroup.freeze reads %q: the failed mark left the group frozen", dir, b)
			}
			top := filepath.Join(mount, name)
			if placed[0].InPlace || placed[0].Frozen != top || !strings.Contains(placed[0].Why, "no group can be made in "+dir) {
				t.Fatalf("placed %+v: want the chain at %s, saying why", placed[0], top)
			}
			if got := readPids(t, filepath.Join(top, "cgroup.procs")); !slices.Equal(got, chain) {
				t.Fatalf("%s holds %v, want the chain %v", top, got, chain)
			}
		})
	}
}
