package match

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"freeze/internal/containtest"
	"freeze/internal/exefile"
	"freeze/internal/gate"
	"freeze/internal/proc"
	"freeze/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(containtest.Main(m)) }

func write(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/false\n"), mode); err != nil {
		t.Fatal(err)
	}
}

func TestResolveErrors(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "tool"), 0o755)
	os.Symlink(filepath.Join(dir, "tool"), filepath.Join(dir, "link"))
	tests := []struct {
		path string
		want error
	}{
		{"tool", ErrRelative},
		{filepath.Join(dir, "missing"), fs.ErrNotExist},
		{dir, ErrNotRegular},
	}
	for _, tt := range tests {
		if _, err := Resolve(tt.path); !errors.Is(err, tt.want) {
			t.Errorf("Resolve(%q) = %v, want %v", tt.path, err, tt.want)
		}
	}
	tg, err := Resolve(filepath.Join(dir, "link"))
	if err != nil || !tg.Symlink || tg.Path != filepath.Join(dir, "tool") {
		t.Fatalf("Resolve(link) = %+v, %v", tg, err)
	}
}

func TestRefuse(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"sshd", "python3.11", "bash", "tool", "pythonic"} {
		write(t, filepath.Join(dir, n), 0o755)
	}
	self, _ := os.Executable()
	tests := []struct {
		name          string
		path          string
		hasArg, force bool
		refused       bool
		forcible      bool
	}{
		// A daemon is refused by identity (judge_test.go): a user's
		// file of a daemon's name is not the daemon.
		{"a user's file named as a daemon", "sshd", false, false, false, false},
		{"interpreter", "python3.11", false, false, true, true},
		{"interpreter with --arg", "python3.11", true, false, false, false},
		{"shell forced", "bash", false, true, false, false},
		{"ordinary", "tool", false, false, false, false},
		{"not an interpreter though it starts like one", "pythonic", false, false, false, false},
		{"freeze itself, even forced", self, false, true, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.path
			if !filepath.IsAbs(p) {
				p = filepath.Join(dir, p)
			}
			tg, err := Resolve(p)
			if err != nil {
				t.Fatal(err)
			}
			r := Refuse(proc.Default, tg, tt.hasArg, tt.force)
			if (r != nil) != tt.refused {
				t.Fatalf("refusal %v, want refused=%v", r, tt.refused)
			}
			if r != nil && (r.Forcible != tt.forcible || r.Hint == "") {
				t.Fatalf("refusal %+v: forcible want %v, and a hint", r, tt.forcible)
			}
		})
	}
}

func pids(res Result) map[int]Reason {
	m := map[int]Reason{}
	for _, p := range res.Procs {
		m[p.PID] = p.Reason
	}
	return m
}

// A copy of the same bytes at a neighbouring path is another target.
func TestScanMatchesTheFileNotTheBytes(t *testing.T) {
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Tree, Cap: 10, HopCap: 1000, Timeout: 60 * time.Second})
	decoy := containtest.Start(t, containtest.Spec{Shape: containtest.Tree, Cap: 7, HopCap: 1000, Timeout: 60 * time.Second, Name: "chain-2", Dir: c.Dir})
	c.WaitPopulation(10, 10*time.Second)
	decoy.WaitPopulation(7, 10*time.Second)
	tg, err := Resolve(c.Path)
	if err != nil {
		t.Fatal(err)
	}
	res, err := NewScanner(proc.Default, Spec{Targets: []Target{tg}}).Scan()
	if err != nil {
		t.Fatal(err)
	}
	got := pids(res)
	if len(got) != 10 || res.Counts[ByPath] != 10 {
		t.Fatalf("matched %d (%v), want the chain's 10", len(got), res.Counts)
	}
	for _, pid := range decoy.Survivors() {
		if _, ok := got[pid]; ok {
			t.Fatalf("decoy pid %d matched", pid)
		}
	}
	// --under the test cache takes both.
	res = scan(t, Spec{Under: []string{c.Dir}})
	if res.Counts[ByUnder] != 17 {
		t.Fatalf("--under matched %v, want 17", res.Counts)
	}
}

