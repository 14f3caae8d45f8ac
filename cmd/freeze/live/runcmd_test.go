package live

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"freeze/internal/contain"
	"freeze/internal/containtest"
	"freeze/internal/exefile"
	"freeze/internal/proc"
	"freeze/internal/testenv"
	"freeze/internal/timeline"
)

// The control tests of freeze run (#26). Each runs freeze run inside the
// harness's own capped group; freeze run's group nests inside it (see
// nestsInHarness), so the harness's literal cap holds over everything the
// command starts. The kernel matrix runs them again in its VMs, where
// the cap is cgroup v2's.

// nestsInHarness skips where freeze run's group would not nest inside
// the harness's cap: without root there is no harness cap. (As root it
// nests: on a v1 or hybrid host freeze run's pids group goes inside
// freeze's own, which is the harness's; on a cgroup v2 host the harness
// starts the chain in a leaf inside its capped group, and freeze run's
// group goes beside freeze's own group, so inside the cap too.)
func nestsInHarness(t *testing.T) {
	t.Helper()
	testenv.RequireLive(t, "the harness's pids cgroup, which caps freeze run and all it starts")
}

// copyTool copies a system tool into the test's own directory: the
// processes a test starts and looks for run that copy only.
func copyTool(t *testing.T, dir, name string) string {
	t.Helper()
	src := "/bin/" + name
	dst := filepath.Join(dir, name)
	if err := exefile.Copy(src, dst); err != nil {
		t.Fatal(err)
	}
	return dst
}

// running lists the live processes whose executable is path.
func running(t *testing.T, path string) []int {
	t.Helper()
	want, err := proc.StatFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pids, _ := proc.Default.PIDs(nil)
	var out []int
	for _, pid := range pids {
		f, err := proc.Default.ExeFile(pid)
		if err != nil || f.Dev != want.Dev || f.Ino != want.Ino {
			continue
		}
		if st, err := proc.Default.ReadStat(pid); err == nil && !st.Zombie() {
			out = append(out, pid)
		}
	}
	return out
}

// runUnder starts freeze run through the harness and waits for it.
func runUnder(t *testing.T, cmd []string, within time.Duration) (*containtest.Chain, int) {
	t.Helper()
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 300, HopCap: 1, Timeout: 120 * time.Second, Command: cmd})
	ws, ok := c.Exit(within)
	if !ok {
		t.Fatalf("freeze run did not return within %v; stderr:\n%s", within, c.Stderr())
	}
	return c, ws.ExitStatus()
}

// A command that leaves a sleeping grandchild in a new session, holding
// the pipe its caller reads, leaves nothing: freeze run returns within
// --wait-delay, says how the grandchild left, kills it, and the reader's
// pipe closes. Without the teardown, cat waits 60 s for the sleep.
func TestRunLeavesNothingOfASessionEscape(t *testing.T) {
	nestsInHarness(t)
	bin := buildFreeze(t)
	dir := t.TempDir()
	sleep := copyTool(t, dir, "sleep")
	tl := filepath.Join(dir, "run.jsonl")
	report, said := filepath.Join(dir, "report.json"), filepath.Join(dir, "said")
	inner := "setsid " + sleep + " 60 & echo started"
	t0 := time.Now()
	c, _ := runUnder(t, []string{"/bin/sh", "-c", bin + " run --wait-delay 500ms --report " + report + " -t " + tl + " -- /bin/sh -c '" + inner + "' 2>" + said + " | cat"}, 30*time.Second)
	took := time.Since(t0)
	var r contain.ReportJSON
	b, err := os.ReadFile(report)
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	stderr, _ := os.ReadFile(said)
	if err != nil || r.Exit != 122 || !strings.Contains(c.Stdout(), "started") {
		t.Fatalf("report %+v (%v), want exit %d; stdout %q; stderr:\n%s", r, err, 122, c.Stdout(), stderr)
	}
	if took > 15*time.Second {
		t.Errorf("freeze run and its reader took %v: the leftover held the pipe", took)
	}
	if !strings.Contains(string(stderr), "left its session (setsid)") {
		t.Errorf("the leftover is not said to have left its session:\n%s", stderr)
	}
	if left := running(t, sleep); len(left) > 0 {
		t.Fatalf("the grandchild is alive after freeze run returned: %v", left)
	}
	events, err := timeline.ReadFile(tl)
	if err != nil {
		t.Fatal(err)
	}
	h := timeline.Summarize("", tl, events)
	if h.Outcome != string(timeline.StepRunEnd) || h.Exit != 122 || h.Survivors != 1 {
		t.Errorf("the timeline's summary: outcome %s, exit %d, leftovers %d", h.Outcome, h.Exit, h.Survivors)
	}
}

// A leftover that listens is named with its port: a leftover server is
// what makes the next run's bind fail. The listener is a copy of this
// test binary, in the test's own directory.
func TestRunNamesALeftoversPort(t *testing.T) {
	nestsInHarness(t)
	bin := buildFreeze(t)
	dir := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	listen := filepath.Join(dir, "freeze-test-listen")
	if err := exefile.Copy(self, listen); err != nil {
		t.Fatal(err)
	}
	portFile, report := filepath.Join(dir, "port"), filepath.Join(dir, "report.json")
	inner := "setsid " + listen + " " + portFile + " & while [ ! -s " + portFile + " ]; do sleep 0.05; done"
	c, code := runUnder(t, []string{bin, "run", "--wait-delay", "300ms", "--report", report, "-t", filepath.Join(dir, "run.jsonl"), "--", "/bin/sh", "-c", inner}, 60*time.Second)
	port, _ := os.ReadFile(portFile)
	var r contain.ReportJSON
	b, err := os.ReadFile(report)
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	if err != nil || code != 122 || len(port) == 0 {
		t.Fatalf("exit %d, report %+v (%v), port %q; stderr:\n%s", code, r, err, port, c.Stderr())
	}
	want := "tcp 127.0.0.1:" + string(port)
	var found bool
	for _, l := range r.Leftovers {
		found = found || slices.Contains(l.Ports, want)
	}
	if !found || !strings.Contains(c.Stderr(), "listening on "+want) {
		t.Errorf("the leftover's port %s is not named: report %+v; stderr:\n%s", want, r.Leftovers, c.Stderr())
	}
	if left := running(t, listen); len(left) > 0 {
		t.Fatalf("the listener is alive after freeze run returned: %v", left)
	}
}

// A fork bomb on a copy of bash, which only the cap can stop: under
// --max-procs 64 freeze run returns, says the cap fired, and leaves
// nothing running the copy.
func TestRunCapStopsAForkBomb(t *testing.T) {
	nestsInHarness(t)
	bin := buildFreeze(t)
	dir := t.TempDir()
	bash := copyTool(t, dir, "bash")
	report := filepath.Join(dir, "report.json")
	c, code := runUnder(t, []string{bin, "run", "--max-procs", "64", "--wait-delay", "2s", "--report", report, "-t", filepath.Join(dir, "run.jsonl"),
		"--", bash, "-c", ":(){ :|:& };:"}, 60*time.Second)
	if code != 123 {
		t.Fatalf("exit %d, want %d (the cap fired); stderr:\n%s", code, 123, c.Stderr())
	}
	if !strings.Contains(c.Stderr(), "the cap fired") {
		t.Errorf("freeze run does not say the cap fired:\n%s", c.Stderr())
	}
	// And what hit it: the group as the cap fired, by executable (#36).
	if !regexp.MustCompile(`when it first fired, the group held: \d+ x ` + regexp.QuoteMeta(bash)).MatchString(c.Stderr()) {
		t.Errorf("freeze run does not name what the group held when the cap fired (%s):\n%s", bash, c.Stderr())
	}
	if left := running(t, bash); len(left) > 0 {
		t.Fatalf("%d processes of the bomb alive after freeze run returned", len(left))
	}
	var r contain.ReportJSON
	b, err := os.ReadFile(report)
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	if err != nil || r.Refused == 0 || !r.Zero || r.Peak > 64 {
		t.Errorf("report %+v (%v): want forks refused, zero, a peak within 64", r, err)
	}
	// The kernel matrix sets the kind its VMs must give (cgroup2: a
	// unified host that hands out pids), so the v2 path is proven there.
	if want := os.Getenv("FREEZE_TEST_WANT_CAP"); want != "" && r.Cap != want {
		t.Errorf("capped by %s (%s), want %s", r.Cap, r.CapWhy, want)
	}
}

