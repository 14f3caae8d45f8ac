package autopilot

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"freeze/internal/container"
	"freeze/internal/exefile"
	"freeze/internal/gate"
	"freeze/internal/match"
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
	a := &Growth{N: 1}
	if real, ok, why := a.allowed(tool, false, key, container.Place{}, 0); !ok || real.Path != tool || real.File.Ino != judged.Ino {
		t.Fatalf("the judged file itself: %+v %v (%s)", real, ok, why)
	}
	// The swap: the same path now a symlink to a program elsewhere.
	os.Remove(tool)
	if err := os.Symlink("/bin/true", tool); err != nil {
		t.Fatal(err)
	}
	real, ok, why := a.allowed(tool, false, key, container.Place{}, 0)
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

// The second audit's three chains --auto never held: judged by name, a
// user's binary called cron was "a system daemon"; a deleted binary (the
// README's rebuilt test cache) failed its lstat. The third audit's S6:
// the judge and the order disagreed (the judge by identity, the order by
// name), so the guard asked 40 times in 8 s and never held. One judge
// now (match.Refuse): a copy of a daemon's file under a user's cache is
// the user's, for both; the system's own daemon and interpreter are
// refused by both.
func TestAutoAndTheOrderJudgeAlike(t *testing.T) {
	cache := filepath.Join(t.TempDir(), "home", "u", ".cache", "bin")
	os.MkdirAll(cache, 0o755)
	mine := filepath.Join(cache, "cron")
	if err := exefile.Copy("/bin/true", mine); err != nil {
		t.Fatal(err)
	}
	cases := map[string]bool{mine: true, "/bin/sh": false}
	for _, d := range []string{"/usr/bin/su", "/bin/su", "/usr/sbin/cron", "/lib/systemd/systemd"} {
		if _, err := os.Stat(d); err == nil {
			cases[d] = false
			break
		}
	}
	if len(cases) < 3 {
		t.Log("no system daemon found (su, cron, systemd): only the user's copy and the interpreter are judged")
	}
	a := &Growth{N: 1}
	for path, want := range cases {
		tg, err := match.Resolve(path)
		if err != nil {
			t.Fatal(err)
		}
		_, ok, why := a.allowed(path, false, gate.KeyOf(tg.File), container.Place{}, 0)
		refusal := match.Refuse(proc.Default, tg, false, false)
		if ok != want {
			t.Errorf("%s: the judge allows %v (%s), want %v", path, ok, why, want)
		}
		if ok != (refusal == nil) {
			t.Errorf("%s: the judge allows %v, the order refuses %v: they disagree", path, ok, refusal)
		}
	}
}

// A chain whose file was deleted under it (the README's rebuilt test
// cache) is found through its processes' /proc/PID/exe: --auto acts on
// it, by the identity it judged.
func TestAutoFollowsADeletedBinary(t *testing.T) {
	dir := t.TempDir()
	gone := filepath.Join(dir, "gone")
	if err := exefile.Copy("/bin/sleep", gone); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gone, "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
	var judged proc.File
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if p, _, err := proc.Default.ExePath(cmd.Process.Pid); err == nil && p == gone {
			judged, _ = proc.Default.ExeFile(cmd.Process.Pid)
			break
		}
		if time.Now().After(end) {
			t.Fatal("the process never ran the copy")
		}
	}
	os.Remove(gone)
	a := &Growth{N: 1}
	tg, ok, why := a.allowed(gone, true, gate.KeyOf(judged), container.Place{}, 0)
	if !ok || !tg.Deleted || tg.File.Ino != judged.Ino {
		t.Fatalf("a deleted binary: %+v, act %v (%s)", tg, ok, why)
	}
}