// A binary replaced during a rebuild still matches by its old path.
func TestScanMatchesReplacedBinary(t *testing.T) {
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Tree, Cap: 5, HopCap: 1000, Timeout: 60 * time.Second})
	c.WaitPopulation(5, 10*time.Second)
	// Rebuild: a new file renamed over the old path.
	data, _ := os.ReadFile(c.Path)
	if err := os.WriteFile(c.Path+".new", data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(c.Path+".new", c.Path); err != nil {
		t.Fatal(err)
	}
	tg, err := Resolve(c.Path)
	if err != nil {
		t.Fatal(err)
	}
	res, err := NewScanner(proc.Default, Spec{Targets: []Target{tg}}).Scan()
	if err != nil {
		t.Fatal(err)
	}
	if res.Counts[ByDeleted] != 5 || res.Counts[ByPath] != 0 {
		t.Fatalf("counts %v, want 5 matched as replaced", res.Counts)
	}
}

// Descendants that run another binary belong to the chain, unless
// --no-descendants; --arg narrows by argv.
func TestScanDescendantsAndArgs(t *testing.T) {
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Line, Cap: 12, HopCap: 1000, Timeout: 60 * time.Second, Interval: time.Millisecond})
	c.WaitPopulation(12, 10*time.Second)
	// Make the leader's path another file: the leader keeps matching as
	// replaced... instead target the leader only, through --arg "-g",
	// which only the leader has in its argv.
	tg, err := Resolve(c.Path)
	if err != nil {
		t.Fatal(err)
	}
	res := scan(t, Spec{Targets: []Target{tg}, Args: []string{"-g"}})
	if res.Counts[ByPath] != 1 || res.Counts[ByDescendant] != 11 {
		t.Fatalf("with --arg -g: %v, want the leader by path and 11 descendants", res.Counts)
	}
	if len(res.Passed) != 0 {
		t.Fatalf("with --arg -g: %d passed over, want none (the rest descend from the match)", len(res.Passed))
	}
	res = scan(t, Spec{Targets: []Target{tg}, Args: []string{"-g"}, NoDescendants: true})
	if res.Live() != 1 {
		t.Fatalf("--no-descendants matched %d, want the leader alone", res.Live())
	}
	res = scan(t, Spec{Targets: []Target{tg}, Args: []string{"no-such-arg"}})
	if res.Live() != 0 {
		t.Fatalf("an --arg nobody has matched %d", res.Live())
	}
	// Each runs the file, none has the --arg: what a gate holding the
	// file lets go.
	if len(res.Passed) != 12 {
		t.Fatalf("an --arg nobody has: %d passed over, want the 12 processes of the file", len(res.Passed))
	}
}

// The scanning process and its ancestors are never in the set, even when
// they run the target.
func TestScanExcludesSelf(t *testing.T) {
	self, _ := os.Executable()
	tg, err := Resolve(self)
	if err != nil {
		t.Fatal(err)
	}
	// Processes of the test's own, so the scan has something besides
	// itself to look at on a quiet machine.
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Tree, Cap: 3, HopCap: 1000, Timeout: 60 * time.Second})
	c.WaitPopulation(3, 30*time.Second)
	res := scan(t, Spec{Targets: []Target{tg}})
	if res.Scanned < 3 {
		t.Fatalf("the scan looked at %d processes, fewer than the test's own chain of 3", res.Scanned)
	}
	for _, p := range res.Procs {
		if p.PID == os.Getpid() {
			t.Fatal("the scanning process matched itself")
		}
	}
}

// scan runs one scan and fails the test if it fails: a test that
// discarded the error would pass on a scan that found nothing.
func scan(t *testing.T, spec Spec) Result {
	t.Helper()
	res, err := NewScanner(proc.Default, spec).Scan()
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	return res
}

