package freeze

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"freeze/internal/match"
)

func mode(t *testing.T, p string) os.FileMode {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode()
}

// Every refusal changes nothing; CheckRevoke never writes.
func TestCheckRevokeGuard(t *testing.T) {
	dir := t.TempDir()
	tool := filepath.Join(dir, "tool")
	os.WriteFile(tool, []byte("x"), 0o755)
	linked := filepath.Join(dir, "linked")
	os.WriteFile(linked, []byte("x"), 0o755)
	os.Link(linked, filepath.Join(dir, "linked2"))
	suid := filepath.Join(dir, "suid")
	os.WriteFile(suid, []byte("x"), 0o755)
	os.Chmod(suid, 0o755|os.ModeSetuid)
	shm, err := os.MkdirTemp("/dev/shm", "freeze-test-")
	if err != nil {
		t.Skipf("no /dev/shm to hold a file outside the disposable roots: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(shm) })
	outside := filepath.Join(shm, "tool")
	os.WriteFile(outside, []byte("x"), 0o755)
	sys := "/usr/bin/true" // only ever read: CheckRevoke changes nothing

	roots := DisposableRoots(nil)
	tests := []struct {
		name  string
		path  string
		roots []string
		force bool
		rule  string // "" for allowed
	}{
		{"disposable copy", tool, roots, false, ""},
		{"directory", dir, roots, false, "not a regular file"},
		{"setuid", suid, roots, false, "setuid or setgid"},
		{"hard links", linked, roots, false, "2 hard links"},
		{"hard links forced", linked, roots, true, ""},
		{"outside the disposable roots", outside, roots, false, "not under a disposable root"},
		{"named with --disposable", outside, DisposableRoots([]string{shm}), false, ""},
		{"system directory", sys, roots, false, "is under /usr"},
		{"system directory even if named disposable", sys, DisposableRoots([]string{"/usr"}), true, "is under /usr"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := os.Stat(tt.path); err != nil {
				t.Skipf("%s: %v", tt.path, err)
			}
			before := mode(t, tt.path)
			r, err := CheckRevoke(tt.path, tt.roots, tt.force)
			var ge *GuardError
			if tt.rule == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if r.NewMode&0o111 != 0 || r.NewMode != r.Mode&^0o111 {
					t.Fatalf("new mode %#o from %#o", r.NewMode, r.Mode)
				}
			} else if !errors.As(err, &ge) || !strings.Contains(ge.Rule, tt.rule) || ge.Hint == "" {
				t.Fatalf("err %v, want a guard refusal %q with a hint", err, tt.rule)
			}
			if after := mode(t, tt.path); after != before {
				t.Fatalf("mode changed from %v to %v by a check", before, after)
			}
		})
	}
}

func TestRevokeAndRestore(t *testing.T) {
	tool := filepath.Join(t.TempDir(), "tool")
	os.WriteFile(tool, []byte("x"), 0o750)
	r, err := CheckRevoke(tool, DisposableRoots(nil), false)
	if err != nil {
		t.Fatal(err)
	}
	r, err = Revoke(r)
	if err != nil {
		t.Fatal(err)
	}
	if m := mode(t, tool).Perm(); m != 0o640 {
		t.Fatalf("after revoke %#o, want 0640", m)
	}
	if err := Restore(r); err != nil {
		t.Fatal(err)
	}
	if m := mode(t, tool).Perm(); m != 0o750 {
		t.Fatalf("after restore %#o, want 0750", m)
	}
	// Replaced (the new file may well get the same inode number):
	// restore refuses, and says so.
	r, _ = Revoke(r)
	os.Remove(tool)
	os.WriteFile(tool, []byte("y"), 0o640)
	if err := Restore(r); !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), "replaced") {
		t.Fatalf("restore of a replaced file: %v", err)
	}
	if m := mode(t, tool).Perm(); m != 0o640 {
		t.Fatalf("restore touched the replacement: %#o", m)
	}
}

// Where --under is refused (after resolving it): the machine's program
// and state directories, but not the temporary ones test caches live in.
func TestSystemDir(t *testing.T) {
	for d, want := range map[string]bool{
		"/": true, "/usr/bin": true, "/usr": true, "/etc/x": true, "/var": true, "/var/lib": true,
		"/var/lib/docker/overlay2": true, "/nix/store": true, "/snap/bin": true, "/proc/1": true, "/sys": true,
		"/var/tmp": true, "/var/tmp/TestX/cache": false, "/tmp/TestX": false, "/home/u/.cache/go-build": false,
		"/usrlocal": false, "/variable": false,
	} {
		if got := SystemDir(d); got != want {
			t.Errorf("SystemDir(%q) = %v, want %v", d, got, want)
		}
	}
}

// A file deleted and replaced by one that gets the same inode number (as
// tmpfs and ext4 do) is another target, with another group name: a run
// on the new file must not find the group a --hold on the old one left.
func TestGroupNameTellsAReusedInodeApart(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "tool")
	names := map[string]bool{}
	var inos []uint64
	for i := 0; i < 20; i++ {
		os.Remove(p)
		if err := os.WriteFile(p, []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
		tg, err := match.Resolve(p)
		if err != nil {
			t.Fatal(err)
		}
		if tg.Birth == 0 {
			t.Skip("this filesystem keeps no birth time: the inode number alone names the file")
		}
		names[GroupName(match.Spec{Targets: []match.Target{tg}})] = true
		inos = append(inos, tg.File.Ino)
		time.Sleep(2 * time.Millisecond)
	}
	reused := false
	for i := 1; i < len(inos); i++ {
		reused = reused || inos[i] == inos[0]
	}
	if !reused {
		t.Skipf("the filesystem gave 20 new inode numbers (%v): no reuse to tell apart", inos[:3])
	}
	if len(names) != 20 {
		t.Fatalf("%d group names for 20 files that reused one inode number", len(names))
	}
}
