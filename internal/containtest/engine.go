package containtest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/exefile"
)

// An Engine is a container runtime of the test's own: podman, docker or
// containerd, its state in a directory of the test's, its containers
// nested in a pids cgroup the harness made with a literal cap. The same
// test runs against each (Engines), so that what freeze knows of a
// runtime's layout is tried against the runtime itself.
type Engine interface {
	// Name is the runtime as the test knows it: podman, docker or
	// containerd.
	Name() string
	// Image builds an image of busybox-static and files (its path in
	// the image -> a file on the host), offline, and returns its name.
	Image(files map[string]string) string
	// Run starts a container, detached, and returns once its first
	// process runs.
	Run(ContainerSpec) *Container
}

// Engines are the runtimes NewEngine starts.
var Engines = []string{"podman", "docker", "containerd"}

// NewEngine starts the runtime name for one test, its containers capped
// together at capMax processes (a literal in the test). It skips the
// test where the runtime is not installed.
func NewEngine(t testing.TB, name string, capMax int) Engine {
	t.Helper()
	switch name {
	case "podman":
		return NewPodman(t, capMax)
	case "docker":
		return NewDocker(t, capMax)
	case "containerd":
		return NewContainerd(t, capMax)
	}
	t.Fatalf("containtest: no engine %q (want one of %s)", name, strings.Join(Engines, ", "))
	return nil
}

// rig is what every engine has: the test, a short directory of its own
// (runtimes refuse long socket and run-root paths, and a test's TempDir
// is long), the cap, and the groups the runtime will make above it.
type rig struct {
	t   testing.TB
	dir string
	cap *pidsCap
	// lock is a shared flock on the cap's parent group: every engine
	// under the same parent (the test binaries of one go test, under an
	// outer freeze run) holds one, and the last to end is the one that
	// takes it exclusively (sweep).
	lock *os.File
	n    int
}

// newRig makes the cap (named containtest-KIND-...) and the directory
// (/tmp/ctKIND-...). It skips the test where no cap can be made.
func newRig(t testing.TB, kind string, capMax int) *rig {
	t.Helper()
	if _, err := exec.LookPath("busybox"); err != nil {
		t.Skip("no busybox on PATH: install Debian's busybox-static (.ci/run does): the images are built from it")
	}
	if capMax <= 0 {
		t.Fatal("containtest: an engine needs a cap (capMax)")
	}
	c, err := newPidsCap(fmt.Sprintf("containtest-%s-%d-%d", kind, os.Getpid(), time.Now().UnixNano()), capMax)
	if err != nil {
		t.Skipf("no cap for the containers: %v", err)
	}
	dir, err := os.MkdirTemp("", "ct"+kind+"-")
	if err != nil {
		c.remove()
		t.Fatal(err)
	}
	r := &rig{t: t, dir: dir, cap: c}
	if f, err := os.Open(filepath.Dir(c.dir)); err == nil {
		if unix.Flock(int(f.Fd()), unix.LOCK_SH) == nil {
			r.lock = f
		} else {
			f.Close()
		}
	}
	return r
}

// command runs a runtime's client in its own process group, killed with
// it after a minute, and returns its output.
func (r *rig) command(bin string, args ...string) (string, error) {
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	timer := time.AfterFunc(time.Minute, func() { unix.Kill(-cmd.Process.Pid, unix.SIGKILL) })
	err := cmd.Wait()
	timer.Stop()
	return strings.TrimSpace(out.String()), err
}

// rootfs lays out an image's files in a new directory of the rig's:
// busybox-static as /bin/busybox (and sh, sleep and ls), files (path in
// the image -> a file on the host, copied with its mode), and /tmp.
func (r *rig) rootfs(files map[string]string) string {
	r.t.Helper()
	r.n++
	rootfs := filepath.Join(r.dir, fmt.Sprintf("rootfs%d", r.n))
	busybox, _ := exec.LookPath("busybox")
	all := map[string]string{"/bin/busybox": busybox}
	for k, v := range files {
		all[k] = v
	}
	for dst, src := range all {
		if err := os.MkdirAll(filepath.Join(rootfs, filepath.Dir(dst)), 0o755); err != nil {
			r.t.Fatal(err)
		}
		if err := exefile.Copy(src, filepath.Join(rootfs, dst)); err != nil {
			r.t.Fatalf("image: copy %s: %v", src, err)
		}
	}
	for _, l := range []string{"sh", "sleep", "ls"} {
		os.Symlink("busybox", filepath.Join(rootfs, "bin", l))
	}
	os.MkdirAll(filepath.Join(rootfs, "tmp"), 0o1777)
	return rootfs
}