// A primed scanner returns the primed result once, then reads /proc again.
func TestPrimeServesOneScan(t *testing.T) {
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Tree, Cap: 5, HopCap: 1000, Timeout: 60 * time.Second})
	c.WaitPopulation(5, 10*time.Second)
	tg, err := Resolve(c.Path)
	if err != nil {
		t.Fatal(err)
	}
	s := NewScanner(proc.Default, Spec{Targets: []Target{tg}})
	s.Prime(Result{Scanned: -7})
	if res, _ := s.Scan(); res.Scanned != -7 {
		t.Fatalf("first scan after Prime read /proc (%d scanned)", res.Scanned)
	}
	if res, _ := s.Scan(); res.Scanned <= 0 || res.Live() != 5 {
		t.Fatalf("second scan: %d scanned, %d live; want /proc read again and the chain's 5", res.Scanned, res.Live())
	}
}

// procTasks is a task source that reads /proc, as the gate's iterator
// reports it: a scan through it must find what a scan of /proc finds.
func procTasks(calls *int) TaskSource {
	return func(buf []proc.Task) ([]proc.Task, error) {
		*calls++
		pids, err := proc.Default.PIDs(nil)
		if err != nil {
			return buf, err
		}
		for _, pid := range pids {
			st, err := proc.Default.ReadStat(pid)
			if err != nil {
				continue
			}
			f, err := proc.Default.ExeFile(pid)
			buf = append(buf, proc.Task{Stat: st, Exe: f, HasExe: err == nil})
		}
		return buf, nil
	}
}

// A scan from a task source finds the same set as a scan of /proc, the
// chain's frozen processes and their descendants, and not its decoy; a
// source that fails leaves the scan to /proc and says why.
func TestScanFromTasks(t *testing.T) {
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Tree, Cap: 12, HopCap: 1000, Timeout: 60 * time.Second, V2Group: true})
	decoy := containtest.Start(t, containtest.Spec{Shape: containtest.Tree, Cap: 5, HopCap: 1000, Timeout: 60 * time.Second, Name: "chain-2", Dir: c.Dir})
	c.WaitPopulation(12, 30*time.Second)
	decoy.WaitPopulation(5, 30*time.Second)
	if err := c.FreezeV2(10 * time.Second); err != nil {
		t.Skipf("cannot freeze the chain to compare two scans of it: %v", err)
	}
	tg, err := Resolve(c.Path)
	if err != nil {
		t.Fatal(err)
	}
	spec := Spec{Targets: []Target{tg}}
	want, err := NewScanner(proc.Default, spec).Scan()
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	s := NewScanner(proc.Default, spec)
	s.UseTasks(procTasks(&calls))
	got, err := s.Scan()
	if err != nil || calls != 1 || s.TaskErr != nil {
		t.Fatalf("scan from tasks: %v (calls %d, source error %v)", err, calls, s.TaskErr)
	}
	ids := func(r Result) map[proc.ID]Reason {
		m := map[proc.ID]Reason{}
		for _, p := range r.Procs {
			m[p.ID] = p.Reason
		}
		return m
	}
	w, g := ids(want), ids(got)
	if len(w) != 12 || len(g) != len(w) {
		t.Fatalf("from /proc %d matched, from tasks %d; want the chain's 12", len(w), len(g))
	}
	for id, r := range w {
		if g[id] != r {
			t.Errorf("%v: %v from /proc, %v from tasks", id, r, g[id])
		}
	}
	s.UseTasks(func(buf []proc.Task) ([]proc.Task, error) { return buf, errors.New("no iterator") })
	again, err := s.Scan()
	if err != nil || again.Live() != 12 || s.TaskErr == nil {
		t.Fatalf("with a failing source: %d matched, %v, source error %v", again.Live(), err, s.TaskErr)
	}
}

