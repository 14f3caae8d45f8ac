package live

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"freeze/internal/containtest"
	"freeze/internal/exefile"
	"freeze/internal/proc"
	"freeze/internal/testenv"
)

// A process in a mount namespace of its own (as a container's is) runs
// DIR/worker from a tmpfs only it sees; on the host, DIR/worker is
// another file, a copy of the same program, running as a decoy. Its exe
// link reads DIR/worker either way. 'freeze --path /proc/PID/exe' and
// '--path /proc/PID/root/DIR/worker' must take the namespace's processes
// and leave the host's (#33: they followed the link's text, killed the
// host's copy and left the container's chain running, exit 0).
func TestPathThroughAProcessViewTakesItsFileNotTheHosts(t *testing.T) {
	testenv.RequireLive(t, "the mount namespace, and the harness's pids cap")
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare (util-linux)")
	}
	bin := buildFreeze(t)
	for _, how := range []string{"exe", "root"} {
		t.Run(how, func(t *testing.T) {
			base := t.TempDir()
			dir := filepath.Join(base, "opt")
			os.Mkdir(dir, 0o755)
			sleep := copyTool(t, base, "sleep")
			worker := filepath.Join(dir, "worker")
			// The "container": three processes of its own worker, which
			// only its mount namespace has, capped by the harness.
			ns := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Name: "ns", Cap: 20, HopCap: 1, Timeout: 120 * time.Second, Dir: base,
				Command: []string{unshare, "-m", "--propagation", "private", "/bin/sh", "-c",
					`mount -t tmpfs tmpfs "$1" && cp "$2" "$1/worker" && { "$1/worker" 100 & "$1/worker" 100 & "$1/worker" 100 & wait; }`, "sh", dir, sleep}})
			// The host's own worker at the same path, running.
			if err := exefile.Copy(sleep, worker); err != nil {
				t.Fatal(err)
			}
			host := exec.Command(worker, "100")
			host.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := host.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { syscall.Kill(-host.Process.Pid, syscall.SIGKILL); host.Wait() })
			hostFile, _ := proc.StatFile(worker)
			inNS := nsWorkers(t, ns, worker, hostFile, 3)
			target := fmt.Sprintf("/proc/%d/exe", inNS[0])
			if how == "root" {
				target = fmt.Sprintf("/proc/%d/root%s", inNS[0], worker)
			}
			fz := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 100, HopCap: 1, Timeout: 90 * time.Second,
				Command: []string{bin, "--path", target, "--timeline", filepath.Join(t.TempDir(), "t.jsonl")}})
			ws, ok := fz.Exit(60 * time.Second)
			if !ok || ws.ExitStatus() != 0 {
				t.Fatalf("freeze --path %s: exit %d (finished %v):\n%s", target, ws.ExitStatus(), ok, fz.Stderr())
			}
			// The host's worker is the test's own child: killed, it would
			// be a zombie until reaped.
			if st, err := proc.Default.ReadStat(host.Process.Pid); err != nil || st.Zombie() {
				t.Fatalf("the host's own %s was killed (%v):\n%s", worker, err, fz.Stderr())
			}
			for _, pid := range inNS {
				if st, err := proc.Default.ReadStat(pid); err == nil && !st.Zombie() {
					t.Fatalf("pid %d of the namespace's worker still runs:\n%s", pid, fz.Stderr())
				}
			}
			if !strings.Contains(fz.Stderr(), "not the same path on this host") {
				t.Errorf("freeze does not say it matched the process's own file:\n%s", fz.Stderr())
			}
		})
	}
}

// nsWorkers waits for n processes of the harness chain c that read
// worker in their exe link and are not the host's file, and returns
// their pids.
func nsWorkers(t *testing.T, c *containtest.Chain, worker string, host proc.File, n int) []int {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var pids []int
		for _, pid := range c.Survivors() {
			p, _, err := proc.Default.ExePath(pid)
			f, ferr := proc.Default.ExeFile(pid)
			if err == nil && ferr == nil && p == worker && (f.Dev != host.Dev || f.Ino != host.Ino) {
				pids = append(pids, pid)
			}
		}
		if len(pids) >= n {
			return pids
		}
		if time.Now().After(end) {
			t.Fatalf("%d of %d processes of the namespace's %s after 10 s", len(pids), n, worker)
		}
	}
}
