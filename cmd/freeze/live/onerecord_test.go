package live

import (
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"time"

	"freeze/internal/containtest"
	"freeze/internal/testenv"
	"freeze/internal/timeline"
)

// recordShape is what a run's record says whatever its numbers: the
// steps it took (each once), the fields of its start, and how it ended.
// The drill's own lines (drill, drill-end) are left out: the practice
// chain is the only thing the drill says in its own words.
func recordShape(t *testing.T, path string) (steps []string, start []string, end timeline.Step) {
	t.Helper()
	events, err := timeline.ReadFile(path)
	if err != nil {
		t.Fatalf("timeline %s: %v", path, err)
	}
	seen := map[string]bool{}
	for _, e := range events {
		if e.Step == timeline.StepDrill || e.Step == timeline.StepDrillEnd {
			continue
		}
		if !seen[string(e.Step)] {
			seen[string(e.Step)] = true
			steps = append(steps, string(e.Step))
		}
		if e.Step == timeline.StepStart {
			for k := range e.Fields {
				start = append(start, k)
			}
		}
		if e.Step.Ends() && end == "" {
			end = e.Step
		}
	}
	sort.Strings(steps)
	sort.Strings(start)
	return steps, start, end
}

// The command line, a guard's request and the drill go through one
// door (internal/stop's Run), so the same run leaves the same record:
// the same steps, the same start fields, the same end. Before, the drill
// built its own run: no peak-memory record, no run lock, no hidepid rule.
func TestOneRecordForEveryWayIn(t *testing.T) {
	testenv.RequireLive(t, "the guard's run directory and the chains' pids cgroups")
	bin := buildFreeze(t)
	tls := t.TempDir()
	runs := map[string]string{"cli": filepath.Join(tls, "cli.jsonl"), "guard": filepath.Join(tls, "guard.jsonl"), "drill": filepath.Join(tls, "drill.jsonl")}

	c := treeAtCap(t, 100, 50*time.Millisecond)
	cli := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 50, HopCap: 1, Timeout: 120 * time.Second,
		Command: []string{bin, "--no-guard", "--path", c.Path, "--timeline", runs["cli"]}})
	if ws, ok := cli.Exit(110 * time.Second); !ok || ws.ExitStatus() != 0 {
		t.Fatalf("the command line's run: exit %d (finished %v):\n%s", ws.ExitStatus(), ok, cli.Stderr())
	}

	_, dir := startGuard(t, bin)
	c2 := treeAtCap(t, 100, 50*time.Millisecond)
	asker := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 50, HopCap: 1, Timeout: 120 * time.Second,
		Command: []string{bin, "--path", c2.Path, "--run-dir", dir, "--timeline", runs["guard"]}})
	if ws, ok := asker.Exit(110 * time.Second); !ok || ws.ExitStatus() != 0 {
		t.Fatalf("the guard's run: exit %d (finished %v):\n%s", ws.ExitStatus(), ok, asker.Stderr())
	}

	tmp := filepath.Join(t.TempDir(), "drill-tmp")
	if err := os.Mkdir(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	d := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Env: []string{"TMPDIR=" + tmp}, Cap: 2500, HopCap: 1, Timeout: 120 * time.Second,
		Command: []string{bin, "drill", "--size", "100", "--shape", "tree", "--timeline", runs["drill"]}})
	if ws, ok := d.Exit(110 * time.Second); !ok || ws.ExitStatus() != 0 {
		t.Fatalf("the drill: exit %d (finished %v):\n%s", ws.ExitStatus(), ok, d.Stderr())
	}

	wantSteps, wantStart, wantEnd := recordShape(t, runs["cli"])
	if wantEnd != timeline.StepZero || !reflect.DeepEqual(wantSteps, nonEmpty(wantSteps, string(timeline.StepMemory))) {
		t.Fatalf("the command line's record ends %q with steps %v: want zero, and a memory step", wantEnd, wantSteps)
	}
	for _, way := range []string{"guard", "drill"} {
		steps, start, end := recordShape(t, runs[way])
		if !reflect.DeepEqual(steps, wantSteps) {
			t.Errorf("%s: steps %v; the command line's %v", way, steps, wantSteps)
		}
		if !reflect.DeepEqual(start, wantStart) {
			t.Errorf("%s: start fields %v; the command line's %v", way, start, wantStart)
		}
		if end != wantEnd {
			t.Errorf("%s: ended %q; the command line's %q", way, end, wantEnd)
		}
	}
}

// nonEmpty returns steps if it holds want, else nil.
func nonEmpty(steps []string, want string) []string {
	for _, s := range steps {
		if s == want {
			return steps
		}
	}
	return nil
}