// The cap that first fires in the grace, after the command exited, is
// named too: the command leaves a shell that waits, then starts sleeps to
// past the cap (a shell that retries a refused fork, as bash does,
// starts the rest as the first exit), and all of them are gone before
// the grace ends. freeze
// run looked only before and after the grace, so it counted the
// refusals and named nothing (the 5.10 flake's shape, made certain).
func TestRunNamesACapThatFiredInTheGrace(t *testing.T) {
	nestsInHarness(t)
	bin := buildFreeze(t)
	dir := t.TempDir()
	sh := copyTool(t, dir, "sh")
	sleep := copyTool(t, dir, "sleep")
	script := `(` + sleep + ` 0.3; i=0; while [ $i -lt 40 ]; do ` + sleep + ` 3 & i=$((i+1)); done; wait) & exit 0`
	report := filepath.Join(dir, "report.json")
	c, code := runUnder(t, []string{bin, "run", "--max-procs", "32", "--wait-delay", "30s", "--report", report, "-t", filepath.Join(dir, "run.jsonl"),
		"--", sh, "-c", script}, 60*time.Second)
	if code != 123 {
		t.Fatalf("exit %d, want %d (the cap fired); stderr:\n%s", code, 123, c.Stderr())
	}
	if !regexp.MustCompile(`when it first fired, the group held: \d+ x ` + regexp.QuoteMeta(sleep)).MatchString(c.Stderr()) {
		t.Errorf("freeze run does not name what the group held when the cap fired in the grace (%s):\n%s", sleep, c.Stderr())
	}
	if strings.Contains(c.Stderr(), "left behind") {
		t.Errorf("the sleeps were gone before the grace ended, yet freeze run lists leftovers:\n%s", c.Stderr())
	}
}

// A command that never started says so, with a shell's codes: 127 for
// one not found, 126 for one found that cannot run; and a command that
// ran and exited 127 is not read as one that never started. It said
// "the command exited 127" for all three, and 127 for the second.
func TestRunSaysACommandThatNeverStarted(t *testing.T) {
	nestsInHarness(t)
	bin := buildFreeze(t)
	dir := t.TempDir()
	plain := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(plain, []byte("data\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sh := copyTool(t, dir, "sh")
	for _, tc := range []struct {
		cmd     []string
		code    int
		started bool
	}{
		{[]string{filepath.Join(dir, "no-such-command")}, 127, false},
		{[]string{plain}, 126, false},
		{[]string{sh, "-c", "exit 127"}, 127, true},
	} {
		report := filepath.Join(dir, "report.json")
		c, code := runUnder(t, append([]string{bin, "run", "--report", report, "-t", filepath.Join(dir, "run.jsonl"), "--"}, tc.cmd...), 60*time.Second)
		said := strings.Contains(c.Stderr(), "the command did not start (")
		if code != tc.code || said == tc.started {
			t.Errorf("%q: exit %d, said it did not start: %v; want exit %d, started %v; stderr:\n%s", tc.cmd, code, said, tc.code, tc.started, c.Stderr())
		}
		var r contain.ReportJSON
		if b, err := os.ReadFile(report); err != nil || json.Unmarshal(b, &r) != nil || (r.NotStarted == "") != tc.started {
			t.Errorf("%q: the report's not_started is %q (%v), want it set: %v", tc.cmd, r.NotStarted, err, !tc.started)
		}
	}
}

// "Started by" is the starter as it was at the fork: a shell that starts
// a helper and then execs another program still reads as the shell (it
// read as the program it became), and a starter whose file is gone since
// is marked "(deleted)".
func TestRunNamesTheStarterAsItWasAtTheFork(t *testing.T) {
	nestsInHarness(t)
	bin := buildFreeze(t)
	dir := t.TempDir()
	sh := copyTool(t, dir, "sh")
	sleep := copyTool(t, dir, "sleep")
	tr := copyTool(t, dir, "true")
	gone := filepath.Join(dir, "starter")
	if err := exefile.Copy("/bin/sh", gone); err != nil {
		t.Fatal(err)
	}
	script := gone + ` -c '` + sleep + ` 60 >/dev/null 2>&1 & exec ` + tr + ` marker-arg'; rm -f ` + gone
	c, code := runUnder(t, []string{bin, "run", "--wait-delay", "300ms", "-t", filepath.Join(dir, "run.jsonl"), "--", sh, "-c", script}, 60*time.Second)
	if code != 122 {
		t.Fatalf("exit %d, want 122 (a leftover); stderr:\n%s", code, c.Stderr())
	}
	// Where freeze's reader lagged behind both of the starter's execs
	// (rehearsal 33, the 6.1 boot under stress), /proc showed the
	// program it became. The exec's event carries no name (an exec sends
	// no comm event), so freeze, seeing the next exec's event queued
	// after its read, says "a program" whose argv it could not read
	// (rehearsals 45 and 46); so it does where the exec came between its
	// reads of the executable and the argv (rehearsal 72, 6.12). Where it lagged further, and found that
	// program exiting (rehearsal 38, the same boot), it says it was gone
	// before it could be read.
	read := regexp.MustCompile(`left behind: pid \d+ ` + regexp.QuoteMeta(sleep) + ` 60 .*started by pid \d+ ` + regexp.QuoteMeta(gone) + ` -c [^;]* \(deleted\)`).MatchString(c.Stderr())
	lagged := regexp.MustCompile(`left behind: pid \d+ ` + regexp.QuoteMeta(sleep) + ` 60 .*started by pid \d+ (starter|a program) \((it exec'd again before freeze could read its argv|exited before freeze could read it[^;]*); forked from: `).MatchString(c.Stderr())
	if !read && !lagged {
		t.Errorf("the leftover does not name its starter as it was at the fork (its argv, marked deleted, or its name where the reader lagged):\n%s", c.Stderr())
	}
	if lagged {
		t.Log("freeze's reader lagged behind the starter's two execs: its argv not read, and the program it became not taken for it")
	}
	if strings.Contains(c.Stderr(), "started by pid") && regexp.MustCompile(`started by pid \d+ `+regexp.QuoteMeta(tr)).MatchString(c.Stderr()) {
		t.Errorf("the leftover names what its starter became after the fork:\n%s", c.Stderr())
	}
}

// The command's own status passes through when nothing is left: 0, 3,
// and 128+15 for a command killed by SIGTERM.
func TestRunPassesTheStatusThrough(t *testing.T) {
	nestsInHarness(t)
	bin := buildFreeze(t)
	dir := t.TempDir()
	for script, want := range map[string]int{"exit 0": 0, "exit 3": 3, "kill -TERM $$": 128 + 15} {
		_, code := runUnder(t, []string{bin, "run", "-t", filepath.Join(dir, strconv.Itoa(want)+".jsonl"), "--", "/bin/sh", "-c", script}, 30*time.Second)
		if code != want {
			t.Errorf("%q: exit %d, want %d", script, code, want)
		}
	}
}

// SIGTERM to freeze run is passed on to the command's group, and then
// nothing is left.
func TestRunSIGTERMLeavesNothing(t *testing.T) {
	nestsInHarness(t)
	bin := buildFreeze(t)
	dir := t.TempDir()
	sleep := copyTool(t, dir, "sleep")
	tl := filepath.Join(dir, "run.jsonl")
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 300, HopCap: 1, Timeout: 120 * time.Second,
		Command: []string{bin, "run", "--wait-delay", "500ms", "-t", tl, "--", "/bin/sh", "-c", sleep + " 60 & " + sleep + " 60; wait"}})
	waitRunning(t, sleep, 2)
	if err := syscall.Kill(c.Leader, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	ws, ok := c.Exit(30 * time.Second)
	if !ok {
		t.Fatalf("freeze run did not end on SIGTERM; stderr:\n%s", c.Stderr())
	}
	if left := running(t, sleep); len(left) > 0 {
		t.Fatalf("alive after SIGTERM to freeze run (exit %d): %v", ws.ExitStatus(), left)
	}
	if ws.ExitStatus() != 128+15 {
		t.Errorf("exit %d, want the shell's 143 (it was killed by the SIGTERM passed on)", ws.ExitStatus())
	}
}

// A SIGTERM that reaches freeze run the moment its command exists, while
// freeze is still starting it, is passed on like any other: nothing is
// left. freeze caught signals only once it waited for the command, and a
// SIGTERM before that killed freeze and left the command running (CI,
// kernel matrix, 6.12: TestRunSIGTERMLeavesNothing, "alive after SIGTERM
// to freeze run (exit -1)"). Here the test sends it as soon as freeze
// has a child, which is inside that window every time.
func TestRunSIGTERMAtTheCommandsStartLeavesNothing(t *testing.T) {
	nestsInHarness(t)
	bin := buildFreeze(t)
	dir := t.TempDir()
	sleep := copyTool(t, dir, "sleep")
	state := filepath.Join(dir, "state")
	for i := 0; i < 3; i++ {
		c := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 50, HopCap: 1, Timeout: 60 * time.Second,
			Command: []string{bin, "run", "--wait-delay", "500ms", "--state-dir", state, "--", sleep, "60"}})
		child := firstChild(t, c.Leader, 20*time.Second)
		if err := syscall.Kill(c.Leader, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		ws, ok := c.Exit(30 * time.Second)
		if !ok {
			t.Fatalf("freeze run did not end on SIGTERM; stderr:\n%s", c.Stderr())
		}
		// Left behind, the child execs the sleep and lives 60 s.
		for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if st, err := proc.Default.ReadStat(child); err == nil && !st.Zombie() {
				exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", child))
				t.Fatalf("repetition %d: freeze run's child %d (%s) alive after freeze exited (status %v) on a SIGTERM sent as it started the command; stderr:\n%s",
					i, child, exe, ws, c.Stderr())
			}
		}
		if left := running(t, sleep); len(left) > 0 {
			t.Fatalf("repetition %d: alive after SIGTERM to freeze run: %v", i, left)
		}
		// The state file names the run's groups: it goes with them.
		if files, _ := filepath.Glob(filepath.Join(state, "runs", "*.json")); len(files) > 0 {
			t.Fatalf("repetition %d: state left after SIGTERM to freeze run: %v", i, files)
		}
	}
}

