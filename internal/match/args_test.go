package match_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"freeze/internal/match"
	"freeze/internal/proctest"
)

// With --arg and descendants, argv is read only where no ancestor
// matched: a process of the file below a match is in the set as a
// descendant whatever its argv, and a decoy (the file, no --arg, below
// no match) is passed over and told to OnPassed as soon as it is
// decided, with what it started.
func TestArgsReadOnlyAboveTheMatches(t *testing.T) {
	tr := proctest.New(t)
	argv := argvWriter(t, tr)
	root := tr.Add(0, tr.Target)
	argv(root, "python3", "job.py")
	child := tr.Add(root, tr.Target) // a fork of the match: same argv
	argv(child, "python3", "job.py")
	other := tr.Add(child, tr.Target) // below the match, another script
	argv(other, "python3", "other.py")
	decoy := tr.Add(0, tr.Target)
	argv(decoy, "python3", "other.py")
	helper := tr.Add(decoy, tr.Other) // what the decoy started
	argv(helper, "other")
	stranger := tr.Add(0, tr.Other)
	argv(stranger, "python3", "job.py")

	spec := tr.Spec(t)
	spec.Args = []string{"job.py"}
	res, told := scanTold(t, tr, spec)
	if res.Counts[match.ByPath] != 1 || res.Counts[match.ByDescendant] != 2 {
		t.Errorf("counts %v: want the root by path and its two processes as descendants, their argv not read", res.Counts)
	}
	var in, passed []int
	for _, p := range res.Procs {
		in = append(in, p.PID)
	}
	for _, p := range res.Passed {
		passed = append(passed, p.PID)
	}
	slices.Sort(in)
	slices.Sort(passed)
	if !slices.Equal(in, []int{root, child, other}) {
		t.Errorf("set %v, want %v", in, []int{root, child, other})
	}
	if !slices.Equal(passed, []int{decoy, helper}) {
		t.Errorf("passed %v, want the decoy and what it started %v", passed, []int{decoy, helper})
	}
	if !slices.Equal(told, []int{decoy}) {
		t.Errorf("OnPassed told %v, want the decoy %d alone (its helper runs another file)", told, decoy)
	}
	// With --no-descendants every process of the file is read: the
	// fork of the match matches by its own argv.
	spec.NoDescendants = true
	res, _ = scanTold(t, tr, spec)
	if res.Counts[match.ByPath] != 2 || res.Live() != 2 {
		t.Errorf("--no-descendants: counts %v, want the root and its fork by path", res.Counts)
	}
}

// Small families are decided first: a decoy (a family of one) is let go
// before the argv of a bomb's root (a family of many) is read, however
// late the decoy started. The root's argv here is unreadable, so the
// root is passed over too, and the order in which OnPassed hears of the
// two is the order they were decided.
func TestArgsDecideSmallFamiliesFirst(t *testing.T) {
	tr := proctest.New(t)
	argv := argvWriter(t, tr)
	root := tr.Add(0, tr.Target)
	if err := os.Mkdir(filepath.Join(tr.Root, strconv.Itoa(root), "cmdline"), 0o755); err != nil {
		t.Fatal(err) // a read of it fails, as of a process gone
	}
	var kids []int
	for range 3 {
		k := tr.Add(root, tr.Target)
		argv(k, "python3", "job.py")
		kids = append(kids, k)
	}
	decoy := tr.Add(0, tr.Target) // started last
	argv(decoy, "python3", "other.py")

	spec := tr.Spec(t)
	spec.Args = []string{"job.py"}
	res, told := scanTold(t, tr, spec)
	if !slices.Equal(told, []int{decoy, root}) {
		t.Errorf("OnPassed heard of %v, want the decoy %d (a family of one) before the root %d (a family of four)", told, decoy, root)
	}
	var in []int
	for _, p := range res.Procs {
		in = append(in, p.PID)
	}
	slices.Sort(in)
	if !slices.Equal(in, kids) {
		t.Errorf("set %v, want the root's three children %v, each by its own argv", in, kids)
	}
}

// argvWriter writes a fixture process's cmdline.
func argvWriter(t *testing.T, tr *proctest.Tree) func(pid int, args ...string) {
	return func(pid int, args ...string) {
		b := []byte(strings.Join(args, "\x00") + "\x00")
		if err := os.WriteFile(filepath.Join(tr.Root, strconv.Itoa(pid), "cmdline"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// scanTold scans once, and lists what OnPassed was told, in order.
func scanTold(t *testing.T, tr *proctest.Tree, spec match.Spec) (match.Result, []int) {
	t.Helper()
	s := match.NewScanner(tr.FS, spec)
	var told []int
	s.OnPassed(func(p match.Proc) { told = append(told, p.PID) })
	res, err := s.Scan()
	if err != nil {
		t.Fatal(err)
	}
	return res, told
}
