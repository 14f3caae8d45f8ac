package containtest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A daemon is a runtime's server that the harness started (dockerd,
// containerd): in a process group of its own, its output in a log file
// of the rig's, and killed by the kernel if the test binary dies first
// (Pdeathsig, from a thread that lives as long as the daemon: a thread
// that ends sends the signal, and Go ends a locked thread only with its
// goroutine).
type daemon struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func (r *rig) startDaemon(bin string, args ...string) *daemon {
	r.t.Helper()
	d := &daemon{name: filepath.Base(bin), log: filepath.Join(r.dir, filepath.Base(bin)+".log"), done: make(chan struct{})}
	started := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: see daemon
		f, err := os.Create(d.log)
		if err != nil {
			started <- err
			return
		}
		defer f.Close()
		d.cmd = exec.Command(bin, args...)
		d.cmd.Stdout, d.cmd.Stderr = f, f
		d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := d.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		d.cmd.Wait()
		close(d.done)
	}()
	if err := <-started; err != nil {
		r.t.Fatalf("containtest: start %s: %v", bin, err)
	}
	return d
}

// alive reports whether the daemon still runs.
func (d *daemon) alive() bool {
	select {
	case <-d.done:
		return false
	default:
		return true
	}
}

// tail is what the daemon wrote, its last 2,000 bytes.
func (d *daemon) tail() string {
	b, _ := os.ReadFile(d.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// stop asks the daemon to end (SIGTERM), and kills its process group
// when it has not within grace.
func (d *daemon) stop(grace time.Duration) {
	if d == nil || d.cmd == nil || d.cmd.Process == nil {
		return
	}
	pid := d.cmd.Process.Pid
	unix.Kill(pid, unix.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(grace):
	}
	unix.Kill(-pid, unix.SIGKILL)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
	}
}

// waitReady runs ready until it succeeds, for up to a minute, and fails
// the test with the daemon's log if it does not.
func (r *rig) waitReady(d *daemon, ready func() error) {
	r.t.Helper()
	var err error
	for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if err = ready(); err == nil {
			return
		}
		if !d.alive() {
			break
		}
	}
	r.t.Fatalf("containtest: %s did not answer: %v\n%s", d.name, err, d.tail())
}

// killMentioning kills every process whose command line names the rig's
// directory, and waits up to 10 s for them to go: what a daemon left
// running there (a containerd shim, started with the daemon's socket in
// it, outlives its daemon by design). The directory is the test's own,
// so nothing else names it.
func (r *rig) killMentioning() {
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		pids := naming([]byte(r.dir+"/"), nil)
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			unix.Kill(pid, unix.SIGKILL)
		}
	}
}

// naming lists the live processes (not zombies: their command line
// reads empty) whose command line holds mark and not except.
func naming(mark, except []byte) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, mark) && (except == nil || !bytes.Contains(b, except)) {
			out = append(out, pid)
		}
	}
	return out
}

// removeRunDirs removes what dockerd and containerd make under /run
// whatever their flags say: dockerd's plugin sockets' directory
// (/run/docker/plugins) and the shims' sockets' (containerd 1.6 puts them
// in /run/containerd/s). The last engine to end calls it (rig.sweep). It
// takes a directory only as the harness's daemons leave it: a machine's
// own dockerd or containerd keeps more there (its runtime state,
// containerd.sock), and its directories stay.
func removeRunDirs() {
	for _, d := range []struct{ top, sub string }{{"/run/docker", "plugins"}, {"/run/containerd", "s"}} {
		ents, err := os.ReadDir(d.top)
		if err != nil || len(ents) != 1 || ents[0].Name() != d.sub || !ents[0].IsDir() {
			continue
		}
		if os.Remove(filepath.Join(d.top, d.sub)) == nil {
			os.Remove(d.top)
		}
	}
}

// startContainerd starts a containerd whose every path is in the rig's
// directory (root, state, sockets, the opt plugin's directory, which
// defaults to /opt/containerd), without the CRI plugin, and returns its
// socket once it answers.
func (r *rig) startContainerd() (*daemon, string) {
	r.t.Helper()
	bin, err := exec.LookPath("containerd")
	if err != nil {
		r.t.Fatal(err)
	}
	sock := filepath.Join(r.dir, "ctd.sock")
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %q
[ttrpc]
  address = %q
[debug]
  address = %q
[plugins."io.containerd.internal.v1.opt"]
  path = %q
`, filepath.Join(r.dir, "ctd-root"), filepath.Join(r.dir, "ctd-state"), sock, sock+".ttrpc",
		filepath.Join(r.dir, "ctd-debug.sock"), filepath.Join(r.dir, "ctd-opt"))
	cfg := filepath.Join(r.dir, "containerd.toml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		r.t.Fatal(err)
	}
	d := r.startDaemon(bin, "--config", cfg, "--log-level", "warn")
	ctr, _ := exec.LookPath("ctr")
	r.waitReady(d, func() error {
		if _, err := os.Stat(sock); err != nil {
			return err
		}
		if ctr == "" {
			return nil
		}
		out, err := r.command(ctr, "--address", sock, "version")
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	return d, sock
}

// dockerArchive writes an image of one layer (rootfs) in the format
// 'docker save' writes and 'docker load' and 'ctr image import' read,
// tagged tag, and returns its path. No registry is reachable here.
func (r *rig) dockerArchive(rootfs, tag string) string {
	r.t.Helper()
	layer := r.tar(rootfs)
	img := rootfs + ".image"
	if err := os.Mkdir(img, 0o755); err != nil {
		r.t.Fatal(err)
	}
	diff, err := sha256File(layer)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := os.Rename(layer, filepath.Join(img, "layer.tar")); err != nil {
		r.t.Fatal(err)
	}
	config, _ := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH, "os": "linux",
		"config": map[string]any{"Cmd": []string{"/bin/sh"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + diff}},
	})
	sum := sha256.Sum256(config)
	configName := hex.EncodeToString(sum[:]) + ".json"
	manifest, _ := json.Marshal([]map[string]any{{"Config": configName, "RepoTags": []string{tag}, "Layers": []string{"layer.tar"}}})
	for name, b := range map[string][]byte{configName: config, "manifest.json": manifest} {
		if err := os.WriteFile(filepath.Join(img, name), b, 0o644); err != nil {
			r.t.Fatal(err)
		}
	}
	return r.tar(img)
}

func sha256File(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