// A SIGTERM while the command's descendants have their grace (the
// command exited, --wait-delay not over) ends the grace: freeze run tears
// down at once, records the signal, and leaves nothing. Before, it
// killed freeze there and left the descendant; then, caught for the
// whole run, it was ignored until the grace (60 s here) was over.
func TestRunSIGTERMDuringTheGraceEndsIt(t *testing.T) {
	nestsInHarness(t)
	bin := buildFreeze(t)
	dir := t.TempDir()
	sleep := copyTool(t, dir, "sleep")
	tl := filepath.Join(dir, "run.jsonl")
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 50, HopCap: 1, Timeout: 120 * time.Second,
		Command: []string{bin, "run", "--wait-delay", "60s", "-t", tl, "--", "/bin/sh", "-c", sleep + " 60 & echo started"}})
	waitRunning(t, sleep, 1)
	// In the grace once freeze has recorded the shell's exit: a SIGTERM
	// before that is passed on to the command's group, as it should be,
	// and then there is no grace to end (seen in the kernel matrix when
	// the test looked only for the shell to be gone).
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		events, err := timeline.ReadFile(tl)
		if err == nil && slices.ContainsFunc(events, func(e timeline.Event) bool { return e.Step == timeline.StepRunExit }) {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("freeze run recorded no exit of its command in 20 s (%v); stderr:\n%s", err, c.Stderr())
		}
	}
	if err := syscall.Kill(c.Leader, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	ws, ok := c.Exit(30 * time.Second)
	if !ok {
		t.Fatalf("freeze run did not end within 30 s of a SIGTERM in its 60 s grace; stderr:\n%s", c.Stderr())
	}
	if !ws.Exited() {
		t.Fatalf("freeze run was killed (%v), not ended by its teardown; stderr:\n%s", ws, c.Stderr())
	}
	if left := running(t, sleep); len(left) > 0 {
		t.Fatalf("alive after SIGTERM in the grace: %v", left)
	}
	events, err := timeline.ReadFile(tl)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(events, func(e timeline.Event) bool { return e.Step == timeline.StepSignal }) {
		t.Errorf("no %q event in the run's timeline", timeline.StepSignal)
	}
}

// firstChild returns the first child of pid's threads to appear, looking
// as fast as it can.
func firstChild(t *testing.T, pid int, within time.Duration) int {
	t.Helper()
	for end := time.Now().Add(within); time.Now().Before(end); {
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		for _, task := range tasks {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, task.Name()))
			if f := strings.Fields(string(b)); len(f) > 0 {
				n, err := strconv.Atoi(f[0])
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
		}
	}
	t.Fatalf("process %d started no child in %v", pid, within)
	return 0
}

func waitRunning(t *testing.T, path string, n int) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if len(running(t, path)) >= n {
			return
		}
	}
	t.Fatalf("%s never ran %d times", path, n)
}

// freeze run killed with SIGKILL leaves its groups, with what the
// command started in them; the next 'freeze run --reap' ends them from
// the state file.
func TestRunReapEndsWhatAKilledRunLeft(t *testing.T) {
	nestsInHarness(t)
	bin := buildFreeze(t)
	// A state directory only root can search, in a place all can (a
	// guard's /run/freeze): the preload goes beside it.
	dir := testenv.SearchableTempDir(t)
	sleep := copyTool(t, dir, "sleep")
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	killedRun(t, bin, sleep, state)
	if m, _ := filepath.Glob(filepath.Join(state+"-node", "node-test-names-*")); len(m) != 1 {
		t.Fatalf("the killed run's node preload: %v, want one", m)
	}
	r := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 50, HopCap: 1, Timeout: 60 * time.Second,
		Command: []string{bin, "run", "--reap", "--state-dir", state}})
	ws, ok := r.Exit(30 * time.Second)
	if !ok || ws.ExitStatus() != 0 || !strings.Contains(r.Stderr(), "ended freeze-run-") {
		t.Fatalf("--reap: exit %d (finished %v):\n%s", ws.ExitStatus(), ok, r.Stderr())
	}
	if left := running(t, sleep); len(left) > 0 {
		t.Fatalf("alive after --reap: %v", left)
	}
	if files, _ := filepath.Glob(filepath.Join(state, "runs", "*.json")); len(files) > 0 {
		t.Errorf("state files left after --reap: %v", files)
	}
	if _, err := os.Lstat(state + "-node"); err == nil {
		t.Errorf("the killed run's node preload (or its directory) left after --reap: %s", state+"-node")
	}
}

// The guard ends what a killed freeze run left, unasked: its run
// directory is where root's runs keep their state. Without the guard's
// Reap, the sleep lives on and no "reaped" line is logged.
func TestGuardReapsAKilledRun(t *testing.T) {
	nestsInHarness(t)
	bin := buildFreeze(t)
	dir := t.TempDir()
	sleep := copyTool(t, dir, "sleep")
	runDir := filepath.Join(dir, "run")
	killedRun(t, bin, sleep, runDir)
	g := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 200, HopCap: 1, Timeout: 300 * time.Second,
		Command: []string{bin, "guard", "--run-dir", runDir}})
	waitFor(t, g, "freeze: guard: armed", 30*time.Second)
	e := waitLog(t, runDir, 10*time.Second, func(e logLine) bool { return e.Event == "reaped" })
	if e.reaped().Error != "" || !strings.Contains(g.Stderr(), "reaped freeze-run-") {
		t.Fatalf("the guard's reap: %v; stderr:\n%s", e, g.Stderr())
	}
	if left := running(t, sleep); len(left) > 0 {
		t.Fatalf("alive after the guard armed: %v", left)
	}
	if files, _ := filepath.Glob(filepath.Join(runDir, "runs", "*.json")); len(files) > 0 {
		t.Errorf("state files left after the guard's reap: %v", files)
	}
}

