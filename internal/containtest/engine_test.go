package containtest

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Each engine's test leaves nothing of its own: after a container ran,
// and the test's cleanups ran, no process names the engine's directory
// (a daemon, a shim, a container's process), the directory and its
// mounts are gone, and the cap and every group under it are gone in
// every hierarchy. The directories under /run that dockerd and
// containerd make whatever their flags say are shared with every engine
// on the machine (another package's tests run theirs at the same time:
// asserting on them here failed a CI rehearsal): .ci/run's last look
// checks them, once no test runs.
func TestEnginesLeaveNothing(t *testing.T) {
	for _, name := range Engines {
		t.Run(name, func(t *testing.T) {
			var r *rig
			var pids []int
			t.Run("run", func(t *testing.T) {
				e := NewEngine(t, name, 50)
				switch e := e.(type) {
				case *Podman:
					r = e.rig
				case *Docker:
					r = e.rig
				case *Containerd:
					r = e.rig
				}
				c := e.Run(ContainerSpec{Image: e.Image(nil), PidsLimit: 10, Timeout: 60 * time.Second,
					Command: []string{"/bin/sh", "-c", "sleep 100 & sleep 100 & sleep 100 & wait"}})
				if got := c.WaitPopulation(4, 20*time.Second); got != 4 {
					t.Errorf("the container holds %d processes, want its shell and 3 sleeps", got)
				}
				pids = c.PIDs()
			})
			if r == nil {
				t.Skip("the engine did not start (see the subtest)")
			}
			if got := naming([]byte(r.dir+"/"), nil); len(got) > 0 {
				t.Errorf("processes still name %s: %v", r.dir, got)
			}
			for _, pid := range pids {
				if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
					t.Errorf("the container's process %d is left", pid)
				}
			}
			if _, err := os.Stat(r.dir); err == nil {
				t.Errorf("the engine's directory %s is left", r.dir)
			}
			if b, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(b, []byte(" "+r.dir)) {
				t.Errorf("mounts under %s are left", r.dir)
			}
			for _, h := range hierarchies() {
				if _, err := os.Stat(filepath.Join(h, r.cap.relative)); err == nil {
					t.Errorf("the cap's group is left in %s", h)
				}
			}
		})
	}
}
