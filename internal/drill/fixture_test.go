package drill

import (
	"os"
	"path/filepath"
	"testing"
)

// 'freeze __chain' run by hand (the first audit: it started a runaway
// chain with no cap) starts only under a cap the kernel enforces: a pids
// group of its own or an ancestor's with a number in pids.max, v1 or v2,
// or a binding RLIMIT_NPROC. Decided on fixture trees.
func TestTheFixtureStartsOnlyUnderACap(t *testing.T) {
	sys := t.TempDir()
	mk := func(dir, max string) {
		os.MkdirAll(filepath.Join(sys, dir), 0o755)
		if max != "" {
			os.WriteFile(filepath.Join(sys, dir, "pids.max"), []byte(max+"\n"), 0o644)
		}
	}
	mk("pids/user.slice", "max")
	mk("pids/drill-1/leaf", "max")
	mk("pids/drill-1", "600")
	mk("unified/ci", "10000")
	mk("unified/ci/t", "max")
	for _, c := range []struct {
		cgroup string
		nproc  bool
		capped bool
	}{
		{"12:pids:/user.slice\n0::/user.slice\n", false, false},
		{"12:pids:/user.slice\n0::/user.slice\n", true, true},
		{"12:pids:/drill-1/leaf\n0::/\n", false, true},
		{"0::/ci/t\n", false, true},
		{"12:pids:/\n0::/\n", false, false},
		{"12:pids:/../../etc\n", false, false},
	} {
		why := uncappedAt([]byte(c.cgroup), sys, c.nproc)
		if (why == "") != c.capped {
			t.Errorf("%q (nproc %v): capped %v, want %v (%s)", c.cgroup, c.nproc, why == "", c.capped, why)
		}
	}
}