// freeze run nested in another: the inner run's groups nest in the
// outer's, so when the outer's --timeout fires while the inner still
// waits for its command's descendants, the outer's teardown ends the
// inner run and all it holds. On b2ed0a1 the inner's group for the
// teardown sat at the v2 root, outside the outer's: the sleep outlived
// both, and the outer's pids group could not be removed. The inner runs
// in a session of its own, so the outer's SIGTERM (to its command's
// process group) does not reach it: an inner run that got it would tear
// its own groups down, and the outer's teardown would prove nothing.
func TestRunNestedInsideAnotherRun(t *testing.T) {
	nestsInHarness(t)
	bin := buildFreeze(t)
	dir := t.TempDir()
	sleep := copyTool(t, dir, "sleep")
	report, innerState := filepath.Join(dir, "outer.json"), filepath.Join(dir, "inner-state")
	// 15 s for the inner run to start and write its state file before
	// the outer's timeout ends it: in a VM of the kernel matrix under
	// emulation, on a slow host, 3 s were not enough (no state to reap).
	c, code := runUnder(t, []string{bin, "run", "--timeout", "15s", "--wait-delay", "200ms", "--report", report, "-t", filepath.Join(dir, "outer.jsonl"),
		"--", "/bin/sh", "-c", "setsid " + bin + " run --wait-delay 60s --state-dir " + innerState + " -t " + filepath.Join(dir, "inner.jsonl") +
			" -- /bin/sh -c '" + sleep + " 60 & echo started' & wait"}, 60*time.Second)
	var r contain.ReportJSON
	b, err := os.ReadFile(report)
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	if err != nil || code != 124 || !r.Zero {
		t.Fatalf("outer: exit %d, report %+v (%v), want %d and zero; stderr:\n%s", code, r, err, 124, c.Stderr())
	}
	if left := running(t, sleep); len(left) > 0 {
		t.Fatalf("the inner run's sleep is alive after the outer returned: %v; stderr:\n%s", left, c.Stderr())
	}
	if _, err := os.Stat(r.Group); err == nil {
		t.Errorf("the outer's group %s is left", r.Group)
	}
	// The inner run was killed with the outer's group: its state file is
	// all that is left of it, and --reap clears it.
	g := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 50, HopCap: 1, Timeout: 60 * time.Second,
		Command: []string{bin, "run", "--reap", "--state-dir", innerState}})
	ws, ok := g.Exit(30 * time.Second)
	if !ok || ws.ExitStatus() != 0 || !strings.Contains(g.Stderr(), "its groups were gone already") {
		t.Errorf("--reap of the inner's state: exit %d (finished %v):\n%s", ws.ExitStatus(), ok, g.Stderr())
	}
}

// Inside a container: a cgroup namespace rooted at the harness's group,
// with a tmpfs at /sys/fs/cgroup and the pids and v2 hierarchies mounted
// again on it, as a container runtime mounts them (unshare --cgroup
// --mount). freeze run there sees
// its own group as "/", nests its group in it, and a fork bomb under
// --max-procs 64 ends as it does outside: the cap fired, zero, nothing
// left; and the harness's cap, outside the namespace, held over it all.
func TestRunInsideAContainer(t *testing.T) {
	nestsInHarness(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare (util-linux) to make the container's namespaces")
	}
	if _, err := os.Stat("/sys/fs/cgroup/pids/cgroup.procs"); err != nil {
		t.Skip("no v1 pids hierarchy to mount again inside the namespace (this test is written for a hybrid host)")
	}
	bin := buildFreeze(t)
	dir := t.TempDir()
	bash := copyTool(t, dir, "bash")
	report := filepath.Join(dir, "report.json")
	// The mounts live in the new mount namespace only, and go with it.
	inner := "mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup && mkdir /sys/fs/cgroup/pids /sys/fs/cgroup/unified && " +
		"mount -t cgroup -o pids pids /sys/fs/cgroup/pids && mount -t cgroup2 cgroup2 /sys/fs/cgroup/unified && " +
		"exec " + bin + " run --max-procs 64 --wait-delay 2s --report " + report + " -t " + filepath.Join(dir, "run.jsonl") + " -- " + bash + " -c ':(){ :|:& };:'"
	c, code := runUnder(t, []string{"/usr/bin/unshare", "--cgroup", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", inner}, 60*time.Second)
	if code != 123 {
		t.Fatalf("exit %d, want %d (the cap fired); stderr:\n%s", code, 123, c.Stderr())
	}
	var r contain.ReportJSON
	b, err := os.ReadFile(report)
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	// Inside the namespace freeze's own group is the root, so its group
	// is a top-level one there: /sys/fs/cgroup/pids/freeze-run-...
	if err != nil || r.Cap != "cgroup1" || !r.Zero || r.Refused == 0 || filepath.Dir(r.Group) != "/sys/fs/cgroup/pids" {
		t.Fatalf("report %+v (%v): want the cgroup1 cap at the namespace's root, zero, forks refused", r, err)
	}
	if left := running(t, bash); len(left) > 0 {
		t.Fatalf("%d processes of the bomb alive after freeze run returned", len(left))
	}
	if n := len(c.Survivors()); n > 0 {
		t.Fatalf("%d processes left in the harness's group", n)
	}
}

// In a pid namespace of its own (unshare --pid) the kernel's process
// events connector takes freeze's listen and sends it nothing: a run
// there named its leftovers without who started them, and said nothing
// of why. It says why now, and its record's run-start has the lineage
// off, with the same reason.
func TestRunInAPidNamespaceSaysWhyItsLeftoversHaveNoStarter(t *testing.T) {
	nestsInHarness(t)
	if _, err := os.Stat("/usr/bin/unshare"); err != nil {
		t.Skip("no unshare (util-linux) to make the pid namespace")
	}
	bin := buildFreeze(t)
	dir := t.TempDir()
	sh := copyTool(t, dir, "sh")
	sleep := copyTool(t, dir, "sleep")
	tl := filepath.Join(dir, "run.jsonl")
	// freeze is PID 1 of the namespace, which dies with it.
	c, code := runUnder(t, []string{"/usr/bin/unshare", "--pid", "--fork", "--mount-proc", "--",
		bin, "run", "--wait-delay", "300ms", "-t", tl, "--", sh, "-c", sleep + " 60 >/dev/null 2>&1 &"}, 60*time.Second)
	if code != 122 {
		t.Fatalf("exit %d, want 122 (a leftover); stderr:\n%s", code, c.Stderr())
	}
	const why = "freeze runs in a pid namespace of its own"
	if !regexp.MustCompile(`left behind: pid \d+ ` + regexp.QuoteMeta(sleep) + ` 60`).MatchString(c.Stderr()) {
		t.Fatalf("the sleep is not named as left behind:\n%s", c.Stderr())
	}
	if !strings.Contains(c.Stderr(), "run: the leftovers are named without who started them: "+why) {
		t.Errorf("the run does not say why its leftover has no starter:\n%s", c.Stderr())
	}
	events, err := timeline.ReadFile(tl)
	if err != nil {
		t.Fatal(err)
	}
	var start timeline.RunStart
	if len(events) == 0 || events[0].Step != timeline.StepRunStart || events[0].Decode(&start) != nil {
		t.Fatalf("the record does not open with its run-start: %+v", events)
	}
	if !strings.HasPrefix(start.Lineage, "off: "+why) {
		t.Errorf("the run-start's lineage: %q, want it off because of the namespace", start.Lineage)
	}
	if left := running(t, sleep); len(left) > 0 {
		t.Fatalf("the sleep is alive after freeze run returned: %v", left)
	}
}

// killedRun starts freeze run -- SLEEP 60 with its state in state, kills
// freeze with SIGKILL, and checks that the sleep outlived it.
func killedRun(t *testing.T, bin, sleep, state string) {
	t.Helper()
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 300, HopCap: 1, Timeout: 120 * time.Second,
		Command: []string{bin, "run", "--state-dir", state, "-t", filepath.Join(t.TempDir(), "run.jsonl"), "--", sleep, "60"}})
	waitRunning(t, sleep, 1)
	files, _ := filepath.Glob(filepath.Join(state, "runs", "freeze-run-*.json"))
	if len(files) != 1 {
		t.Fatalf("state files %v, want the run's one", files)
	}
	if err := syscall.Kill(c.Leader, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c.Exit(10 * time.Second)
	if len(running(t, sleep)) != 1 {
		t.Fatalf("the command should outlive a freeze run killed by SIGKILL (that is what reaping is for)")
	}
}

// As an ordinary user without a delegated cgroup, freeze run still runs
// the command, capped by RLIMIT_NPROC, and says that this cap is weaker.
func TestRunAsNobodySaysWhichGuaranteesHold(t *testing.T) {
	nestsInHarness(t)
	if _, err := os.Stat("/usr/sbin/runuser"); err != nil {
		t.Skip("no runuser to run freeze run as nobody")
	}
	bin := buildFreeze(t)
	// A directory nobody can read and write: the binary and the record.
	dir, err := os.MkdirTemp("", "freeze-run-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// Nobody's own directory (freeze's writer refuses one others can
	// write, 0777 as this test made it before).
	os.Chmod(dir, 0o755)
	nbin := filepath.Join(dir, "freeze")
	if err := exefile.Copy(bin, nbin); err != nil {
		t.Fatal(err)
	}
	os.Chmod(nbin, 0o755)
	sleep := filepath.Join(dir, "sleep")
	if err := exefile.Copy("/bin/sleep", sleep); err != nil {
		t.Fatal(err)
	}
	os.Chmod(sleep, 0o755)
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	c, code := runUnder(t, []string{"/usr/sbin/runuser", "-u", "nobody", "--", nbin, "run", "--state-dir", filepath.Join(dir, "state"),
		"-t", filepath.Join(dir, "run.jsonl"), "--", "/bin/sh", "-c", "exit 7"}, 30*time.Second)
	if code != 7 {
		t.Fatalf("exit %d, want the command's 7; stderr:\n%s", code, c.Stderr())
	}
	if !strings.Contains(c.Stderr(), "RLIMIT_NPROC, which counts every process of your user and does not bind root") {
		t.Errorf("freeze run does not say its cap is the rlimit:\n%s", c.Stderr())
	}
	// Its record reads back: with no group there is no pids.peak, and a
	// peak of -1 made the reader refuse the whole file (found on 5.10,
	// which has no pids.peak either).
	if _, err := timeline.ReadFile(filepath.Join(dir, "run.jsonl")); err != nil {
		t.Errorf("the run's record does not read back: %v", err)
	}
	// With no group, the set is freeze's descendants: a grandchild in a
	// new session is re-parented to freeze (the subreaper), and killed.
	c, code = runUnder(t, []string{"/usr/sbin/runuser", "-u", "nobody", "--", nbin, "run", "--wait-delay", "300ms", "--state-dir", filepath.Join(dir, "state"),
		"-t", filepath.Join(dir, "run2.jsonl"), "--", "/bin/sh", "-c", "setsid " + sleep + " 60 & exit 0"}, 30*time.Second)
	if code != 122 || !strings.Contains(c.Stderr(), "left its session") {
		t.Fatalf("a leftover as nobody: exit %d, want %d; stderr:\n%s", code, 122, c.Stderr())
	}
	if left := running(t, sleep); len(left) > 0 {
		t.Fatalf("alive after freeze run as nobody: %v", left)
	}
}

// go test -exec 'freeze run ... --' runs each test binary contained: a
// package whose test leaks a grandchild on purpose fails with freeze
// run's leftovers code, and the grandchild is gone when go test returns.
// go test splits -exec into words and appends the binary and its flags,
// so the command after -- is the test binary.
func TestRunUnderGoTestExec(t *testing.T) {
	nestsInHarness(t)
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command (a VM of the kernel matrix): go test -exec needs one")
	}
	bin := buildFreeze(t)
	dir := t.TempDir()
	sleep := copyTool(t, dir, "sleep")
	mod := filepath.Join(dir, "leaky")
	os.Mkdir(mod, 0o755)
	os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module leaky\n\ngo 1.21\n"), 0o644)
	os.WriteFile(filepath.Join(mod, "leaky_test.go"), []byte(`package leaky

import (
	"os/exec"
	"syscall"
	"testing"
)

// TestLeak starts a grandchild in a new session and returns: the leak
// freeze run exists to catch.
func TestLeak(t *testing.T) {
	c := exec.Command("`+sleep+`", "60")
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
}
`), 0o644)
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 300, HopCap: 1, Timeout: 120 * time.Second, Dir: mod,
		Command: []string{"/bin/sh", "-c", "cd " + mod + " && go test -count=1 -exec '" + bin + " run --wait-delay 200ms --' ."}})
	ws, ok := c.Exit(100 * time.Second)
	if !ok {
		t.Fatalf("go test did not return; stdout:\n%s\nstderr:\n%s", c.Stdout(), c.Stderr())
	}
	said := c.Stdout() + c.Stderr()
	removeKeptTimeline(t, said)
	// go test prints the binary's output and FAIL, not the status, when
	// the binary said PASS.
	if ws.ExitStatus() == 0 || !strings.Contains(said, "exit 122: 1 process(es) outlived the command") || !strings.Contains(said, "FAIL\tleaky") {
		t.Fatalf("go test exit %d, want a failure with freeze run's 122; stdout:\n%s\nstderr:\n%s", ws.ExitStatus(), c.Stdout(), c.Stderr())
	}
	if left := running(t, sleep); len(left) > 0 {
		t.Fatalf("the test's grandchild is alive after go test returned: %v", left)
	}
}

