package containtest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/testenv"
)

// Podman is a container runtime of the test's own: Debian's podman with
// runc, its storage, run state and temporary files in the test's
// directory (so nothing of it outlives the test, and no image of the
// machine's is touched), containers only on --network none, each
// container's cgroup nested (--cgroup-parent) in a pids cgroup the
// harness made with a literal cap. Images are built offline: a rootfs of
// busybox-static and the test's own files, loaded with 'podman import'.
//
// Where crun is podman's default here it fails to start a container:
// "setrlimit RLIMIT_NOFILE: Operation not permitted" (podman asks for a
// limit of 1048576 and this sandbox's hard limit is 20,000). runc fails
// the same way; both run with --ulimit nofile=1024:1024, and the harness
// uses runc.
type Podman struct {
	*rig
	bin  string
	args []string // the global flags that keep it in dir
}

// A ContainerSpec is one container of a test. PidsLimit and Timeout are
// required and must be literals in the test.
type ContainerSpec struct {
	Image     string
	Command   []string
	PidsLimit int           // --pids-limit: the container's own cap
	Timeout   time.Duration // the harness kills the container when it passes
	// Pod, a pod uid: the container's cgroup sits where the kubelet's
	// cgroupfs driver puts a burstable pod's (.../kubepods/burstable/
	// pod<UID>/), nested in the harness's cap.
	Pod string
	// Volumes are podman's -v arguments (HOST:CONTAINER[:ro]): a
	// directory of the test's bound into the container, so that one file
	// (one identity) runs inside and out.
	Volumes []string
	// Privileged is podman's --privileged: the cgroup filesystem is then
	// writable inside (a runtime mounts it read-only by default).
	Privileged bool
	// HostPID is --pid host (a pod's hostPID: true).
	HostPID bool
	// Entrypoint replaces the image's (as a pod's command does); Command
	// is then its arguments.
	Entrypoint string
}

// A Container is a running container of a test's Engine.
type Container struct {
	ID    string
	Group string  // its cgroup path, as /proc/PID/cgroup reads it
	p     *Podman // podman's containers only
	e     engine
	v2    bool // the cap is a v2 group
	timer *time.Timer
}

// NewPodman sets up a runtime for one test, its containers capped
// together at capMax processes (a literal in the test). It skips the test
// where podman, runc or busybox-static is missing, or no cap can be made.
func NewPodman(t testing.TB, capMax int) *Podman {
	t.Helper()
	testenv.RequirePodman(t, "containers run as root here")
	bin, err := exec.LookPath("podman")
	if err != nil {
		t.Fatal(err)
	}
	// Short: podman refuses a runroot of more than 50 characters, and a
	// test's TempDir is longer.
	p := &Podman{rig: newRig(t, "pm", capMax), bin: bin}
	dir := p.dir
	p.args = []string{"--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "run"),
		"--tmpdir", filepath.Join(dir, "tmp"), "--volumepath", filepath.Join(dir, "volumes"),
		"--network-config-dir", filepath.Join(dir, "net"),
		"--storage-driver", "overlay", "--cgroup-manager", "cgroupfs", "--events-backend", "none", "--runtime", "runc"}
	// conmon double-forks and is re-parented to this test process (a
	// subreaper): the reaper takes it, and the container's processes
	// that outlive it.
	registerComm("conmon")
	t.Cleanup(p.cleanup)
	return p
}

// Podman runs the runtime's client with the test's flags, in its own
// process group, killed with it after a minute.
func (p *Podman) Podman(args ...string) (string, error) {
	return p.command(p.bin, append(append([]string{}, p.args...), args...)...)
}

// Name is "podman".
func (p *Podman) Name() string { return "podman" }

// Image builds an image of busybox-static (as /bin/busybox and /bin/sh)
// and files (its path in the image -> a file on the host, copied with
// its mode), imports it, and returns its name.
func (p *Podman) Image(files map[string]string) string {
	p.t.Helper()
	tar := p.tar(p.rootfs(files))
	name := fmt.Sprintf("localhost/containtest:%d", p.n)
	if out, err := p.Podman("import", "--quiet", tar, name); err != nil {
		p.t.Fatalf("podman import: %v\n%s", err, out)
	}
	return name
}

