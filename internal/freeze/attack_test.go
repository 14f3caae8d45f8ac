package freeze

import (
	"errors"
	"freeze/internal/testenv"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// These tests are attacks by the owner of a test cache on a root freeze:
// the owner controls the cache's files and directories, and so the paths
// and the records freeze acts on. Each fails on b1884f8, where revoke and
// restore checked a path and then chmodded it again by path.

const nobody = 65534

// victim is a file the attacker must never be able to change: root's,
// mode 0600, outside the cache.
func victim(t *testing.T) string {
	t.Helper()
	testenv.RequireRoot(t, "the attack is on a root freeze, by another user")
	v := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(v, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	return v
}

// cache is a directory owned by nobody, as a user's test cache is.
func cache(t *testing.T) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), "cache")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(d, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	return d
}

func modeOf(t *testing.T, p string) uint32 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Mode & 0o7777
}

// A record forged by nobody names nobody's symlink to root's file, with
// the symlink's own device, inode and mode (what a check by lstat sees)
// and asks for 04777: restore must leave root's file alone.
func TestRestoreRefusesAForgedRecordThroughASymlink(t *testing.T) {
	v := victim(t)
	link := filepath.Join(cache(t), "tool")
	if err := os.Symlink(v, link); err != nil {
		t.Fatal(err)
	}
	os.Lchown(link, nobody, nobody)
	var st unix.Stat_t
	if err := unix.Lstat(link, &st); err != nil {
		t.Fatal(err)
	}
	for _, r := range []Revocation{
		// as b1884f8 would accept it: the symlink's own identity
		{Path: link, Dev: st.Dev, Ino: st.Ino, Mode: 0o4777, NewMode: st.Mode & 0o7777, UID: nobody, GID: nobody},
		// plausible modes and a change time, still through the symlink
		{Path: link, Dev: st.Dev, Ino: st.Ino, Mode: 0o777, NewMode: 0o666, UID: nobody, GID: nobody, Ctime: st.Ctim.Nano()},
	} {
		if err := Restore(r); err == nil {
			t.Errorf("restore of forged record %+v: no error", r)
		}
		if m := modeOf(t, v); m != 0o600 {
			t.Fatalf("root's file is %#o after a forged restore, want 0600", m)
		}
	}
}

// Records that ask for what a revocation never makes are refused before
// any file is opened.
func TestRestoreRefusesImplausibleRecords(t *testing.T) {
	base := Revocation{Path: "/tmp/x/tool", Mode: 0o755, NewMode: 0o644, Ctime: 1}
	for name, mut := range map[string]func(*Revocation){
		"setuid":            func(r *Revocation) { r.Mode = 0o4755; r.NewMode = 0o4644 },
		"setgid":            func(r *Revocation) { r.Mode = 0o2755; r.NewMode = 0o2644 },
		"not only x bits":   func(r *Revocation) { r.Mode = 0o777 },
		"no x bits at all":  func(r *Revocation) { r.Mode = 0o644 },
		"no change time":    func(r *Revocation) { r.Ctime = 0 },
		"relative path":     func(r *Revocation) { r.Path = "tool" },
		"unclean path":      func(r *Revocation) { r.Path = "/tmp/x/../etc/tool" },
		"system directory":  func(r *Revocation) { r.Path = "/usr/bin/tool" },
		"file type bits in": func(r *Revocation) { r.Mode |= unix.S_IFREG },
	} {
		r := base
		mut(&r)
		if err := Restore(r); !errors.Is(err, ErrUntrusted) {
			t.Errorf("%s: %v, want ErrUntrusted", name, err)
		}
	}
}

// The race: nobody swaps the cache's file for a symlink to root's file
// (renameat2 RENAME_EXCHANGE, atomic, in a tight loop) while a root
// freeze revokes and then restores it. Thousands of tries; root's file
// must never change. On b1884f8 both were won within milliseconds.
func TestRevokeAndRestoreLoseTheRenameRace(t *testing.T) {
	v := victim(t)
	dir := cache(t)
	tool, decoy := filepath.Join(dir, "tool"), filepath.Join(dir, "swap")
	var stop atomic.Bool
	const tries = 3000
	revoked, restored, refused := 0, 0, 0
	for i := 0; i < tries; i++ {
		os.Remove(tool)
		os.Remove(decoy)
		if err := os.WriteFile(tool, []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chown(tool, nobody, nobody)
		if err := os.Symlink(v, decoy); err != nil {
			t.Fatal(err)
		}
		r, err := CheckRevoke(tool, []string{dir}, false)
		if err != nil {
			t.Fatal(err)
		}
		stop.Store(false)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // the attacker
			defer wg.Done()
			for !stop.Load() {
				unix.Renameat2(unix.AT_FDCWD, tool, unix.AT_FDCWD, decoy, unix.RENAME_EXCHANGE)
			}
		}()
		r, err = Revoke(r)
		if err == nil {
			revoked++
			if Restore(r) == nil {
				restored++
			} else {
				refused++
			}
		} else {
			refused++
		}
		stop.Store(true)
		wg.Wait()
		if m := modeOf(t, v); m != 0o600 {
			t.Fatalf("try %d: root's file is %#o, want 0600: the race was won", i, m)
		}
	}
	t.Logf("%d tries: %d revoked, %d of them restored, %d refused as changed", tries, revoked, restored, refused)
	if revoked == 0 {
		t.Errorf("no revocation went through in %d tries: the test raced nothing", tries)
	}
}