// Where PID 1's executable cannot be read (on these machines even root
// is refused), the refusal of PID 1's file no longer passes on that: a
// target with PID 1's name is refused (forcible, being by name), another
// is not (#24, finding 10: it failed open).
func TestRefusePID1ByNameWhenItsExeIsUnreadable(t *testing.T) {
	root := filepath.Join(t.TempDir(), "proc")
	os.MkdirAll(filepath.Join(root, "1"), 0o755)
	os.WriteFile(filepath.Join(root, "1", "stat"), []byte("1 (process_api) S 0 1 1 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 1 0 0\n"), 0o644)
	os.Symlink("/nonexistent/unreadable", filepath.Join(root, "1", "exe"))
	fs := proc.FS{Root: root}
	dir := t.TempDir()
	for name, refused := range map[string]bool{"process_api": true, "tool": false} {
		write(t, filepath.Join(dir, name), 0o755)
		tg, err := Resolve(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		r := Refuse(fs, tg, false, false)
		if (r != nil) != refused {
			t.Errorf("%s: refusal %v, want refused=%v", name, r, refused)
		}
		if r != nil && !r.Forcible {
			t.Errorf("%s: a refusal by name must be forcible", name)
		}
		if r := Refuse(fs, tg, false, true); r != nil {
			t.Errorf("%s with --force: still refused: %v", name, r)
		}
	}
}

// A deleted file's process that exits between its count and its read
// is not "no process runs it" (which says to check the path), but a
// process gone mid-read, with "run freeze again". A fixture tree: the
// records count pid 4242 running the unlinked file, whose exe link
// names the path and then leads nowhere, as a process's does once it
// exited.
func TestResolveDeletedSaysAProcessThatWentMidRead(t *testing.T) {
	root := t.TempDir()
	path := "/srv/build/gen"
	if err := os.MkdirAll(filepath.Join(root, "4242"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(path+" (deleted)", filepath.Join(root, "4242", "exe")); err != nil {
		t.Fatal(err)
	}
	records := func(buf []proc.Task) ([]proc.Task, error) {
		return append(buf, proc.Task{Stat: proc.Stat{PID: 4242}, Exe: proc.File{Dev: 1, Ino: 77}, HasExe: true}), nil
	}
	_, _, err := ResolveDeletedFrom(proc.FS{Root: root}, records, path)
	if err == nil || errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "process 4242, which ran it, exited while freeze read it") || !strings.HasSuffix(err.Error(), "run freeze again") {
		t.Errorf("a process gone mid-read: %v; want it named, run freeze again, and no ErrNotExist", err)
	}
	// With no process of the file at all: ErrNotExist, as before.
	none := func(buf []proc.Task) ([]proc.Task, error) { return buf, nil }
	if _, _, err := ResolveDeletedFrom(proc.FS{Root: root}, none, path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("no process runs it: %v, want ErrNotExist", err)
	}
}

// ResolveDeleted takes the deleted file most processes run, and counts
// the rest; a file whose exec'd name was removed while another link
// kept it is found too (the fallback that reads every link). Each chain
// runs this test's own copies of sleep.
func TestResolveDeletedTakesTheFileMostRun(t *testing.T) {
	testenv.RequireLive(t, "the chains' pids cgroups")
	dir := t.TempDir()
	running := func(path string, want int) {
		t.Helper()
		for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			n := 0
			ents, _ := os.ReadDir("/proc")
			for _, e := range ents {
				if l, err := os.Readlink("/proc/" + e.Name() + "/exe"); err == nil && strings.TrimSuffix(l, " (deleted)") == path {
					n++
				}
			}
			if n >= want {
				return
			}
		}
		t.Fatalf("fewer than %d processes run %s after 20 s", want, path)
	}
	start := func(path string, n int) {
		t.Helper()
		cmd := strings.Repeat(path+" 60 & ", n) + "wait"
		containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 20, HopCap: 1, Timeout: 120 * time.Second,
			Command: []string{"/bin/sh", "-c", cmd}})
	}

	// Three run the first build; two run the second, renamed over it;
	// then the path is removed.
	gen := filepath.Join(dir, "gen")
	if err := exefile.Copy("/bin/sleep", gen); err != nil {
		t.Fatal(err)
	}
	old, err := proc.StatFile(gen)
	if err != nil {
		t.Fatal(err)
	}
	start(gen, 3)
	running(gen, 3)
	if err := exefile.Copy("/bin/sleep", gen+".new"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(gen+".new", gen); err != nil {
		t.Fatal(err)
	}
	second, err := proc.StatFile(gen)
	if err != nil {
		t.Fatal(err)
	}
	start(gen, 2)
	running(gen, 5)
	if err := os.Remove(gen); err != nil {
		t.Fatal(err)
	}
	tg, others, err := ResolveDeleted(proc.Default, gen)
	if err != nil || tg.File.Dev != old.Dev || tg.File.Ino != old.Ino || others != 2 {
		t.Errorf("ResolveDeleted(%s) = file %d:%d, %d others, %v; want the first build %d:%d and 2 others", gen, tg.File.Dev, tg.File.Ino, others, err, old.Dev, old.Ino)
	}
	// The same from the gate's task iterator (a guard's spare), where
	// it loads: the same file, the same count. Then from its records
	// without the second build's two processes: no others, so the
	// records, not /proc, are what was counted.
	tasks := gateTasks(t)
	if tasks != nil {
		tg, others, err = ResolveDeletedFrom(proc.Default, tasks, gen)
		if err != nil || tg.File.Dev != old.Dev || tg.File.Ino != old.Ino || tg.Mode.Perm() != 0o755 || tg.ExePID == 0 || others != 2 {
			t.Errorf("ResolveDeletedFrom(%s) from the task iterator = file %+v mode %v pid %d, %d others, %v; want the first build %+v and 2 others", gen, tg.File, tg.Mode, tg.ExePID, others, err, old)
		}
		firstOnly := func(buf []proc.Task) ([]proc.Task, error) {
			all, err := tasks(buf)
			return slices.DeleteFunc(all, func(tk proc.Task) bool { return tk.Exe.Ino == second.Ino }), err
		}
		if _, others, err = ResolveDeletedFrom(proc.Default, firstOnly, gen); err != nil || others != 0 {
			t.Errorf("ResolveDeletedFrom(%s) from records without the second build = %d others, %v; want 0: the records were not what it counted", gen, others, err)
		}
	}

	// A hard link keeps the file: its exec'd name reads "(deleted)",
	// and the file has a link left.
	kept := filepath.Join(dir, "kept")
	if err := exefile.Copy("/bin/sleep", kept); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(kept, kept+".link"); err != nil {
		t.Fatal(err)
	}
	start(kept, 2)
	running(kept, 2)
	if err := os.Remove(kept); err != nil {
		t.Fatal(err)
	}
	f, err := proc.StatFile(kept + ".link")
	if err != nil {
		t.Fatal(err)
	}
	tg, others, err = ResolveDeleted(proc.Default, kept)
	if err != nil || tg.File.Dev != f.Dev || tg.File.Ino != f.Ino || others != 0 {
		t.Errorf("ResolveDeleted(%s), the file kept by a hard link = file %d:%d, %d others, %v; want %d:%d and none", kept, tg.File.Dev, tg.File.Ino, others, err, f.Dev, f.Ino)
	}
	if tasks != nil {
		tg, others, err = ResolveDeletedFrom(proc.Default, tasks, kept)
		if err != nil || tg.File.Dev != f.Dev || tg.File.Ino != f.Ino || others != 0 {
			t.Errorf("ResolveDeletedFrom(%s) from the task iterator, the file kept by a hard link = file %d:%d, %d others, %v; want %d:%d and none", kept, tg.File.Dev, tg.File.Ino, others, err, f.Dev, f.Ino)
		}
	}
}

// gateTasks is the task iterator of a gate loaded ahead, as a guard's
// spare is, closed at the test's end; nil, said, where it does not load.
func gateTasks(t *testing.T) TaskSource {
	g, err := gate.Load(gate.Config{Ahead: true})
	if err != nil {
		t.Logf("no gate here (%v): the task iterator's resolve is not checked", err)
		return nil
	}
	t.Cleanup(func() { g.Close() })
	g.LoadExtras()
	if !g.CanScan() {
		t.Logf("the scan iterator does not load here: %v; the task iterator's resolve is not checked", g.Missing)
		return nil
	}
	return g.Tasks
}
