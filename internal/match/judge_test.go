package match

import (
	"os"
	"path/filepath"
	"testing"

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
