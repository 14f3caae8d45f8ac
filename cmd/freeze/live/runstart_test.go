package live

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"freeze/internal/containtest"
	"freeze/internal/timeline"
)

// freeze run starts CMD itself, not through a second freeze (#51: the
// helper's start-up was most of what freeze run added to a short
// command), and CMD is in the run's groups from its start while no thread
// of freeze's is: on a v1 host the thread that forks CMD joins the v1
// groups for the fork alone and goes back while CMD is stopped at its
// exec. A thread left behind would take one of CMD's slots under
// pids.max, and the teardown would freeze and kill freeze itself.
func TestRunStartsTheCommandInItsGroupsAndStaysOut(t *testing.T) {
	nestsInHarness(t)
	bin := buildFreeze(t)
	dir := t.TempDir()
	sh, sleep := copyTool(t, dir, "sh"), copyTool(t, dir, "sleep")
	// One file, renamed into place once whole: its first line the
	// command's pid and its parent's (freeze run), then its groups. (A
	// first version wrote the pids after the groups' file, which the
	// test read as soon as it appeared: .ci/run's rehearsal 28 read no
	// pids.)
	said, goOn := filepath.Join(dir, "said"), filepath.Join(dir, "go")
	script := "{ echo $$ $PPID; cat /proc/$$/cgroup; } > " + said + ".tmp && mv " + said + ".tmp " + said +
		"; n=0; while [ ! -e " + goOn + " ] && [ $n -lt 600 ]; do " + sleep + " 0.05; n=$((n+1)); done"
	tl := filepath.Join(dir, "run.jsonl")
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 300, HopCap: 1, Timeout: 120 * time.Second,
		Command: []string{bin, "run", "--state-dir", filepath.Join(dir, "state"), "-t", tl, "--", sh, "-c", script}})
	var b []byte
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		var err error
		if b, err = os.ReadFile(said); err == nil {
			break
		}
	}
	first, lines, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(first)
	if lines == "" || len(f) != 2 {
		t.Fatalf("the command did not report its pids and groups (%q); stderr:\n%s", b, c.Stderr())
	}
	cmdPID, freezePID := f[0], f[1]
	freezeTasks, _ := os.ReadDir("/proc/" + freezePID + "/task")
	if len(freezeTasks) == 0 {
		t.Fatalf("freeze run (pid %s) has no tasks to look for", freezePID)
	}
	groups := 0
	for _, l := range strings.Split(strings.TrimSpace(lines), "\n") {
		p := strings.SplitN(l, ":", 3)
		if len(p) != 3 || !strings.Contains(p[2], "freeze-run-") {
			continue
		}
		root := cgroupRoot(t, p[0], p[1])
		if root == "" {
			continue
		}
		groups++
		group := filepath.Join(root, p[2])
		for _, file := range []string{"cgroup.procs", "tasks", "cgroup.threads"} {
			b, err := os.ReadFile(filepath.Join(group, file))
			if err != nil {
				continue
			}
			in := strings.Fields(string(b))
			if file == "cgroup.procs" && !slices.Contains(in, cmdPID) {
				t.Errorf("the command (pid %s) is not in its group %s: %v", cmdPID, group, in)
			}
			for _, task := range freezeTasks {
				if slices.Contains(in, task.Name()) {
					t.Errorf("freeze run's task %s (of pid %s) is in the command's group %s (%s: %v)", task.Name(), freezePID, group, file, in)
				}
			}
		}
	}
	if groups == 0 {
		t.Fatalf("the command is in no group of the run (freeze-run-*): %s", lines)
	}
	os.WriteFile(goOn, nil, 0o644)
	ws, ok := c.Exit(60 * time.Second)
	if !ok || ws.ExitStatus() != 0 {
		t.Fatalf("freeze run: exit %d (ended %v); stderr:\n%s", ws.ExitStatus(), ok, c.Stderr())
	}
	events, err := timeline.ReadFile(tl)
	if err != nil || len(events) == 0 {
		t.Fatalf("the run's timeline: %v", err)
	}
	if got := events[0].Fields["start"]; got != "direct" {
		t.Errorf("the command was started %q, want direct (freeze itself, no helper): %v", got, events[0].Fields)
	}
	t.Logf("the command in %d group(s), freeze's %d task(s) in none of them", groups, len(freezeTasks))
}

// cgroupRoot is where the hierarchy of a /proc/PID/cgroup line is
// mounted: "0" with no controllers is v2.
func cgroupRoot(t *testing.T, id, controllers string) string {
	if id == "0" && controllers == "" {
		b, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if i := strings.Index(l, " - cgroup2 "); i > 0 {
				return strings.Fields(l)[4]
			}
		}
		return ""
	}
	for _, ctl := range strings.Split(controllers, ",") {
		if ctl == "pids" || ctl == "freezer" {
			return "/sys/fs/cgroup/" + ctl
		}
	}
	return ""
}
