package contain

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// A live run's state file whose pid means nothing to the reaper (the
// second audit: freeze run in a PID namespace of its own recorded a pid
// local to it, and the host's --reap read the run as gone and killed its
// command): Reap leaves it alone while the run holds its lock, and
// takes it once the run is gone.
func TestReapLeavesALockedRunAlone(t *testing.T) {
	dir := t.TempDir()
	cp := &capped{kind: CapCgroup2, pids: "/sys/fs/cgroup/pids/freeze-run-0-test", cgroupFD: -1}
	s := newState(dir, "freeze-run-0-test", cp, []string{"sleep", "60"})
	if s.path == "" {
		t.Fatal("no state file was written")
	}
	// As read from outside the run's PID namespace: a pid that is no
	// process here. Rewritten in place, on the locked inode.
	var v map[string]any
	b, _ := os.ReadFile(s.path)
	json.Unmarshal(b, &v)
	v["freeze_pid"], v["freeze_start_ticks"] = 1<<22-1, 1
	b, _ = json.Marshal(v)
	if err := os.WriteFile(s.path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := Reap(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("Reap acted on a live run: %+v", got)
	}
	if _, err := os.Stat(s.path); err != nil {
		t.Fatalf("the live run's state file is gone: %v", err)
	}
	// The run ends without removing its file (killed): its lock goes,
	// and Reap finds it.
	path := s.path
	s.path = ""
	s.remove()
	got, err = Reap(dir)
	if err != nil || len(got) != 1 || !got[0].Gone {
		t.Fatalf("after the run: %+v, %v; want the one run, its groups gone", got, err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the dead run's state file is still there")
	}
	os.RemoveAll(filepath.Join(dir, "runs"))
}
