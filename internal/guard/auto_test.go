package guard

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"freeze/internal/exefile"
	"freeze/internal/gate"
	"freeze/internal/proc"
)

// The chain's owner swaps the judged binary's path for a symlink to a
// program root runs, between the judge and the act: the automatic mode
// must refuse, not act on the program (#24, finding 4: on b1884f8 the
// guard resolved the exe link's text again and held, or with
// --auto-kill killed, the other program's processes). --auto-under is
// judged on the resolved path for the same reason.
func TestAutoActsOnlyOnTheJudgedFile(t *testing.T) {
	dir := t.TempDir()
	tool := filepath.Join(dir, "tool")
	if err := exefile.Copy("/bin/sleep", tool); err != nil {
		t.Fatal(err)
	}
	judged, err := proc.StatFile(tool)
	if err != nil {
		t.Fatal(err)
	}
	key := gate.KeyOf(judged)
	a := &Auto{N: 1}
	if real, ok, why := a.allowed(tool, key); !ok || real.Path != tool || real.File.Ino != judged.Ino {
		t.Fatalf("the judged file itself: %+v %v (%s)", real, ok, why)
	}
	// The swap: the same path now a symlink to a program elsewhere.
	os.Remove(tool)
	if err := os.Symlink("/bin/true", tool); err != nil {
		t.Fatal(err)
	}
	real, ok, why := a.allowed(tool, key)
	if ok {
		t.Fatalf("after the swap the automatic mode would act on %s", real.Path)
	}
	if !strings.Contains(why, "no longer resolves") {
		t.Errorf("why %q does not say the path changed", why)
	}
	// --auto-under on the resolved path: a symlink under it to a file
	// elsewhere is not under it.
	a.Under = []string{dir}
	if a.within("/bin/true") {
		t.Errorf("/bin/true counted as under %s", dir)
	}
}