// removeKeptTimeline removes the record freeze run kept in the state
// directory, by the path it printed.
func removeKeptTimeline(t *testing.T, said string) {
	for _, line := range strings.Split(said, "\n") {
		if _, p, ok := strings.Cut(line, "; timeline: "); ok && strings.HasPrefix(p, timeline.StateDir()+"/run-") {
			os.Remove(strings.TrimSpace(p))
		}
	}
}

// --report through a user's symlink in a world-writable directory (the
// audit's move: root replaced a 0600 root file with the report's JSON,
// and a dangling link made it create a file of the user's choosing):
// in a sticky directory others write, the writer makes only new files
// or writes its own, so a link at the name is refused, with a warning
// that names it, and what it pointed to is not touched. A new name
// there is written.
func TestRunReportFollowsNoSymlink(t *testing.T) {
	nestsInHarness(t)
	bin := buildFreeze(t)
	dir := t.TempDir()
	shared := filepath.Join(dir, "tmp")
	os.Mkdir(shared, 0o777)
	os.Chmod(shared, 0o777|os.ModeSticky) // as /tmp
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("root only\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	chosen := filepath.Join(dir, "chosen")
	for _, l := range [][2]string{{"report.json", victim}, {"dangling.json", chosen}} {
		link := filepath.Join(shared, l[0])
		os.Symlink(l[1], link)
		c, code := runUnder(t, []string{bin, "run", "--report", link, "-t", filepath.Join(dir, l[0]+".jsonl"), "--", "/bin/true"}, 30*time.Second)
		if code != 0 {
			t.Fatalf("freeze run --report %s: exit %d", link, code)
		}
		if !strings.Contains(c.Stderr(), "warning: run: --report "+link) {
			t.Errorf("no warning that the report was not written through the link:\n%s", c.Stderr())
		}
	}
	fresh := filepath.Join(shared, "fresh.json")
	if _, code := runUnder(t, []string{bin, "run", "--report", fresh, "-t", filepath.Join(dir, "fresh.jsonl"), "--", "/bin/true"}, 30*time.Second); code != 0 {
		t.Fatalf("freeze run --report %s: exit %d", fresh, code)
	}
	if b, err := os.ReadFile(fresh); err != nil || !strings.Contains(string(b), `"exit": 0`) {
		t.Errorf("the report at a new name in the sticky directory: %q, %v", b, err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "root only\n" {
		t.Errorf("--report wrote through a symlink: the file it pointed to reads %q", b)
	}
	if _, err := os.Lstat(chosen); !os.IsNotExist(err) {
		t.Errorf("--report through a dangling symlink created %s", chosen)
	}
}

// A root command's descendant that moves itself out of the run's groups
// (the audit's move: freeze run said "nothing outlived it; zero
// confirmed" and exited 0 while it ran on) is named as a leftover, says
// where it went, and is killed: freeze is its subreaper and sees it.
// Its groups are the test's own, capped, removed at cleanup.
func TestRunSeesADescendantThatLeftItsGroup(t *testing.T) {
	nestsInHarness(t)
	v1, v2 := "/sys/fs/cgroup/pids", "/sys/fs/cgroup/unified"
	if _, err := os.Stat(v1 + "/cgroup.procs"); err != nil {
		t.Skip("needs the v1 pids hierarchy (a hybrid host): the escape goes to a pids group of the test's own")
	}
	bin := buildFreeze(t)
	dir := t.TempDir()
	sleep := copyTool(t, dir, "sleep")
	var groups []string
	for _, root := range []string{v1, v2} {
		if _, err := os.Stat(root + "/cgroup.procs"); err != nil {
			continue
		}
		g := filepath.Join(root, fmt.Sprintf("freeze-test-escape-%d", os.Getpid()))
		if err := os.Mkdir(g, 0o755); err != nil {
			t.Fatal(err)
		}
		if root == v1 {
			os.WriteFile(g+"/pids.max", []byte("5"), 0)
		}
		groups = append(groups, g)
	}
	t.Cleanup(func() {
		for _, pid := range running(t, sleep) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		for _, g := range groups {
			for end := time.Now().Add(10 * time.Second); os.Remove(g) != nil && time.Now().Before(end); {
				time.Sleep(20 * time.Millisecond)
			}
		}
	})
	move := ""
	for _, g := range groups {
		move += "echo $$ > " + g + "/cgroup.procs && "
	}
	report := filepath.Join(dir, "report.json")
	// The command waits until its child has left, then exits.
	script := "/bin/sh -c '" + move + "exec " + sleep + " 60' & " +
		"for i in $(seq 1 200); do grep -q freeze-test-escape /proc/$!/cgroup && break; sleep 0.05; done"
	c, code := runUnder(t, []string{bin, "run", "--wait-delay", "300ms", "--report", report, "-t", filepath.Join(dir, "run.jsonl"), "--", "/bin/sh", "-c", script}, 60*time.Second)
	var r contain.ReportJSON
	b, _ := os.ReadFile(report)
	json.Unmarshal(b, &r)
	if code != 122 {
		t.Errorf("exit %d, want 122 (a process outlived the command)\n%s", code, b)
	}
	found := false
	for _, l := range r.Leftovers {
		// The escaped process, named by where it went: its exe is the
		// sleep, or still the shell that moved itself and was about to
		// exec it (seen under load).
		if (l.Exe == sleep || l.Comm == "sh") && strings.Contains(l.How, "left the run's group for another cgroup") && strings.Contains(l.How, "freeze-test-escape-") {
			found = true
		}
	}
	if !found {
		t.Errorf("the report does not name the escaped process and where it went:\n%s\n%s", b, c.Stderr())
	}
	for end := time.Now().Add(5 * time.Second); len(running(t, sleep)) > 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the escaped process still runs after freeze run returned")
		}
	}
}

// --timeout sends SIGTERM to the command's group and gives it
// --kill-after to end by itself, as timeout(1) does: the command's trap
// runs (a test runner writes its report there). The command is reported
// as timed out, not as its own leftover; the run's record renders with
// its outcome, and draws (#36: it was killed outright, listed as its
// own leftover, and its record rendered "Unknown" and drew nothing).
func TestRunTimeoutSendsTermAndItsRecordRenders(t *testing.T) {
	nestsInHarness(t)
	bin := buildFreeze(t)
	dir := t.TempDir()
	tl := filepath.Join(dir, "run.jsonl")
	// 5 s for the shell to set its trap: in a VM of the kernel matrix
	// (TCG, two at once on two cores) 1 s was not always enough, and the
	// TERM came before the trap.
	c, code := runUnder(t, []string{bin, "run", "--timeout", "5s", "--kill-after", "20s", "-t", tl, "--",
		"/bin/sh", "-c", `trap 'echo got TERM; exit 7' TERM; sleep 60 & wait`}, 90*time.Second)
	if code != 124 {
		t.Fatalf("exit %d, want 124 (timed out); stderr:\n%s", code, c.Stderr())
	}
	if !strings.Contains(c.Stdout(), "got TERM") {
		t.Errorf("the command's TERM trap did not run; stdout:\n%s\nstderr:\n%s", c.Stdout(), c.Stderr())
	}
	if strings.Contains(c.Stderr(), "the command itself") {
		t.Errorf("the timed-out command is listed as its own leftover:\n%s", c.Stderr())
	}
	out, err := exec.Command(bin, "timeline", tl, "--format", "text").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "freeze run exited 124") || !strings.Contains(string(out), "Host: ") {
		t.Errorf("the run's record does not render its outcome and host (%v):\n%s", err, out)
	}
	if out, err := exec.Command(bin, "timeline", tl, "--format", "svg").CombinedOutput(); err != nil || !strings.Contains(string(out), `class="bar"`) {
		t.Errorf("the run's record does not draw (%v):\n%s", err, out)
	}
}

