package match

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"freeze/internal/exefile"
	"freeze/internal/proc"
)

// The table holds the identities of the daemons and interpreters in the
// system's directories, by name, and nothing else.
func TestSystemIdentitiesAreDaemonsAndInterpretersOnly(t *testing.T) {
	sys := filepath.Join(t.TempDir(), "usr", "sbin")
	os.MkdirAll(sys, 0o755)
	for _, n := range []string{"cron", "python3.11", "unrelated"} {
		if err := exefile.Copy("/bin/true", filepath.Join(sys, n)); err != nil {
			t.Fatal(err)
		}
	}
	got := systemIdentities([]string{sys})
	names := map[string]bool{}
	for _, n := range got {
		names[n] = true
	}
	if len(got) != 2 || !names["cron"] || !names["python3.11"] {
		t.Fatalf("system identities %v: want cron and python3.11 only", got)
	}
}

// The order refuses a daemon by identity, not by name (the third
// audit's S6): a user's copy named cron, or systemd, is that user's
// chain; the system's own is refused, and --force lets it through.
func TestRefuseJudgesDaemonsByIdentity(t *testing.T) {
	fs := proc.Default
	dir := t.TempDir()
	for _, n := range []string{"cron", "systemd", "sshd"} {
		p := filepath.Join(dir, n)
		if err := exefile.Copy("/bin/true", p); err != nil {
			t.Fatal(err)
		}
		tg, err := Resolve(p)
		if err != nil {
			t.Fatal(err)
		}
		if r := Refuse(fs, tg, false, false); r != nil {
			t.Errorf("a user's %s: refused (%s)", n, r.Rule)
		}
	}
	for _, d := range []string{"/lib/systemd/systemd", "/usr/bin/su", "/bin/su", "/usr/sbin/cron"} {
		tg, err := Resolve(d)
		if err != nil {
			continue
		}
		if _, ok := SystemFile(tg.File); !ok {
			continue
		}
		r := Refuse(fs, tg, false, false)
		if r == nil || !r.Forcible {
			t.Errorf("the system's %s: refusal %v, want one --force overrides", d, r)
		}
		if r := Refuse(fs, tg, false, true); r != nil {
			t.Errorf("the system's %s with --force: refused (%s)", d, r.Rule)
		}
		return
	}
	t.Skip("no system daemon installed here (systemd, su, cron) to be refused by identity")
}

// The table is read again when a system directory changed: a guard
// reads it when armed and may live for months, and an upgrade renames a
// new file over a daemon's name. The directory's times are set an hour
// back first, so the read is not racy and only its change can make the
// table read again; then a directory changed within its clock's step of
// a read is read again at the next look.
func TestTheSystemTableSeesAnUpgrade(t *testing.T) {
	sys := t.TempDir()
	cron := filepath.Join(sys, "cron")
	if err := exefile.Copy("/bin/true", cron); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(sys, old, old); err != nil {
		t.Fatal(err)
	}
	s := &systemTable{dirs: []string{sys}}
	first, err := proc.StatFile(cron)
	if err != nil {
		t.Fatal(err)
	}
	if name, ok := s.load()[fileKey{first.Dev, first.Ino}]; !ok || name != "cron" || s.racy {
		t.Fatalf("the installed cron: %q %v (racy %v), want cron, not racy", name, ok, s.racy)
	}
	// The upgrade: a new file renamed over the name.
	if err := exefile.Copy("/bin/true", cron+".new"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(cron+".new", cron); err != nil {
		t.Fatal(err)
	}
	upgraded, err := proc.StatFile(cron)
	if err != nil || upgraded.Ino == first.Ino {
		t.Fatalf("the upgrade: %+v %v, want a new inode", upgraded, err)
	}
	tab := s.load()
	if name, ok := tab[fileKey{upgraded.Dev, upgraded.Ino}]; !ok || name != "cron" {
		t.Errorf("after the upgrade, the new cron is %q %v: the table was not read again", name, ok)
	}
	if _, ok := tab[fileKey{first.Dev, first.Ino}]; ok {
		t.Errorf("after the upgrade, the replaced cron is still in the table")
	}
	// That read was racy (the directory changed within the last second):
	// a change stamped with the same time is seen at the next look.
	if !s.racy {
		t.Errorf("a read a moment after the directory changed is not marked racy")
	}
	if err := exefile.Copy("/bin/true", filepath.Join(sys, "python3")); err != nil {
		t.Fatal(err)
	}
	st, _ := stampsOf(s.dirs)
	s.mu.Lock()
	s.stamps = st // as if the change had kept the directory's times
	s.mu.Unlock()
	py, err := proc.StatFile(filepath.Join(sys, "python3"))
	if err != nil {
		t.Fatal(err)
	}
	if name, ok := s.load()[fileKey{py.Dev, py.Ino}]; !ok || name != "python3" {
		t.Errorf("a file installed within the clock's step of a racy read is %q %v: not read again", name, ok)
	}
	// A directory stamped an hour ahead of the clock is not racy: its
	// next change stamps it with the time then, which the stamps see.
	// Taken for racy, it was read again at every look.
	ahead := time.Now().Add(time.Hour)
	if err := os.Chtimes(sys, ahead, ahead); err != nil {
		t.Fatal(err)
	}
	if s.load(); s.racy {
		t.Errorf("a read of a directory stamped an hour ahead is marked racy: read again at every look")
	}
}