// tar writes dir's contents to dir.tar.
func (r *rig) tar(dir string) string {
	r.t.Helper()
	out := dir + ".tar"
	if b, err := exec.Command("tar", "-C", dir, "-cf", out, ".").CombinedOutput(); err != nil {
		r.t.Fatalf("image: tar: %v\n%s", err, b)
	}
	return out
}

// podParent is where the kubelet's cgroupfs driver puts a burstable
// pod's containers, nested in the cap.
func (r *rig) podParent(uid string) string {
	return filepath.Join(r.cap.relative, "kubepods", "burstable", "pod"+uid)
}

// watch arms the container's harness timeout and its kill at the test's
// cleanup, and waits until its first process runs.
func (r *rig) watch(c *Container, timeout time.Duration) {
	r.t.Helper()
	c.v2 = r.cap.v2
	c.timer = time.AfterFunc(timeout, func() {
		r.t.Errorf("container %s: harness timeout %v: killing it", c.ID[:12], timeout)
		c.kill()
	})
	// Its processes go at the cleanup of the test, before the
	// directories the test made before it: the engine's own cleanup
	// comes after those, and a guard in a container that still ran wrote
	// its metrics file into a TempDir that was being removed ("directory
	// not empty").
	r.t.Cleanup(func() {
		c.timer.Stop()
		c.kill()
	})
	for end := time.Now().Add(30 * time.Second); len(c.PIDs()) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			r.t.Fatalf("container %s: no process in its cgroup %s after 30s", c.ID[:12], c.Group)
		}
	}
}

// removeGroups removes the cgroup directories the runtime made under
// the cap in every hierarchy, then the cap, and fails the test if the
// cap is left; then, if this is the last engine under the cap's parent
// to end, sweeps what the runtimes made for all of them (sweep).
func (r *rig) removeGroups() {
	for _, h := range hierarchies() {
		removeTree(filepath.Join(h, r.cap.relative))
	}
	if _, err := os.Stat(r.cap.dir); err == nil {
		r.t.Errorf("containtest: the containers' cap %s is left behind", r.cap.dir)
	}
	if r.lock == nil {
		r.sweep()
		return
	}
	// Converting the shared lock drops it first: of two engines that
	// end at once, the second to try gets it.
	if unix.Flock(int(r.lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
		r.sweep()
	}
	r.lock.Close()
	r.lock = nil
}

// sweep removes what the runtimes make outside their caps, once no other
// engine under the same parent runs: the cap's parent groups in the
// hierarchies where only a runtime made them (runc makes a container's
// parent in every v1 controller: under an outer freeze run, whose group
// exists only in pids and the unified hierarchy, the containers' runtimes
// made /sys/fs/cgroup/blkio/freeze-run-* and the rest), and the
// directories dockerd and containerd make in /run. Only an empty group
// is removed (rmdir fails on one that holds a process or a group: the
// test's own, freeze run's); and each /run directory only as the
// harness's daemons leave it (removeRunDirs). Rehearsal 24 left the
// blkio group: each engine had removed only the parents it had found
// missing at its start, and of three at once the one that ended first
// had found them missing.
func (r *rig) sweep() {
	for _, h := range hierarchies() {
		for d := filepath.Dir(r.cap.relative); d != "/" && d != "."; d = filepath.Dir(d) {
			os.Remove(filepath.Join(h, d))
		}
	}
	removeRunDirs()
}

// removeDir unmounts what the runtime left mounted in the rig's
// directory, then removes it.
func (r *rig) removeDir() {
	unmountUnder(r.dir)
	if err := os.RemoveAll(r.dir); err != nil {
		r.t.Errorf("containtest: the runtime's directory: %v", err)
	}
}

// randomID is a container id as docker and containerd's CRI make them:
// 64 hexadecimal characters.
func randomID() string {
	b := make([]byte, 32)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// engine is what a Container asks of its runtime.
type engine interface {
	exec(id string, args []string) (string, error)
	logs(id string) string
}
