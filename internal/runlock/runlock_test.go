package runlock

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"freeze/internal/proc"
)

func TestSecondRunIsToldWhoHoldsTheLock(t *testing.T) {
	dir := t.TempDir()
	first, err := Acquire(proc.Default, dir, "freeze-x-1", []string{"freeze", "--path", "/tmp/x"})
	if err != nil {
		t.Fatal(err)
	}
	if first.Stale != nil {
		t.Fatalf("a new lock reports a stale holder: %+v", first.Stale)
	}
	// flock(2) locks belong to the open file: a second open in the same
	// process conflicts, as a second process would.
	_, err = Acquire(proc.Default, dir, "freeze-x-1", []string{"freeze", "--path", "/tmp/x"})
	var held *HeldError
	if !errors.As(err, &held) {
		t.Fatalf("second acquire: %v, want a HeldError", err)
	}
	st, _ := proc.Default.ReadStat(os.Getpid())
	if held.Holder.PID != os.Getpid() || held.Holder.Start != st.Start || len(held.Holder.Command) != 3 {
		t.Fatalf("holder %+v, want pid %d start %d and the command", held.Holder, os.Getpid(), st.Start)
	}
	if _, err := Acquire(proc.Default, dir, "freeze-y-2", nil); err != nil {
		t.Fatalf("another chain's lock: %v", err)
	}
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "freeze-x-1.lock")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("lock file after release: %v", err)
	}
	again, err := Acquire(proc.Default, dir, "freeze-x-1", nil)
	if err != nil || again.Stale != nil {
		t.Fatalf("acquire after release: %v (stale %+v)", err, again.Stale)
	}
	again.Release()
}

// A run that died without releasing leaves a file nobody holds: the next
// run takes it over and reports whose it was.
func TestStaleLockIsTakenOver(t *testing.T) {
	dir := t.TempDir()
	body := `{"pid":999999,"start_ticks":12345,"started":"2026-11-29T20:00:00Z","command":["freeze","--path","/tmp/x"]}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, "freeze-x-1.lock"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := Acquire(proc.Default, dir, "freeze-x-1", []string{"freeze"})
	if err != nil {
		t.Fatalf("a lock nobody holds was not taken over: %v", err)
	}
	defer l.Release()
	if l.Stale == nil || l.Stale.PID != 999999 || l.Stale.Start != 12345 {
		t.Fatalf("stale holder %+v, want pid 999999 start 12345", l.Stale)
	}
	b, _ := os.ReadFile(l.Path())
	if len(b) == 0 || string(b) == body {
		t.Fatalf("the lock file still names the old holder: %s", b)
	}
}

// The lock directory an attacker prepared is refused: a symlink to a
// directory of theirs, or their own directory (#24, finding 10: a
// non-root run's /tmp/freeze-UID was opened through either).
func TestAcquireRefusesAPreparedDirectory(t *testing.T) {
	base := t.TempDir()
	theirs := filepath.Join(base, "theirs")
	os.Mkdir(theirs, 0o700)
	link := filepath.Join(base, "link")
	os.Symlink(theirs, link)
	if _, err := Acquire(proc.Default, link, "freeze-x", nil); err == nil {
		t.Error("a symlinked lock directory was used")
	}
	if os.Geteuid() == 0 {
		os.Chown(theirs, 65534, 65534)
		if _, err := Acquire(proc.Default, theirs, "freeze-x", nil); err == nil {
			t.Error("another user's lock directory was used")
		}
	}
	if _, err := os.Lstat(filepath.Join(theirs, "freeze-x.lock")); err == nil {
		t.Error("a lock file was made in the prepared directory")
	}
}
