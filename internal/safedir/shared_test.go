package safedir

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// EnsureShared makes a directory every user can search, whatever the
// umask, and refuses a link or a directory others can write at the name.
func TestEnsureSharedIsSearchableAndRefusesWhatWasPlanted(t *testing.T) {
	dir := t.TempDir()
	d := filepath.Join(dir, "shared")
	old := syscall.Umask(0o077)
	err := EnsureShared(d)
	syscall.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("%s: %v, %v; want mode 0755 under umask 077", d, fi.Mode(), err)
	}
	target := filepath.Join(dir, "elsewhere")
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := EnsureShared(link); !errors.Is(err, ErrUnsafe) {
		t.Errorf("a symlink at the name: %v, want ErrUnsafe", err)
	}
	if fi, err := os.Stat(target); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the link's target: %v, %v; want it left at 0700", fi, err)
	}
	open := filepath.Join(dir, "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := EnsureShared(open); !errors.Is(err, ErrUnsafe) {
		t.Errorf("a directory others can write: %v, want ErrUnsafe", err)
	}
}