// Each leftover names who started it, from the run's lineage (the
// process events connector): under 'freeze run -- go test', the package
// whose test binary started it, though its parent had exited and it was
// re-parented to freeze (#36: "which test did this?"). And go test keeps
// its cache under freeze run (no -exec).
func TestRunNamesTheGoTestThatLeftAProcess(t *testing.T) {
	nestsInHarness(t)
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go on PATH (the kernel matrix's guests have none)")
	}
	bin := buildFreeze(t)
	dir := t.TempDir()
	sleep := copyTool(t, dir, "sleep")
	mod := filepath.Join(dir, "leaky")
	os.Mkdir(mod, 0o755)
	os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module leaky\n\ngo 1.26\n"), 0o644)
	os.WriteFile(filepath.Join(mod, "leaky_test.go"), []byte(`package leaky

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func TestLeavesAHelper(t *testing.T) {
	c := exec.Command(`+strconv.Quote(sleep)+`, "60")
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	// freeze run reads what a process runs at its exec event; a test
	// binary gone before that read (within milliseconds, with the
	// suite loading the machine: seen once in CI) is named by its fork,
	// 'go test'. Lived 2 s, it is named.
	time.Sleep(2 * time.Second)
}
`), 0o644)
	report, junit := filepath.Join(dir, "report.json"), filepath.Join(dir, "junit.xml")
	c, code := runUnder(t, []string{"/bin/sh", "-c", "cd " + mod + " && exec " + bin + " run --report " + report + " --junit " + junit + " -t " + filepath.Join(dir, "run.jsonl") + " -- " + goBin + " test -count=1 -run TestLeavesAHelper ."}, 100*time.Second)
	if code != 122 {
		t.Fatalf("exit %d, want 122 (a leftover); stderr:\n%s", code, c.Stderr())
	}
	want := "started by the Go test binary leaky.test of package " + mod
	if !strings.Contains(c.Stderr(), want) {
		t.Errorf("the leftover does not name its package (%q):\n%s", want, c.Stderr())
	}
	var r contain.ReportJSON
	b, _ := os.ReadFile(report)
	if json.Unmarshal(b, &r) != nil || len(r.Leftovers) != 1 || !strings.Contains(r.Leftovers[0].StartedBy, "of package "+mod) || len(r.Leftovers[0].Args) != 2 {
		t.Errorf("the report's leftover: %s", b)
	}
	// The JUnit case sits where go-junit-report and gotestsum put the
	// package's own: classname the import path, named by the test.
	if x, _ := os.ReadFile(junit); !strings.Contains(string(x), `classname="leaky"`) || !strings.Contains(string(x), `name="TestLeavesAHelper: left behind`) {
		t.Errorf("the JUnit case is not classed by the package and named by its test:\n%s", x)
	}
	// #52: and it lines up with a real converter's JUnit of the same run
	// (Debian's gotestsum, which runs go test -json): merged, the
	// leftover's case sits beside the test's own, with one classname.
	if gotestsum, err := exec.LookPath("gotestsum"); err != nil {
		t.Logf("no gotestsum (Debian's, .ci/run installs it): the JUnit is not merged with a converter's")
	} else {
		ours, theirs := filepath.Join(dir, "freeze-gt.xml"), filepath.Join(dir, "gotestsum.xml")
		c, code = runUnder(t, []string{"/bin/sh", "-c", "cd " + mod + " && exec " + bin + " run --junit " + ours + " -t " + filepath.Join(dir, "gt.jsonl") + " -- " + gotestsum + " --junitfile " + theirs + " -- -count=1 -run TestLeavesAHelper ."}, 100*time.Second)
		if code != 122 {
			t.Fatalf("under gotestsum: exit %d, want 122 (a leftover); stderr:\n%s", code, c.Stderr())
		}
		if out, ok := junitMerge(t, theirs, ours); ok && (!regexp.MustCompile(`(?m)^leaky \| leaky \| TestLeavesAHelper \| pass$`).MatchString(out) ||
			!regexp.MustCompile(`(?m)^freeze run -- .* \| leaky \| TestLeavesAHelper: left behind: pid \d+ sleep \| fail$`).MatchString(out)) {
			t.Errorf("the merged JUnit does not hold gotestsum's case and freeze's leftover beside it, with one classname:\n%s", out)
		}
	}
	// Go's test cache is kept under freeze run (no -exec): the second of
	// two plain runs prints (cached).
	for i := 0; i < 2; i++ {
		c, _ = runUnder(t, []string{"/bin/sh", "-c", "cd " + mod + " && exec " + bin + " run -t " + filepath.Join(dir, "cache"+strconv.Itoa(i)+".jsonl") + " -- " + goBin + " test ."}, 100*time.Second)
	}
	if !strings.Contains(c.Stdout(), "(cached)") {
		t.Errorf("go test's cache was not kept under freeze run:\n%s", c.Stdout())
	}
	// And under go test -exec (each test binary its own run): go test
	// fails the package and shows freeze run's words, which name it.
	c, code = runUnder(t, []string{"/bin/sh", "-c", "cd " + mod + " && exec " + goBin + " test -count=1 -exec '" + bin + " run -t " + filepath.Join(dir, "exec.jsonl") + " --' . 2>&1"}, 100*time.Second)
	if code == 0 || !strings.Contains(c.Stdout(), want) {
		t.Errorf("go test -exec 'freeze run --': exit %d, want a failure naming the package (%q):\n%s%s", code, want, c.Stdout(), c.Stderr())
	}
}

