package vmtest

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// The guest's scripts parse: bash reads a script as it runs it, so a
// syntax error after the short list's exit passed every short boot and
// ended each full boot at its first line, after 8 s of an hour's run (a
// CI rehearsal, 2026-12-03). bash -n finds it on any machine, in the
// fixture tier.
func TestGuestScriptsParse(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	for _, s := range []string{"suite", "systemd-suite", "init", "systemd-init"} {
		if out, err := exec.Command(bash, "-n", filepath.Join("guest", s)).CombinedOutput(); err != nil {
			t.Errorf("guest/%s does not parse: %v\n%s", s, err, out)
		}
	}
}
