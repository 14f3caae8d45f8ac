package timeline

import (
	"errors"
	"freeze/internal/testenv"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const nobodyUID = 65534

// What restore will act on must be a timeline root (or the caller)
// wrote: each case is a file an attacker could hand a root freeze
// restore, and each is refused without reading it as a record. On
// b1884f8 restore read all of them (the FIFO hung it, the others were
// acted on).
func TestReadTrustedRefusesWhatAnotherUserControls(t *testing.T) {
	testenv.RequireRoot(t, "the files belong to another user")
	dir := t.TempDir()
	good := `{"time":"2026-12-01T10:00:00Z","elapsed_ms":0,"stage":0,"step":"start","msg":"x"}` + "\n"
	write := func(name string, mode os.FileMode, uid int) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(good), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode) // past the umask
		os.Chown(p, uid, uid)
		return p
	}
	ok := write("mine.jsonl", 0o600, 0)
	if _, err := ReadTrusted(ok, 0); err != nil {
		t.Fatalf("root's own timeline: %v", err)
	}
	link := filepath.Join(dir, "link.jsonl")
	os.Symlink(ok, link)
	fifo := filepath.Join(dir, "fifo.jsonl")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]string{
		"another user's":     write("nobody.jsonl", 0o644, nobodyUID),
		"group-writable":     write("gw.jsonl", 0o620, 0),
		"world-writable":     write("ww.jsonl", 0o602, 0),
		"a symbolic link":    link,
		"a FIFO":             fifo,
		"a character device": "/dev/zero",
	} {
		done := make(chan error, 1)
		go func() { _, err := ReadTrusted(p, 0); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, ErrUntrusted) {
				t.Errorf("%s (%s): %v, want ErrUntrusted", name, p, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s (%s): ReadTrusted still blocked after 5s", name, p)
		}
	}
	// The caller's own file is trusted for the caller.
	mine := write("caller.jsonl", 0o600, nobodyUID)
	if _, err := ReadTrusted(mine, nobodyUID); err != nil {
		t.Errorf("the caller's own timeline: %v", err)
	}
}

// A line that does not parse fails the read: restore never acts on the
// lines before it alone.
func TestReadTrustedFailsOnABadLine(t *testing.T) {
	p := filepath.Join(t.TempDir(), "t.jsonl")
	body := `{"time":"2026-12-01T10:00:00Z","elapsed_ms":0,"stage":0,"step":"start","msg":"x"}` + "\nnot json\n"
	os.WriteFile(p, []byte(body), 0o600)
	if _, err := ReadTrusted(p, os.Getuid()); err == nil {
		t.Fatal("a timeline with a bad second line was read without error")
	}
}

// freeze timeline and --fleet read with ReadFile: a FIFO or a device at
// the name is refused at once, neither hanging nor filling memory (#24,
// finding 10: on b1884f8 a FIFO hung them and /dev/zero ran them out of
// memory).
func TestReadFileRefusesWhatIsNotAFile(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo.jsonl")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, "/dev/zero"} {
		done := make(chan error, 1)
		go func() { _, err := ReadFile(p); done <- err }()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("%s: read as a timeline", p)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: ReadFile still blocked after 5s", p)
		}
	}
}
