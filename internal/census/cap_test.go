package census

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"freeze/internal/container"
)

// #52: census listed a container's 400 copies in a pids group at
// 400/400, and the only command it printed was for another user's chain
// elsewhere. The rows in the tightest group at its cap are tied to it,
// by the pids its cgroup.procs (and its children's) list.
func TestTieToCapNamesTheRowsInTheCappedGroup(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "ctr")
	os.Mkdir(sub, 0o755)
	os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte("10\n"), 0o644)
	os.WriteFile(filepath.Join(sub, "cgroup.procs"), []byte("11\n12\n"), 0o644)
	pod := container.Place{Runtime: "podman", ID: "44547caed35c0000000000000000000000000000000000000000000000000000"}
	runaway := rowKey{"/bin/runaway", 1, 2, pod}
	other := rowKey{"/tmp/u/chain", 1, 3, container.Place{}}
	procs := map[int]snap{10: {id: runaway}, 11: {id: runaway}, 12: {id: runaway}, 20: {id: other}, 21: {id: other}}
	rows := []Row{
		{Exe: "/tmp/u/chain", Dev: 1, Ino: 3, Count: 900, Suspect: true},
		{Exe: "/bin/runaway", Dev: 1, Ino: 2, Count: 3, Suspect: true, Runtime: "podman", Container: pod.ID},
	}
	tight := &PidsCgroup{Path: dir, Current: 400, Max: 400, Ratio: 1}
	tieToCap(tight, rows, procs)
	if rows[0].InTightest || !rows[1].InTightest {
		t.Fatalf("in the capped group: %v, %v; want the container's row only", rows[0].InTightest, rows[1].InTightest)
	}
	if len(tight.Holds) != 1 || !strings.HasPrefix(tight.Holds[0], "/bin/runaway in podman 44547caed35c") || !strings.HasSuffix(tight.Holds[0], ": 3") {
		t.Fatalf("the group holds %q, want the container's runaway, 3", tight.Holds)
	}
	// Not near its cap: nothing is tied.
	rows[1].InTightest = false
	calm := &PidsCgroup{Path: dir, Current: 10, Max: 400, Ratio: 0.025}
	tieToCap(calm, rows, procs)
	if rows[1].InTightest || len(calm.Holds) != 0 {
		t.Fatal("a group far from its cap was tied to a row")
	}
}
