package freeze

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"freeze/internal/gate"
	"freeze/internal/match"
)

// The owner of a --under directory swaps a subdirectory for a symlink to
// /usr/bin while freeze walks it, in a tight loop (renameat2
// RENAME_EXCHANGE): the gate's file set must never hold a file outside
// the directory. On b1884f8 the walk followed the swapped-in symlink and
// put 745 of /usr/bin's programs, bash among them, into the gate (#24,
// finding 5).
func TestUnderWalkNeverLeavesItsDirectory(t *testing.T) {
	if _, err := os.Stat("/usr/bin/true"); err != nil {
		t.Skip("no /usr/bin to aim the symlink at")
	}
	dir := t.TempDir()
	sub, swap := filepath.Join(dir, "sub"), filepath.Join(dir, "swap")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		os.WriteFile(filepath.Join(sub, "tool"+string(rune('a'+i))), []byte("x"), 0o755)
	}
	if err := os.Symlink("/usr/bin", swap); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			unix.Renameat2(unix.AT_FDCWD, sub, unix.AT_FDCWD, swap, unix.RENAME_EXCHANGE)
		}
	}()
	defer func() { stop.Store(true); wg.Wait() }()
	walked := 0
	for i := 0; i < 2000; i++ {
		files, _ := gateFiles(match.Spec{Under: []string{dir}}, false)
		for _, f := range files {
			if !strings.HasPrefix(f.Path, dir+"/") {
				t.Fatalf("try %d: the gate's set holds %s, outside %s", i, f.Path, dir)
			}
			var st unix.Stat_t
			if unix.Stat("/usr/bin/true", &st) == nil && st.Ino == f.Stat.Ino && st.Dev == f.Stat.Dev {
				t.Fatalf("try %d: the gate's set holds /usr/bin/true's inode as %s", i, f.Path)
			}
		}
		if len(files) > 0 {
			walked++
		}
	}
	if walked == 0 {
		t.Fatal("no walk found the directory's own files: the test raced nothing")
	}
}

// A file under --under with other hard links is not gated by file
// without --force: a link to a program elsewhere would gate every
// process of that program.
func TestUnderWalkLeavesHardLinksToTheScan(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a")
	os.WriteFile(a, []byte("x"), 0o755)
	if err := os.Link(a, filepath.Join(dir, "b")); err != nil {
		t.Skipf("no hard links here: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "c"), []byte("x"), 0o755)
	files, note := gateFiles(match.Spec{Under: []string{dir}}, false)
	if len(files) != 1 || filepath.Base(files[0].Path) != "c" || !strings.Contains(note, "hard links") {
		t.Fatalf("files %v, note %q: want c alone, and a note on the hard links", files, note)
	}
	if files, _ := gateFiles(match.Spec{Under: []string{dir}}, true); len(files) != 3 {
		t.Fatalf("with --force: %d files, want 3", len(files))
	}
}

// The gate-detached line says what the gate's programs could not note
// where the kernel refused them task storage, and nothing when they
// noted everything (the usual case: no clause to read past).
func TestStorageWords(t *testing.T) {
	if w := storageWords(gate.Counters{Killed: 300, Lineage: 4}); w != "" {
		t.Fatalf("nothing refused, yet: %q", w)
	}
	w := storageWords(gate.Counters{KillUnnoted: 1, MarkFailed: 2, LineageFailed: 3})
	for _, want := range []string{"1 kill counted without a note", "2 processes marked by pidfd", "3 children not gated by lineage"} {
		if !strings.Contains(w, want) {
			t.Fatalf("%q lacks %q", w, want)
		}
	}
}