// Build builds an image from dockerfile with ctx as its context, offline
// (--pull=never: nothing may come from a registry), and returns its name.
func (p *Podman) Build(dockerfile, ctx string) string {
	p.t.Helper()
	p.n++
	name := fmt.Sprintf("localhost/containtest-build:%d", p.n)
	if out, err := p.Podman("build", "--pull=never", "--network", "none", "-f", dockerfile, "-t", name, ctx); err != nil {
		p.t.Fatalf("podman build -f %s: %v\n%s", dockerfile, err, out)
	}
	return name
}

// Exec runs a command in a running container and returns its exit code
// and output.
func (c *Container) Exec(args ...string) (int, string) {
	out, err := c.e.exec(c.ID, args)
	code, ok := exitCode(err)
	if !ok {
		return -1, out + err.Error()
	}
	return code, out
}

// exitCode is a command's exit code from its error: 0 for none, false
// when it did not run to an exit.
func exitCode(err error) (int, bool) {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, true
	case errors.As(err, &ee):
		return ee.ExitCode(), true
	}
	return -1, false
}

// Podman is the runtime the container runs in, if it is podman.
func (c *Container) Podman() *Podman { return c.p }

// Logs is what the container wrote so far.
func (c *Container) Logs() string { return c.e.logs(c.ID) }

func (p *Podman) exec(id string, args []string) (string, error) {
	return p.Podman(append([]string{"exec", id}, args...)...)
}

func (p *Podman) logs(id string) string {
	out, _ := p.Podman("logs", id)
	return out
}

// Run starts a container, detached, capped by its own --pids-limit and
// nested in the harness's cap, and returns once its first process runs.
func (p *Podman) Run(s ContainerSpec) *Container {
	p.t.Helper()
	out, err := p.Podman(p.runArgs(s, "-d")...)
	if err != nil {
		p.t.Fatalf("podman run: %v\n%s", err, out)
	}
	id := out[strings.LastIndexByte(out, '\n')+1:]
	c := &Container{ID: id, Group: filepath.Join(p.parent(s), "libpod-"+id), p: p, e: p}
	p.watch(c, s.Timeout)
	return c
}

// RunWait runs a container in the foreground until its command ends
// (within a minute, the client's own bound, else the harness kills it)
// and returns its exit code and output.
func (p *Podman) RunWait(s ContainerSpec) (int, string) {
	p.t.Helper()
	out, err := p.Podman(p.runArgs(s)...)
	code, ok := exitCode(err)
	if !ok {
		p.t.Fatalf("podman run: %v\n%s", err, out)
	}
	return code, out
}

func (p *Podman) parent(s ContainerSpec) string {
	if s.Pod != "" {
		return p.podParent(s.Pod)
	}
	return p.cap.relative
}

// runFlags are the flags of 'run' for the spec s, nested in parent, in
// the words podman and docker share. Limits this sandbox lets runc set:
// podman's defaults, and this process's own 96,364 processes, fail with
// EPERM; 32,768 (the pid space here) works. Root is not bound by
// RLIMIT_NPROC: the caps are --pids-limit and the harness's group.
func runFlags(s ContainerSpec, parent string) []string {
	args := []string{"--network", "none", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=32768:32768",
		"--pids-limit", strconv.Itoa(s.PidsLimit), "--cgroup-parent", parent}
	if s.Privileged {
		args = append(args, "--privileged")
	}
	if s.HostPID {
		args = append(args, "--pid", "host")
	}
	if s.Entrypoint != "" {
		args = append(args, "--entrypoint", s.Entrypoint)
	}
	for _, v := range s.Volumes {
		args = append(args, "-v", v)
	}
	return args
}

func (p *Podman) runArgs(s ContainerSpec, extra ...string) []string {
	p.t.Helper()
	if s.PidsLimit <= 0 || s.Timeout <= 0 {
		p.t.Fatal("containtest: a container needs PidsLimit and Timeout (literals in the test)")
	}
	parent := p.parent(s)
	args := append(append([]string{"run"}, extra...), runFlags(s, parent)...)
	args = append(args, s.Image)
	return append(args, s.Command...)
}