// The reports CI systems read (#36): --junit writes JUnit XML that a
// real consumer parses (Debian's python3-junitparser), a failing case
// per leftover naming it; under GitHub Actions each leftover is an
// ::error annotation, and the job summary gets a table; --json goes to
// stderr, never into the command's stdout; --leaks warn keeps the
// command's status.
func TestRunReportsForCI(t *testing.T) {
	nestsInHarness(t)
	bin := buildFreeze(t)
	dir := t.TempDir()
	sleep := copyTool(t, dir, "sleep")
	junit, summary := filepath.Join(dir, "run.xml"), filepath.Join(dir, "summary.md")
	cmd := []string{"/bin/sh", "-c", "GITHUB_ACTIONS=true GITHUB_STEP_SUMMARY=" + summary + " exec " + bin + " run -t " + filepath.Join(dir, "ci.jsonl") + " --junit " + junit + " --json -- /bin/sh -c 'setsid " + sleep + " 60 & echo the-command-output'"}
	c, code := runUnder(t, cmd, 60*time.Second)
	if code != 122 {
		t.Fatalf("exit %d, want 122; stderr:\n%s", code, c.Stderr())
	}
	if out := c.Stdout(); strings.Contains(out, `"leftovers"`) || !strings.Contains(out, "the-command-output") {
		t.Errorf("stdout is not the command's own (with the annotations after it):\n%s", out)
	}
	if !strings.Contains(c.Stderr(), `"leftovers"`) {
		t.Errorf("--json is not on stderr:\n%s", c.Stderr())
	}
	if !regexp.MustCompile(`(?m)^::error title=left behind%3A pid \d+ `).MatchString(c.Stdout()) {
		t.Errorf("no GitHub annotation for the leftover:\n%s", c.Stdout())
	}
	if b, _ := os.ReadFile(summary); !strings.Contains(string(b), "| left behind: pid ") {
		t.Errorf("the job summary has no table of findings:\n%s", b)
	}
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Skip("no Debian python3 for junitparser")
	}
	check := `import sys, junitparser
x = junitparser.JUnitXml.fromfile(sys.argv[1])
suites = [x] if isinstance(x, junitparser.TestSuite) else list(x)
s = suites[0]
cases = list(s)
fails = [c for c in cases if c.result and isinstance(c.result[0], junitparser.Failure)]
print(s.tests, s.failures, len(fails), fails[0].name if fails else "")
`
	out, err := exec.Command(py, "-c", check, junit).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "No module named") {
			t.Skip("python3-junitparser is not installed (.ci/run installs it)")
		}
		t.Fatalf("junitparser: %v\n%s", err, out)
	}
	f := strings.Fields(string(out))
	if len(f) < 4 || f[0] != "1" || f[1] != "1" || f[2] != "1" || !strings.Contains(string(out), "left behind: pid") {
		t.Errorf("junitparser read: %s (want 1 test, 1 failure, the leftover)", out)
	}
	// --leaks warn: reported, and the command's own status kept.
	c, code = runUnder(t, []string{bin, "run", "-t", filepath.Join(dir, "warn.jsonl"), "--leaks", "warn", "--", "/bin/sh", "-c", "setsid " + sleep + " 60 & exit 0"}, 60*time.Second)
	if code != 0 || !strings.Contains(c.Stderr(), "left behind") {
		t.Errorf("--leaks warn: exit %d, want 0 with the leftover reported:\n%s", code, c.Stderr())
	}
}

// A make -j4 recipe that leaves a background job: the leftover names the
// recipe's shell and make above it, from the lineage, though the
// recipe's shell has exited.
//
// The recipe's shell lives half a second after it starts the job. freeze
// reads a process's argv after its exec event, and a shell gone first is
// named "exited before freeze could read it" (true, and all freeze can
// say): in rehearsal 41, beside stress-ng, the recipe's shell that ended
// at once was gone 2 ms after its exec, and the target was not named.
// The race is the recipe's, not freeze's to win; the test's recipe does
// not run it.
func TestRunNamesTheMakeRecipeThatLeftAProcess(t *testing.T) {
	nestsInHarness(t)
	mk, err := exec.LookPath("make")
	if err != nil {
		t.Skip("no make on PATH")
	}
	bin := buildFreeze(t)
	dir := t.TempDir()
	sleep := copyTool(t, dir, "sleep")
	makefile := "all: a b c d\na b c:\n\t@true\nd:\n\t@" + sleep + " 60 > /dev/null 2>&1 & " + sleep + " 0.5\n"
	if err := os.WriteFile(filepath.Join(dir, "Makefile"), []byte(makefile), 0o644); err != nil {
		t.Fatal(err)
	}
	c, code := runUnder(t, []string{"/bin/sh", "-c", "cd " + dir + " && exec " + bin + " run -t " + filepath.Join(dir, "make.jsonl") + " -- " + mk + " -j4"}, 60*time.Second)
	if code != 122 {
		t.Fatalf("exit %d, want 122; stderr:\n%s", code, c.Stderr())
	}
	if !regexp.MustCompile(`left behind: pid \d+ ` + regexp.QuoteMeta(sleep) + ` 60 .*started by .*` + regexp.QuoteMeta(mk) + ` -j4`).MatchString(c.Stderr()) {
		t.Errorf("the leftover does not name the make that started it:\n%s", c.Stderr())
	}
	// And the target whose recipe started it (#52: it gave the recipe's
	// sh -c line only).
	if !strings.Contains(c.Stderr(), "(the recipe of target d, Makefile:5)") {
		t.Errorf("the leftover does not name the make target whose recipe started it:\n%s", c.Stderr())
	}
}

// node's own test runner (node --test), whose test spawns a detached
// child: the leftover names the test file's worker that started it.
func TestRunNamesTheNodeTestThatLeftAProcess(t *testing.T) {
	nestsInHarness(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node on PATH")
	}
	bin := buildFreeze(t)
	dir := testenv.SearchableTempDir(t) // as /run is for /run/freeze
	sleep := copyTool(t, dir, "sleep")
	js := filepath.Join(dir, "leaky.test.js")
	src := "const { test } = require('node:test');\nconst { spawn } = require('node:child_process');\n" +
		"test('leaves a helper', () => { const c = spawn(" + strconv.Quote(sleep) + ", ['60'], { detached: true, stdio: 'ignore' }); c.unref(); });\n"
	if err := os.WriteFile(js, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	junit := filepath.Join(dir, "node.xml")
	c, code := runUnder(t, []string{bin, "run", "-t", filepath.Join(dir, "node.jsonl"), "--state-dir", filepath.Join(dir, "state"), "--junit", junit, "--", node, "--test", js}, 90*time.Second)
	if code != 122 {
		t.Fatalf("exit %d, want 122; stderr:\n%s", code, c.Stderr())
	}
	// Its test, by name (#52: it named the test file alone), then the
	// file's worker that started it.
	if !regexp.MustCompile(`left behind: pid \d+ ` + regexp.QuoteMeta(sleep) + ` 60 .*started by the node test "leaves a helper" in ` + regexp.QuoteMeta(js) + `, through pid \d+ [^;]*` + regexp.QuoteMeta(js)).MatchString(c.Stderr()) {
		t.Errorf("the leftover does not name the node test that started it:\n%s", c.Stderr())
	}
	if b, err := os.ReadFile(junit); err != nil || !strings.Contains(string(b), `classname="`+js+`"`) || !strings.Contains(string(b), `name="leaves a helper: left behind`) {
		t.Errorf("the JUnit case is not the node test's (%v):\n%s", err, b)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "state*", "node-test-names*")); len(m) > 0 {
		t.Errorf("the run left its node preload: %v", m)
	}
}

