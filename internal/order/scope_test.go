package order

import (
	"os"
	"testing"

	"freeze/internal/container"
	"freeze/internal/proc"
)

// A container's path is resolved through one of its processes' root
// (/proc/PID/root), by a pid read earlier. If that pid is no longer the
// container's process (it exited, and the pid went to a process of the
// host or of another container), its root is not the container's: the
// resolve must not count (the third audit, inferred). Here the member's
// pid is this test's own, on the host, listed as a container's.
func TestResolveInChecksTheContainerAfterTheOpen(t *testing.T) {
	place, err := container.Of(proc.Default, os.Getpid())
	if err != nil || !place.Host() {
		t.Skipf("this test runs in %v (%v): it needs to run on the host", place, err)
	}
	m := container.Member{Place: container.Place{Runtime: "podman", ID: "44547caed35c0000000000000000000000000000000000000000000000000000"}, PIDs: []int{os.Getpid()}}
	if tg, ok := resolveIn(m, "/bin/true"); ok {
		t.Fatalf("resolved %s in %s through pid %d, a process of the host: %+v", "/bin/true", m.Place, os.Getpid(), tg.File)
	}
	// The host's own place resolves as before.
	m.Place = place
	if _, ok := resolveIn(m, "/bin/true"); !ok {
		t.Fatal("/bin/true through this process, in its own place: not resolved")
	}
}
