package timeline

import (
	"freeze/internal/testenv"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The state directory an attacker made first, or left open to others,
// is refused; a missing one is made 0700 (#24, finding 2: on b1884f8 the
// first run, root's or not, made /var/tmp/freeze 0755 as its own, and
// root then wrote there).
func TestCheckStateDirRefusesWhatOthersControl(t *testing.T) {
	testenv.RequireRoot(t, "the directories belong to another user")
	base := t.TempDir()
	fresh := filepath.Join(base, "fresh", "freeze")
	if err := CheckStateDir(fresh); err != nil {
		t.Fatalf("a missing directory: %v", err)
	}
	var st unix.Stat_t
	unix.Stat(fresh, &st)
	if st.Mode&0o777 != 0o700 {
		t.Errorf("made %s with mode %#o, want 0700", fresh, st.Mode&0o777)
	}
	theirs := filepath.Join(base, "theirs")
	os.Mkdir(theirs, 0o755)
	os.Chown(theirs, nobodyUID, nobodyUID)
	open := filepath.Join(base, "open")
	os.Mkdir(open, 0o700)
	os.Chmod(open, 0o777)
	link := filepath.Join(base, "link")
	os.Symlink(fresh, link)
	for name, d := range map[string]string{"another user's": theirs, "writable by all": open, "a symlink": link} {
		if err := CheckStateDir(d); err == nil {
			t.Errorf("%s (%s): accepted", name, d)
		}
	}
}

// What an attacker plants at a timeline's name is refused without
// blocking and without writing through it: a symlink to root's file, a
// FIFO (on b1884f8 a run blocked on it before containment), and a file
// of theirs.
func TestNewRefusesWhatIsPlantedAtTheName(t *testing.T) {
	testenv.RequireRoot(t, "the planted files belong to another user")
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	os.WriteFile(victim, []byte("root's\n"), 0o600)
	link := filepath.Join(dir, "link.jsonl")
	os.Symlink(victim, link)
	fifo := filepath.Join(dir, "fifo.jsonl")
	unix.Mkfifo(fifo, 0o666)
	theirs := filepath.Join(dir, "theirs.jsonl")
	os.WriteFile(theirs, nil, 0o666)
	os.Chown(theirs, nobodyUID, nobodyUID)
	for name, p := range map[string]string{"a symlink": link, "a FIFO": fifo, "another user's file": theirs} {
		done := make(chan error, 1)
		go func() {
			rec, err := New(p, nil)
			if rec != nil {
				rec.Record(StageNone, StepStart, "x", nil)
				rec.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("%s (%s): opened", name, p)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s (%s): New still blocked after 5s", name, p)
		}
	}
	if b, _ := os.ReadFile(victim); string(b) != "root's\n" {
		t.Errorf("root's file was written through the symlink: %q", b)
	}
}

// Two runs in the same second get two files.
func TestRunNamesAreUniquePerRun(t *testing.T) {
	a := RunName("freeze-x")
	time.Sleep(2 * time.Millisecond)
	if b := RunName("freeze-x"); a == b {
		t.Errorf("two runs named %s", a)
	}
}

// -t through a user's symlink in its directory part (the audit's move:
// MkdirAll followed it, and root created the timeline, and directories,
// where the link pointed): refused, nothing made there.
func TestNewFollowsNoSymlinkInTheDirectory(t *testing.T) {
	base := t.TempDir()
	target := filepath.Join(base, "etc-like")
	os.Mkdir(target, 0o755)
	os.Symlink(target, filepath.Join(base, "link"))
	for _, p := range []string{filepath.Join(base, "link", "t.jsonl"), filepath.Join(base, "link", "new", "t.jsonl")} {
		r, err := New(p, nil)
		if err == nil {
			r.Close()
			t.Errorf("New(%s) followed the symlink", p)
		}
	}
	if ents, _ := os.ReadDir(target); len(ents) > 0 {
		t.Fatalf("made in the link's target: %v", ents)
	}
	// A real path, with directories to make, works.
	r, err := New(filepath.Join(base, "a", "b", "t.jsonl"), nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
}