// A pytest-xdist suite whose test daemonizes a helper (a double fork and
// setsid): the leftover names the test that started it (pytest's
// PYTEST_CURRENT_TEST, which the helper inherits), its xdist worker, and
// the workers' argv up to pytest, though both of its parents exited.
func TestRunNamesThePytestTestThatLeftADaemon(t *testing.T) {
	nestsInHarness(t)
	py := "/usr/bin/python3"
	if out, err := exec.Command(py, "-c", "import pytest, xdist").CombinedOutput(); err != nil {
		t.Skipf("no Debian python3-pytest and python3-pytest-xdist (.ci/run installs them): %s", out)
	}
	bin := buildFreeze(t)
	dir := t.TempDir()
	helper := copyTool(t, dir, "sleep")
	suite := filepath.Join(dir, "suite")
	os.Mkdir(suite, 0o755)
	src := "import os, time\n\ndef daemonize(argv):\n    if os.fork() == 0:\n        os.setsid()\n        if os.fork() == 0:\n            os.execv(argv[0], argv)\n        os._exit(0)\n    time.sleep(0.2)\n\n" +
		"def test_starts_a_daemon():\n    daemonize([" + strconv.Quote(helper) + ", \"60\"])\n\ndef test_other():\n    assert True\n"
	if err := os.WriteFile(filepath.Join(suite, "test_daemon.py"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	ours, theirs := filepath.Join(dir, "freeze.xml"), filepath.Join(dir, "pytest.xml")
	c, code := runUnder(t, []string{"/usr/bin/env", "GITHUB_ACTIONS=true", bin, "run", "-t", filepath.Join(dir, "pytest.jsonl"), "--junit", ours, "--", py, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider", "--basetemp", filepath.Join(dir, "pytest-tmp"), "--rootdir", suite, "--junitxml", theirs, suite}, 90*time.Second)
	if code != 122 {
		t.Fatalf("exit %d, want 122; stderr:\n%s", code, c.Stderr())
	}
	// #52: the annotation sits on the test's file, with a short title,
	// and freeze's JUnit merges with pytest's own: the leftover's case
	// has the classname pytest gives its test, and is named after it.
	if !regexp.MustCompile(`(?m)^::error file=test_daemon.py,title=test_starts_a_daemon%3A left behind%3A pid \d+ sleep::`).MatchString(c.Stdout()) {
		t.Errorf("no annotation on test_daemon.py titled after its test:\n%s", c.Stdout())
	}
	if out, ok := junitMerge(t, theirs, ours); ok && (!regexp.MustCompile(`(?m)^pytest \| test_daemon \| test_starts_a_daemon \| pass$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^freeze run -- .* \| test_daemon \| test_starts_a_daemon: left behind: pid \d+ sleep \| fail$`).MatchString(out)) {
		t.Errorf("the merged JUnit does not hold pytest's case and freeze's leftover beside it, with one classname:\n%s", out)
	}
	if !regexp.MustCompile(`left behind: pid \d+ ` + regexp.QuoteMeta(helper) + ` 60 .*started by the pytest test \S*test_daemon.py::test_starts_a_daemon \(call\) \(xdist worker gw\d\), through .*-m pytest`).MatchString(c.Stderr()) {
		t.Errorf("the leftover does not name the pytest test, worker and pytest that started it:\n%s", c.Stderr())
	}
	if !strings.Contains(c.Stderr(), "left its session (setsid)") {
		t.Errorf("the leftover's escape is not named:\n%s", c.Stderr())
	}
}

// socat UNIX-LISTEN/TCP-LISTEN bridges left by a script that exits (the
// leak this project's users keep meeting): each is named with its argv
// and the address it listens on.
func TestRunNamesASocatBridgeAndItsPort(t *testing.T) {
	nestsInHarness(t)
	if _, err := exec.LookPath("socat"); err != nil {
		t.Skip("no socat (Debian's socat; .ci/run installs it)")
	}
	bin := buildFreeze(t)
	dir := t.TempDir()
	socat := copyTool(t, dir, "socat")
	sock := filepath.Join(dir, "bridge.sock")
	script := socat + " UNIX-LISTEN:" + sock + ",fork EXEC:/bin/cat & " + socat + " TCP-LISTEN:0,bind=127.0.0.1,fork EXEC:/bin/cat & sleep 0.3"
	c, code := runUnder(t, []string{bin, "run", "-t", filepath.Join(dir, "socat.jsonl"), "--", "/bin/sh", "-c", script}, 60*time.Second)
	if code != 122 {
		t.Fatalf("exit %d, want 122; stderr:\n%s", code, c.Stderr())
	}
	if !regexp.MustCompile(`left behind: pid \d+ ` + regexp.QuoteMeta(socat) + ` UNIX-LISTEN:` + regexp.QuoteMeta(sock) + `,fork EXEC:/bin/cat .*listening on unix ` + regexp.QuoteMeta(sock)).MatchString(c.Stderr()) {
		t.Errorf("the unix bridge is not named with its argv and its socket's path:\n%s", c.Stderr())
	}
	if !regexp.MustCompile(`left behind: pid \d+ ` + regexp.QuoteMeta(socat) + ` TCP-LISTEN:0.*listening on tcp 127\.0\.0\.1:\d+`).MatchString(c.Stderr()) {
		t.Errorf("the tcp bridge is not named with its argv and its port:\n%s", c.Stderr())
	}
}

// #52: 'freeze run --json' wrote a line of words before its JSON on
// stderr, so the form its help gives (stderr to jq) failed to parse.
// With --json, stderr is the JSON alone (for a command that writes no
// stderr of its own), a leftover's run included.
func TestRunJSONIsAllOfStderr(t *testing.T) {
	nestsInHarness(t)
	bin := buildFreeze(t)
	dir := t.TempDir()
	sleep := copyTool(t, dir, "sleep")
	for _, tc := range []struct {
		script string
		exit   int
	}{
		{"exit 0", 0},
		{"setsid " + sleep + " 60 & exit 0", 122},
	} {
		c, code := runUnder(t, []string{bin, "run", "--json", "--wait-delay", "200ms", "-t", filepath.Join(dir, "j.jsonl"), "--", "/bin/sh", "-c", tc.script}, 30*time.Second)
		var j contain.ReportJSON
		if err := json.Unmarshal([]byte(c.Stderr()), &j); err != nil {
			t.Fatalf("%q: stderr is not one JSON report (%v):\n%s", tc.script, err, c.Stderr())
		}
		if code != tc.exit || j.Exit != tc.exit {
			t.Errorf("%q: exit %d, the report's %d, want %d", tc.script, code, j.Exit, tc.exit)
		}
	}
}

// #52: on a suite that leaves processes, the default 1 s --wait-delay
// was most of freeze run's overhead, and nothing said so. With a
// leftover and a wait of 500 ms or more, the run says what the wait
// cost and how to shorten it; with a short wait, it does not.
func TestRunSaysWhatTheWaitDelayCost(t *testing.T) {
	nestsInHarness(t)
	bin := buildFreeze(t)
	dir := t.TempDir()
	sleep := copyTool(t, dir, "sleep")
	for _, tc := range []struct {
		delay string
		says  bool
	}{{"1s", true}, {"100ms", false}} {
		c, code := runUnder(t, []string{bin, "run", "--wait-delay", tc.delay, "-t", filepath.Join(dir, tc.delay+".jsonl"), "--", "/bin/sh", "-c", "setsid " + sleep + " 60 & exit 0"}, 30*time.Second)
		if code != 122 {
			t.Fatalf("--wait-delay %s: exit %d, want 122 (a leftover):\n%s", tc.delay, code, c.Stderr())
		}
		if says := strings.Contains(c.Stderr(), "was --wait-delay") && strings.Contains(c.Stderr(), "--wait-delay 100ms shortens it"); says != tc.says {
			t.Errorf("--wait-delay %s: says what the wait cost %v, want %v:\n%s", tc.delay, says, tc.says, c.Stderr())
		}
	}
}

// junitMerge merges JUnit files with a real consumer's parser (Debian's
// python3-junitparser, as a CI system's JUnit view would), and returns
// a line per case: "SUITE | CLASSNAME | NAME | pass|fail". It reports
// false where junitparser is not installed, and fails the test where it
// cannot merge the files.
func junitMerge(t *testing.T, files ...string) (string, bool) {
	t.Helper()
	merge := `import sys, junitparser
x = junitparser.JUnitXml()
for f in sys.argv[1:]:
    y = junitparser.JUnitXml.fromfile(f)
    for s in ([y] if isinstance(y, junitparser.TestSuite) else list(y)):
        x.add_testsuite(s)
for s in x:
    for c in s:
        print(s.name, "|", c.classname, "|", c.name, "|", "fail" if c.result else "pass")
`
	out, err := exec.Command("/usr/bin/python3", append([]string{"-c", merge}, files...)...).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "No module named") || errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return "", false
		}
		t.Errorf("junitparser could not merge %v: %v\n%s", files, err, out)
		return "", false
	}
	return string(out), true
}
