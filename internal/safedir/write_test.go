package safedir

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The writer's attacks, as the audits found them: in each, a user
// controls a name root is about to write (a link swapped in, a link
// planted, a hard link, a FIFO) or the directory itself (their own, or
// one any user can write without the sticky bit). Each way of writing
// (WriteFile, Append, Open) must leave the victim as it was.
func TestTheWriterRefusesWhatAUserPlanted(t *testing.T) {
	type world struct{ base, shared, victim string }
	setup := func(t *testing.T) world {
		base := t.TempDir()
		shared := filepath.Join(base, "tmp")
		if err := os.Mkdir(shared, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(shared, 0o777|os.ModeSticky); err != nil { // as /tmp
			t.Fatal(err)
		}
		victim := filepath.Join(base, "victim")
		if err := os.WriteFile(victim, []byte("secret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return world{base, shared, victim}
	}
	writers := map[string]func(string) error{
		"WriteFile":   func(p string) error { return WriteFile(p, []byte("{}\n"), 0o644) },
		"WriteStatus": func(p string) error { return WriteStatus(p, []byte("{}\n"), 0o644) },
		"Append":      func(p string) error { return Append(p, []byte("row\n"), 0o644) },
		"Open": func(p string) error {
			f, err := Open(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
			if err == nil {
				f.Close()
			}
			return err
		},
	}
	attacks := map[string]func(t *testing.T, w world) string{
		"a link to the victim at the name": func(t *testing.T, w world) string {
			p := filepath.Join(w.shared, "report")
			os.Symlink(w.victim, p)
			return p
		},
		"a dangling link to a name root would create": func(t *testing.T, w world) string {
			p := filepath.Join(w.shared, "report")
			os.Symlink(filepath.Join(w.base, "chosen"), p)
			return p
		},
		"a hard link of the victim": func(t *testing.T, w world) string {
			p := filepath.Join(w.shared, "report")
			if err := os.Link(w.victim, p); err != nil {
				t.Skipf("hard link: %v", err)
			}
			return p
		},
		"a FIFO at the name": func(t *testing.T, w world) string {
			p := filepath.Join(w.shared, "report")
			if err := syscall.Mkfifo(p, 0o666); err != nil {
				t.Fatal(err)
			}
			return p
		},
		"a symlinked directory in the path": func(t *testing.T, w world) string {
			os.Symlink(w.base, filepath.Join(w.shared, "d"))
			return filepath.Join(w.shared, "d", "victim")
		},
		"a directory others write, not sticky": func(t *testing.T, w world) string {
			d := filepath.Join(w.base, "open")
			os.Mkdir(d, 0o777)
			os.Chmod(d, 0o777)
			os.Symlink(w.victim, filepath.Join(d, "report"))
			return filepath.Join(d, "report")
		},
		"a directory of another user's": func(t *testing.T, w world) string {
			if os.Geteuid() != 0 {
				t.Skip("needs root to give a directory to another user")
			}
			d := filepath.Join(w.base, "runner")
			os.Mkdir(d, 0o755)
			if err := os.Chown(d, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(d, "summary.md")
		},
	}
	for an, attack := range attacks {
		for wn, write := range writers {
			t.Run(an+"/"+wn, func(t *testing.T) {
				w := setup(t)
				p := attack(t, w)
				err := write(p)
				if b, rerr := os.ReadFile(w.victim); rerr != nil || string(b) != "secret\n" {
					t.Fatalf("the victim changed: %q, %v", b, rerr)
				}
				if st, _ := os.Stat(w.victim); st.Mode().Perm() != 0o600 {
					t.Fatalf("the victim's mode changed: %v", st.Mode())
				}
				if _, serr := os.Lstat(filepath.Join(w.base, "chosen")); !os.IsNotExist(serr) {
					t.Fatal("a dangling link made the writer create the file it named")
				}
				if err == nil {
					t.Fatalf("%s wrote %s", wn, p)
				}
				if !strings.Contains(err.Error(), p) && !strings.Contains(err.Error(), filepath.Dir(p)) {
					t.Errorf("the refusal names neither the file nor its directory: %v", err)
				}
				ents, _ := os.ReadDir(w.shared)
				for _, e := range ents {
					if strings.HasPrefix(e.Name(), ".") {
						t.Errorf("left behind: %s", e.Name())
					}
				}
			})
		}
	}
}

// What the writer must still do: write a new file in a sticky directory,
// write it again (it is root's own), append to root's own file, and
// write anything in a directory of its own.
func TestTheWriterWritesWhatIsItsOwn(t *testing.T) {
	shared := filepath.Join(t.TempDir(), "tmp")
	os.Mkdir(shared, 0o777)
	os.Chmod(shared, 0o777|os.ModeSticky)
	own := t.TempDir()
	for _, dir := range []string{shared, own} {
		p := filepath.Join(dir, "report.json")
		for i := 0; i < 2; i++ {
			if err := WriteFile(p, []byte("{}\n"), 0o644); err != nil {
				t.Fatalf("write %d of %s: %v", i+1, p, err)
			}
		}
		if st, err := os.Lstat(p); err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != 0o644 {
			t.Fatalf("%s is not a regular 0644 file after the write: %v %v", p, st, err)
		}
		s := filepath.Join(dir, "summary.md")
		for i := 0; i < 2; i++ {
			if err := Append(s, []byte("row\n"), 0o644); err != nil {
				t.Fatalf("append %d to %s: %v", i+1, s, err)
			}
		}
		if b, _ := os.ReadFile(s); string(b) != "row\nrow\n" {
			t.Fatalf("%s reads %q", s, b)
		}
	}
}
