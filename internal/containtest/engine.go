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
	// made are the groups above the cap that the runtime will make in
	// the other hierarchies (runc makes a container's parent in every
	// v1 controller): under an outer freeze run, the cap's parent exists
	// only in pids and the unified hierarchy, and podman made it in
	// blkio, memory and the rest, where it was left after the suite.
	made []string
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
	for _, h := range hierarchies() {
		for d := filepath.Dir(c.relative); d != "/" && d != "."; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(h, d)); err != nil {
				r.made = append(r.made, filepath.Join(h, d))
			}
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
// the cap in every hierarchy, then the cap, and the groups above it
// that the runtime made; it fails the test if the cap is left.
func (r *rig) removeGroups() {
	for _, h := range hierarchies() {
		removeTree(filepath.Join(h, r.cap.relative))
	}
	// Deepest first (made lists each hierarchy's from the deepest up).
	for _, d := range r.made {
		os.Remove(d)
	}
	if _, err := os.Stat(r.cap.dir); err == nil {
		r.t.Errorf("containtest: the containers' cap %s is left behind", r.cap.dir)
	}
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
