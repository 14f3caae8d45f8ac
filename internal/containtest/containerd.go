package containtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"freeze/internal/testenv"
)

// Containerd is a containerd of the test's own (every path in the rig's
// directory), driven by its own client, ctr, in the namespace the
// kubelet's CRI uses (k8s.io). ctr's cgroupfs layout is /NAMESPACE/ID;
// here /CAP/k8s.io/ID, or a pod's /CAP/kubepods/burstable/podUID/ID
// (ctr's --cgroup takes any path). Images come from 'ctr image import'
// of the archive the rig writes.
//
// ctr has no --pids-limit: the harness makes the container's group with
// its own pids.max (runc leaves a limit its spec does not name), the cap
// a kubelet's pod limit or docker's --pids-limit would be. runc's init,
// a Go program, needs pids for its threads before it execs the command
// ("read init-p: connection reset by peer" at a limit of 3), so a limit
// below initPids starts at initPids and is lowered once the task runs.
// The harness's cap holds all along.
// initPids is what runc's init needs: the thread it starts with and the
// Go runtime's.
const initPids = 16

type Containerd struct {
	*rig
	ctr  string
	sock string
	ns   string
	ctd  *daemon
	ids  []string
}

// NewContainerd starts a containerd for one test, its containers capped
// together at capMax processes (a literal in the test). It skips the
// test where containerd or busybox-static is missing, or no cap can be
// made.
func NewContainerd(t testing.TB, capMax int) *Containerd {
	t.Helper()
	testenv.RequireContainerd(t, "containers run as root here")
	ctr, err := exec.LookPath("ctr")
	if err != nil {
		t.Fatal(err)
	}
	c := &Containerd{rig: newRig(t, "cd", capMax), ctr: ctr, ns: "k8s.io"}
	t.Cleanup(c.cleanup)
	c.ctd, c.sock = c.startContainerd()
	registerComm("containerd-shim")
	return c
}

// Ctr runs ctr against the test's containerd in its namespace, in its
// own process group, killed with it after a minute.
func (c *Containerd) Ctr(args ...string) (string, error) {
	return c.command(c.ctr, append([]string{"--address", c.sock, "--namespace", c.ns}, args...)...)
}

// Name is "containerd".
func (c *Containerd) Name() string { return "containerd" }

// Image imports an image of busybox-static and files with 'ctr image
// import', and returns its name as containerd knows it.
func (c *Containerd) Image(files map[string]string) string {
	c.t.Helper()
	rootfs := c.rootfs(files)
	tag := "containtest:" + strconv.Itoa(c.n)
	if out, err := c.Ctr("image", "import", c.dockerArchive(rootfs, tag)); err != nil {
		c.t.Fatalf("ctr image import: %v\n%s", err, out)
	}
	return "docker.io/library/" + tag
}

// Run starts a task, detached, in a group of its own capped at the
// spec's PidsLimit and nested in the harness's cap, and returns once its
// first process runs.
func (c *Containerd) Run(s ContainerSpec) *Container {
	c.t.Helper()
	if s.PidsLimit <= 0 || s.Timeout <= 0 {
		c.t.Fatal("containtest: a container needs PidsLimit and Timeout (literals in the test)")
	}
	if s.HostPID {
		c.t.Fatal("containtest: HostPID is not built for containerd")
	}
	id := randomID()
	parent := filepath.Join(c.cap.relative, c.ns)
	if s.Pod != "" {
		parent = c.podParent(s.Pod)
	}
	group := filepath.Join(parent, id)
	dir, err := c.makeGroup(group)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.Itoa(max(s.PidsLimit, initPids))), 0)
	}
	if err != nil {
		c.t.Fatalf("containtest: the container's group %s: %v", group, err)
	}
	args := []string{"run", "--detach", "--log-uri", "file://" + filepath.Join(c.dir, id+".log"),
		"--cgroup", group, "--runc-root", filepath.Join(c.dir, "runc")}
	if s.Privileged {
		args = append(args, "--privileged")
	}
	for _, v := range s.Volumes {
		src, dst, opt := splitVolume(v)
		args = append(args, "--mount", "type=bind,src="+src+",dst="+dst+",options=rbind:"+opt)
	}
	args = append(args, s.Image, id)
	if s.Entrypoint != "" {
		args = append(args, s.Entrypoint)
	}
	if out, err := c.Ctr(append(args, s.Command...)...); err != nil {
		c.t.Fatalf("ctr run: %v\n%s", err, out)
	}
	c.ids = append(c.ids, id)
	if s.PidsLimit < initPids {
		if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.Itoa(s.PidsLimit)), 0); err != nil {
			c.t.Fatalf("containtest: the container's pids.max: %v", err)
		}
	}
	ct := &Container{ID: id, Group: group, e: c}
	c.watch(ct, s.Timeout)
	return ct
}

// makeGroup makes the container's group in the pids hierarchy (v1) or
// the unified one, and returns its directory.
func (c *Containerd) makeGroup(group string) (string, error) {
	root := "/sys/fs/cgroup/pids"
	if c.cap.v2 {
		root = "/sys/fs/cgroup"
	}
	rel, err := filepath.Rel(c.cap.relative, group)
	if err != nil {
		return "", err
	}
	dir := c.cap.dir
	for _, part := range splitPath(rel) {
		if c.cap.v2 {
			if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+pids"), 0); err != nil {
				return "", err
			}
		}
		dir = filepath.Join(dir, part)
		if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
			return "", err
		}
	}
	if dir != filepath.Join(root, group) {
		return "", fmt.Errorf("made %s, want %s", dir, filepath.Join(root, group))
	}
	return dir, nil
}

func splitPath(rel string) []string {
	var parts []string
	for rel != "." && rel != "/" && rel != "" {
		parts = append([]string{filepath.Base(rel)}, parts...)
		rel = filepath.Dir(rel)
	}
	return parts
}

// splitVolume reads podman's and docker's -v HOST:CONTAINER[:ro].
func splitVolume(v string) (src, dst, opt string) {
	opt = "rw"
	parts := append(strings.Split(v, ":"), "", "")
	src, dst = parts[0], parts[1]
	if parts[2] == "ro" {
		opt = "ro"
	}
	return src, dst, opt
}

func (c *Containerd) exec(id string, args []string) (string, error) {
	return c.Ctr(append([]string{"task", "exec", "--exec-id", fmt.Sprintf("x%d", time.Now().UnixNano()), id}, args...)...)
}

func (c *Containerd) logs(id string) string {
	b, _ := os.ReadFile(filepath.Join(c.dir, id+".log"))
	return string(b)
}

// cleanup kills every task's processes by cgroup, deletes the tasks,
// containers and images, stops containerd (and kills the shims it
// left), and removes the groups, directories and sockets.
func (c *Containerd) cleanup() {
	killUnder(c.cap.dir)
	if c.ctd != nil && c.ctd.alive() {
		for _, id := range c.ids {
			c.Ctr("task", "delete", "--force", id)
			c.Ctr("container", "delete", id)
		}
		if out, err := c.Ctr("image", "list", "--quiet"); err == nil && len(strings.Fields(out)) > 0 {
			c.Ctr(append([]string{"image", "remove"}, strings.Fields(out)...)...)
		}
	}
	c.ctd.stop(30 * time.Second)
	killUnder(c.cap.dir)
	c.killMentioning()
	c.removeGroups()
	c.removeDir()
}
