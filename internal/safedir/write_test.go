package safedir

import (
	"os"
	"path/filepath"
	"testing"
)

// The attacks of the second audit, on the one writer: a user's symlink
// at the name in a world-writable directory (root replaced a 0600 root
// file with a report), a dangling one (root created a file of the
// user's choosing), and a symlinked directory in the path.
func TestWriteFileFollowsNoSymlink(t *testing.T) {
	base := t.TempDir()
	shared := filepath.Join(base, "tmp")
	if err := os.Mkdir(shared, 0o1777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(shared, 0o1777)
	victim := filepath.Join(base, "victim")
	if err := os.WriteFile(victim, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	check := func() {
		t.Helper()
		b, err := os.ReadFile(victim)
		st, _ := os.Stat(victim)
		if err != nil || string(b) != "secret\n" || st.Mode().Perm() != 0o600 {
			t.Fatalf("the file the link pointed to changed: %q, mode %v, %v", b, st.Mode(), err)
		}
	}

	link := filepath.Join(shared, "report.json")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(link, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	check()
	if st, err := os.Lstat(link); err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != 0o644 {
		t.Fatalf("the name is not a regular 0644 file after the write: %v %v", st, err)
	}
	if b, _ := os.ReadFile(link); string(b) != "{}\n" {
		t.Fatalf("the report reads %q", b)
	}

	dangling := filepath.Join(shared, "dangling.json")
	chosen := filepath.Join(base, "chosen")
	os.Symlink(chosen, dangling)
	if err := WriteFile(dangling, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(chosen); !os.IsNotExist(err) {
		t.Fatalf("a dangling link made the writer create %s", chosen)
	}

	// A directory of the path that is a symlink: refused, nothing written.
	os.Symlink(base, filepath.Join(shared, "d"))
	if err := WriteFile(filepath.Join(shared, "d", "victim"), []byte("x"), 0o644); err == nil {
		t.Fatal("a path through a symlinked directory was written")
	}
	check()

	// No temporary file is left.
	ents, _ := os.ReadDir(shared)
	for _, e := range ents {
		if e.Name()[0] == '.' {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}