// dir is the container's group in the pids hierarchy (v1) or the
// unified one.
func (c *Container) dir() string {
	if c.v2 {
		return filepath.Join("/sys/fs/cgroup", c.Group)
	}
	return filepath.Join("/sys/fs/cgroup/pids", c.Group)
}

// PIDs lists the container's processes, from its cgroup, oldest first
// (its init is first while it lives).
func (c *Container) PIDs() []int {
	pids := procsUnder(c.dir())
	sort.Slice(pids, func(i, j int) bool {
		return startOf(pids[i]) < startOf(pids[j]) || startOf(pids[i]) == startOf(pids[j]) && pids[i] < pids[j]
	})
	return pids
}

// Population is how many processes the container holds.
func (c *Container) Population() int { return len(procsUnder(c.dir())) }

// WaitPopulation waits until the container holds at least n processes or
// within passes, and returns how many it holds.
func (c *Container) WaitPopulation(n int, within time.Duration) int {
	return waitAtLeast(c.Population, n, within)
}

// kill empties the container's group by SIGKILL of each member, until
// none is left or killDeadline passes.
func (c *Container) kill() { killUnder(c.dir()) }

// procsUnder lists the processes of dir and of every group below it.
func procsUnder(dir string) []int {
	var pids []int
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		b, _ := os.ReadFile(path)
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if pid, err := strconv.Atoi(sc.Text()); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

func killUnder(dir string) {
	end := time.Now().Add(killDeadline)
	for {
		pids := procsUnder(dir)
		if len(pids) == 0 || time.Now().After(end) {
			return
		}
		thawUnder(dir)
		for _, pid := range pids {
			unix.Kill(pid, unix.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// thawUnder thaws v1 freezer groups of the same path, which freeze may
// have frozen (a frozen process does not die of SIGKILL until thawed).
func thawUnder(dir string) {
	rel := strings.TrimPrefix(strings.TrimPrefix(dir, "/sys/fs/cgroup/pids"), "/sys/fs/cgroup")
	filepath.WalkDir(filepath.Join("/sys/fs/cgroup/freezer", rel), func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.WriteFile(filepath.Join(path, "freezer.state"), []byte("THAWED"), 0)
		}
		return nil
	})
}

func startOf(pid int) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ^uint64(0)
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ^uint64(0)
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 20 {
		return ^uint64(0)
	}
	n, _ := strconv.ParseUint(f[19], 10, 64)
	return n
}

// cleanup kills every container's processes by cgroup, removes the
// containers and images through podman, unmounts what its storage left
// mounted, and removes the cgroup directories podman made under the cap
// in every hierarchy, then the cap.
func (p *Podman) cleanup() {
	capDir := p.cap.dir
	killUnder(capDir)
	p.Podman("rm", "--force", "--time", "0", "--all")
	p.Podman("rmi", "--force", "--all")
	killUnder(capDir)
	p.removeGroups()
	p.removeDir()
}

// hierarchies are the mounted cgroup hierarchies: every v1 controller's
// (and name=systemd's) directory, and the unified one.
func hierarchies() []string {
	var out []string
	for _, pat := range []string{"/sys/fs/cgroup/*/cgroup.procs", "/sys/fs/cgroup/cgroup.procs"} {
		m, _ := filepath.Glob(pat)
		for _, f := range m {
			out = append(out, filepath.Dir(f))
		}
	}
	return out
}

// removeTree removes a cgroup directory and every group below it,
// deepest first.
func removeTree(dir string) {
	var dirs []string
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		end := time.Now().Add(10 * time.Second)
		for os.Remove(dirs[i]) != nil && time.Now().Before(end) {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// unmountUnder unmounts every mount below dir, deepest first (the
// overlay mounts of running containers, and c/storage's own).
func unmountUnder(dir string) {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var mps []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			mps = append(mps, f[4])
		}
	}
	sort.Slice(mps, func(i, j int) bool { return len(mps[i]) > len(mps[j]) })
	for _, mp := range mps {
		unix.Unmount(mp, unix.MNT_DETACH)
	}
}
