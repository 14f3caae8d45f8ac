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

// Docker is a Docker engine of the test's own: Debian's dockerd, on a
// containerd of the harness's (so that nothing of containerd's goes to
// /opt or /var/lib), its data root, exec root, socket and key in the
// rig's directory, no bridge and no iptables rules (containers run on
// --network none), storage vfs (no mount to leave behind), and the
// cgroupfs driver: a container's group is PARENT/ID, with the parent
// /CAP/docker (the default layout, /docker/ID, nested in the cap) or a
// pod's. Images come from 'docker load' of an archive the rig writes.
type Docker struct {
	*rig
	bin     string // the client of dockerd's own package
	host    string // unix://SOCKET
	ctd     *daemon
	dockerd *daemon
}

// NewDocker starts a Docker engine for one test, its containers capped
// together at capMax processes (a literal in the test). It skips the
// test where docker.io or busybox-static is missing, or no cap can be
// made.
func NewDocker(t testing.TB, capMax int) *Docker {
	t.Helper()
	testenv.RequireDocker(t, "containers run as root here")
	dockerd, err := exec.LookPath("dockerd")
	if err != nil {
		t.Fatal(err)
	}
	// The client of dockerd's package (Debian's docker.io puts it in
	// /usr/bin): another docker on PATH may speak a newer API.
	bin := "/usr/bin/docker"
	if _, err := os.Stat(bin); err != nil {
		if bin, err = exec.LookPath("docker"); err != nil {
			t.Skip("no docker client: install Debian's docker.io (.ci/run does)")
		}
	}
	d := &Docker{rig: newRig(t, "dk", capMax), bin: bin}
	t.Cleanup(d.cleanup)
	var sock string
	d.ctd, sock = d.startContainerd()
	// The daemon's trust key would go to /etc/docker/key.json.
	conf := filepath.Join(d.dir, "daemon.json")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`{"deprecated-key-path": %q}`, filepath.Join(d.dir, "key.json"))), 0o600); err != nil {
		t.Fatal(err)
	}
	d.host = "unix://" + filepath.Join(d.dir, "docker.sock")
	d.dockerd = d.startDaemon(dockerd, "--config-file", conf, "--data-root", filepath.Join(d.dir, "root"),
		"--exec-root", filepath.Join(d.dir, "exec"), "--pidfile", filepath.Join(d.dir, "docker.pid"), "-H", d.host,
		"--containerd", sock, "--bridge", "none", "--iptables=false", "--ip6tables=false", "--ip-masq=false",
		"--storage-driver", "vfs", "--exec-opt", "native.cgroupdriver=cgroupfs", "--log-level", "warn")
	d.waitReady(d.dockerd, func() error {
		out, err := d.Docker("version", "--format", "{{.Server.Version}}")
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	// A container's shim double-forks and is re-parented to this test
	// process (a subreaper): the reaper takes it when it ends.
	registerComm("containerd-shim")
	return d
}

// Docker runs the client against the test's engine, in its own process
// group, killed with it after a minute.
func (d *Docker) Docker(args ...string) (string, error) {
	return d.command(d.bin, append([]string{"--host", d.host}, args...)...)
}

// Name is "docker".
func (d *Docker) Name() string { return "docker" }

// Image loads an image of busybox-static and files with 'docker load'.
func (d *Docker) Image(files map[string]string) string {
	d.t.Helper()
	rootfs := d.rootfs(files)
	name := "containtest:" + strconv.Itoa(d.n)
	if out, err := d.Docker("load", "--input", d.dockerArchive(rootfs, name)); err != nil {
		d.t.Fatalf("docker load: %v\n%s", err, out)
	}
	return name
}

// Run starts a container, detached, capped by its own --pids-limit and
// nested in the harness's cap, and returns once its first process runs.
func (d *Docker) Run(s ContainerSpec) *Container {
	d.t.Helper()
	if s.PidsLimit <= 0 || s.Timeout <= 0 {
		d.t.Fatal("containtest: a container needs PidsLimit and Timeout (literals in the test)")
	}
	parent := filepath.Join(d.cap.relative, "docker")
	if s.Pod != "" {
		parent = d.podParent(s.Pod)
	}
	args := append([]string{"run", "-d"}, runFlags(s, parent)...)
	out, err := d.Docker(append(append(args, s.Image), s.Command...)...)
	if err != nil {
		d.t.Fatalf("docker run: %v\n%s", err, out)
	}
	l := strings.Fields(out)
	id := l[len(l)-1]
	c := &Container{ID: id, Group: filepath.Join(parent, id), e: d}
	d.watch(c, s.Timeout)
	return c
}

func (d *Docker) exec(id string, args []string) (string, error) {
	return d.Docker(append([]string{"exec", id}, args...)...)
}

func (d *Docker) logs(id string) string {
	out, _ := d.Docker("logs", id)
	return out
}

// cleanup kills every container's processes by cgroup, removes the
// containers, stops dockerd and containerd (and kills what they left:
// shims), and removes their groups, directories and sockets.
func (d *Docker) cleanup() {
	killUnder(d.cap.dir)
	if d.dockerd != nil && d.dockerd.alive() {
		if out, err := d.Docker("ps", "--all", "--quiet", "--no-trunc"); err == nil && len(strings.Fields(out)) > 0 {
			d.Docker(append([]string{"rm", "--force"}, strings.Fields(out)...)...)
		}
	}
	d.dockerd.stop(30 * time.Second)
	d.ctd.stop(30 * time.Second)
	killUnder(d.cap.dir)
	d.killMentioning()
	d.removeGroups()
	d.removeDir()
}
