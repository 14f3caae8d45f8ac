package census

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"freeze/internal/containtest"
	"freeze/internal/exefile"
	"freeze/internal/proc"
	"freeze/internal/testenv"
)

// In a mount namespace of its own, a user's binary bind-mounted over
// another path reads, in /proc/PID/exe, as that path. Census keys its
// rows by the file, and prints no freeze command whose --path is another
// file than the one the row's processes run: on b1884f8 it recommended
// freeze --path PATH, which would stop the real PATH's processes and
// none of these (#24, finding 7).
func TestCensusNamesNoLookAlike(t *testing.T) {
	testenv.RequireLive(t, "the harness's pids cap and the bind mount")
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare (util-linux)")
	}
	dir := t.TempDir()
	real, fake := filepath.Join(dir, "real"), filepath.Join(dir, "fake")
	for _, p := range []string{real, fake} {
		if err := exefile.Copy("/bin/sleep", p); err != nil {
			t.Fatal(err)
		}
	}
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Name: "looks", Cap: 10, HopCap: 1, Timeout: 60 * time.Second, Dir: dir,
		Command: []string{unshare, "-m", "--propagation", "private", "/bin/sh", "-c", `mount --bind "$1" "$2" && exec "$2" 60`, "sh", fake, real}})
	honest := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Name: "honest", Cap: 10, HopCap: 1, Timeout: 60 * time.Second, Dir: dir,
		Command: []string{"/bin/sh", "-c", `exec "$1" 60`, "sh", real}})
	var lookalike, genuine *snap
	end := time.Now().Add(10 * time.Second)
	for (lookalike == nil || genuine == nil) && time.Now().Before(end) {
		procs := take(proc.Default)
		for _, pid := range c.Survivors() {
			if s, ok := procs[pid]; ok && s.exe == real {
				lookalike = &s
			}
		}
		if s, ok := procs[honest.Leader]; ok && s.exe == real {
			genuine = &s
		}
		time.Sleep(20 * time.Millisecond)
	}
	if lookalike == nil || genuine == nil {
		t.Fatalf("did not see both processes run %s (look-alike %v, genuine %v)", real, lookalike != nil, genuine != nil)
	}
	if lookalike.id == genuine.id {
		t.Fatalf("the look-alike and the genuine process share one row key %+v", lookalike.id)
	}
	row := Row{Exe: real, Dev: lookalike.id.dev, Ino: lookalike.id.ino, Suspect: true}
	if cmd := command(proc.Default, &row, nil); cmd != "" {
		t.Errorf("for the look-alike census suggests %q, which would stop the genuine %s", cmd, real)
	}
	if !strings.Contains(row.Reasons, "is not the file these processes run") {
		t.Errorf("the look-alike's row does not say why it has no command: %q", row.Reasons)
	}
	row = Row{Exe: real, Dev: genuine.id.dev, Ino: genuine.id.ino, Suspect: true}
	if cmd := command(proc.Default, &row, nil); cmd != "freeze --path "+real {
		t.Errorf("for the genuine file census suggests %q", cmd)
	}
}

// The second audit's move: in a mount namespace of its own, a user runs
// a binary at a path and deletes it; its processes read PATH (deleted),
// while on the host PATH names another file (root's program, say).
// Census prints no command for the row (freeze --path PATH would take
// the host's file) and says why; a file deleted in census's own
// namespace keeps its command (the rebuilt test cache of the README).
func TestCensusNamesNoHostFileForAFileDeletedInAnotherNamespace(t *testing.T) {
	testenv.RequireLive(t, "the harness's pids cap and the tmpfs mount")
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare (util-linux)")
	}
	dir := t.TempDir()
	d := filepath.Join(dir, "d")
	os.Mkdir(d, 0o755)
	sleep := filepath.Join(dir, "sleep")
	if err := exefile.Copy("/bin/sleep", sleep); err != nil {
		t.Fatal(err)
	}
	tool := filepath.Join(d, "tool")
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Name: "ns", Cap: 10, HopCap: 1, Timeout: 60 * time.Second, Dir: dir,
		Command: []string{unshare, "-m", "--propagation", "private", "/bin/sh", "-c",
			`mount -t tmpfs tmpfs "$1" && cp "$2" "$1/tool" && { "$1/tool" 60 & sleep 0.3; rm "$1/tool"; wait; }`, "sh", d, sleep}})
	// The host's own file at the same path.
	if err := exefile.Copy("/bin/true", tool); err != nil {
		t.Fatal(err)
	}
	var row *Row
	var procs map[int]snap
	for end := time.Now().Add(10 * time.Second); row == nil && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		procs = take(proc.Default)
		for _, pid := range c.Survivors() {
			if s, ok := procs[pid]; ok && s.exe == tool+" (deleted)" {
				row = &Row{Exe: s.exe, Dev: s.id.dev, Ino: s.id.ino, Suspect: true}
			}
		}
	}
	if row == nil {
		t.Fatalf("no process of the namespace reads %s (deleted)", tool)
	}
	if cmd := command(proc.Default, row, procs); cmd != "" {
		t.Errorf("census suggests %q, which takes the host's %s", cmd, tool)
	}
	if !strings.Contains(row.Reasons, "another mount namespace") {
		t.Errorf("the row does not say why it has no command: %q", row.Reasons)
	}
}
