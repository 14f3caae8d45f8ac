package deploy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"freeze/internal/containtest"
	"freeze/internal/guard"
	"freeze/internal/postmortem"
	"freeze/internal/runtest"
	"freeze/internal/testenv"
	"freeze/internal/timeline"
)

// ansible runs ansible-playbook through the harness (capped, owned, its
// whole cgroup killed at cleanup and on timeout), with Ansible's own
// files in the test's directory, and returns its exit code and output.
func ansible(t *testing.T, work string, args ...string) (int, string) {
	t.Helper()
	tmp := filepath.Join(work, "ansible-tmp")
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 600, HopCap: 1, Timeout: 400 * time.Second,
		Command: append([]string{"/usr/bin/ansible-playbook"}, args...),
		Env: []string{"ANSIBLE_LOCAL_TEMP=" + tmp, "ANSIBLE_REMOTE_TMP=" + tmp, "ANSIBLE_ASYNC_DIR=" + filepath.Join(work, "async"),
			"ANSIBLE_NOCOLOR=1", "ANSIBLE_PIPELINING=1", "ANSIBLE_RETRY_FILES_ENABLED=0", "ANSIBLE_STDOUT_CALLBACK=default", "ANSIBLE_ROLES_PATH=" + filepath.Join(work, "none")}})
	ws, ok := c.Exit(300 * time.Second)
	if !ok {
		t.Fatalf("ansible-playbook %s did not finish in 300s:\n%s\n%s", strings.Join(args, " "), c.Stdout(), c.Stderr())
	}
	return ws.ExitStatus(), c.Stdout() + c.Stderr()
}

// recap is one host's line of the play recap: ok, changed, failed.
func recap(t *testing.T, out, host string) (ok, changed, failed int) {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(host) + `\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no recap line for %s in:\n%s", host, out)
	}
	fmt.Sscan(m[1], &ok)
	fmt.Sscan(m[2], &changed)
	fmt.Sscan(m[3], &failed)
	return
}

// The playbook, run for real by ansible-core against an inventory of
// four hosts that are all this machine (local connection), each with its
// own target as a host var: two capped chains reach zero and report
// changed, a host with nothing to match reports ok, a host where freeze
// refuses its options fails; the dry run before changes nothing; every
// timeline comes back and the fleet postmortem lists each host. One host
// has a guard armed, and its run is the guard's.
func TestAnsibleContainsAChainPerHost(t *testing.T) {
	testenv.RequireLive(t, "the chains' pids cgroups, and the playbook's become")
	needTool(t, "ansible-playbook", "ansible-core")
	bin := buildFreeze(t)
	// The chains must outlive three playbook runs (install, dry run,
	// contain), each up to 300 s on a loaded machine: a harness timeout of
	// 300 s killed them before the contain run once in CI, which then
	// matched nothing. Set-up, not an assertion.
	chain := func() *containtest.Chain {
		// A fork a second: at its cap a tree retries every interval,
		// and two of 150 retrying every 50 ms kept ansible-playbook
		// runnable at 1% of a CPU on a slow host (load 170).
		c := containtest.Start(t, containtest.Spec{Shape: containtest.Tree, Cap: 150, HopCap: 1000000, Timeout: 1000 * time.Second, Interval: time.Second})
		if n := c.WaitPopulation(150, 30*time.Second); n != 150 {
			t.Fatalf("chain reached %d of 150", n)
		}
		runtest.RemoveAtCleanup(t, c.Path)
		return c
	}
	work := t.TempDir()
	idle := filepath.Join(work, "idle", "tool")
	os.MkdirAll(filepath.Dir(idle), 0o755)
	if err := os.WriteFile(idle, []byte("#!/bin/false\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// host-b has a guard armed: freeze there hands the request to it.
	guardDir := startGuard(t, bin)
	host := func(name, path, extra string) string {
		d := filepath.Join(work, name)
		run := filepath.Join(d, "run")
		if name == "host-b" {
			run = guardDir
		}
		return fmt.Sprintf("    %s:\n      path: %q\n      freeze_bin_dir: %q\n      timeline_dir: %q\n      run_dir: %q\n%s",
			name, path, filepath.Join(d, "bin"), filepath.Join(d, "timelines"), run, extra)
	}
	inv := filepath.Join(work, "inventory.yml")
	inventory := func(pathA, pathB string) {
		err := os.WriteFile(inv, []byte("all:\n  vars:\n    ansible_connection: local\n    ansible_python_interpreter: /usr/bin/python3\n    ansible_become_method: su\n  hosts:\n"+
			host("host-a", pathA, "")+host("host-b", pathB, "")+host("host-idle", idle, "")+
			host("host-bad", idle, "      method: bogus\n")), 0o644)
		if err != nil {
			t.Fatal(err)
		}
	}
	dir := "ansible"

	// The install needs no chain (install.yml reads no path): the chains
	// start after it, so that their forks do not slow the install (300 s
	// were not enough for it beside them and the other packages' chains
	// on a slow host).
	inventory(idle, idle)
	code, out := ansible(t, work, "-i", inv, filepath.Join(dir, "install.yml"), "-e", "freeze_src="+bin)
	if code != 0 {
		t.Fatalf("install.yml exit %d:\n%s", code, out)
	}
	for _, h := range []string{"host-a", "host-b", "host-idle", "host-bad"} {
		if _, err := os.Stat(filepath.Join(work, h, "bin", "freeze")); err != nil {
			t.Fatalf("install.yml did not install freeze for %s: %v", h, err)
		}
	}

	a, b := chain(), chain()
	inventory(a.Path, b.Path)
	code, out = ansible(t, work, "-i", inv, filepath.Join(dir, "contain.yml"), "-e", "dry_run=true", "-e", "incident_dir="+filepath.Join(work, "dry"), "-e", "freeze_local="+bin)
	if code != 2 || !strings.Contains(out, "150 live processes match") {
		t.Fatalf("dry run: exit %d (want 2: host-bad's options are refused), and each chain's 150 said:\n%s", code, out)
	}
	if n := a.Population(); n != 150 {
		t.Fatalf("the dry run changed chain a: %d of 150 left", n)
	}

	incident := filepath.Join(work, "incident")
	code, out = ansible(t, work, "-i", inv, filepath.Join(dir, "contain.yml"), "-e", "incident_dir="+incident, "-e", "freeze_local="+bin)
	if code != 2 {
		t.Fatalf("contain.yml exit %d, want 2 (one host failed):\n%s", code, out)
	}
	for _, c := range []*containtest.Chain{a, b} {
		if left := c.Survivors(); len(left) > 0 {
			t.Fatalf("%d processes of %s alive after the playbook:\n%s", len(left), c.Path, out)
		}
	}
	for h, want := range map[string][2]int{"host-a": {1, 0}, "host-b": {1, 0}, "host-idle": {0, 0}, "host-bad": {0, 1}} {
		_, changed, failed := recap(t, out, h)
		if changed != want[0] || failed != want[1] {
			t.Errorf("%s: changed=%d failed=%d, want changed=%d failed=%d", h, changed, failed, want[0], want[1])
		}
	}
	if !strings.Contains(out, `freeze exited 2 on this host`) {
		t.Errorf("host-bad's failure does not give freeze's exit code:\n%s", out)
	}
	// host-b's run was the guard's, over its socket; host-a's was not.
	byGuard := guardRequests(t, guardDir)
	if len(byGuard) != 1 || !strings.HasPrefix(byGuard[0], "socket zero ") || !strings.Contains(byGuard[0], b.Path) {
		t.Errorf("the guard on host-b ran %q, want one socket request for %s that reached zero", byGuard, b.Path)
	}
	runs, err := postmortem.LoadFleet([]string{incident})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]timeline.HostRun{}
	for _, r := range runs {
		got[r.Host] = r
	}
	if got["host-a"].Outcome != "zero" || got["host-a"].Matched != 150 || got["host-b"].Outcome != "zero" || got["host-idle"].Outcome != "nothing-matched" || len(runs) != 3 {
		t.Fatalf("timelines fetched: %+v", runs)
	}
	// Named to the microsecond: two runs on a host within one second
	// (a rerun after --hold) kept one file when names had seconds only.
	for _, r := range runs {
		if !regexp.MustCompile(`-\d{8}T\d{6}\.\d{6}Z\.jsonl$`).MatchString(r.File) {
			t.Errorf("%s: timeline %s is not named to the microsecond", r.Host, r.File)
		}
	}
	// The exit code each timeline implies is the one freeze gave there
	// (0 on these three: the recap above says none of them failed).
	for _, r := range runs {
		if r.Exit != 0 {
			t.Errorf("%s: the timeline implies exit %d, freeze exited 0", r.Host, r.Exit)
		}
	}
	pm, err := os.ReadFile(filepath.Join(incident, "postmortem.md"))
	if err != nil {
		t.Fatalf("no postmortem on the control node: %v", err)
	}
	for _, want := range []string{"| host-a | zero |", "| host-b | zero |", "| host-idle | nothing-matched |", "3 hosts, 3 runs"} {
		if !strings.Contains(string(pm), want) {
			t.Errorf("the postmortem lacks %q:\n%s", want, pm)
		}
	}
}

// startGuard starts 'freeze guard' through the harness and waits until
// it is armed; it returns its run directory.
func startGuard(t *testing.T, bin string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "run")
	// 1000 s: it must outlive three playbook runs; it is killed at
	// cleanup like any other.
	g := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 200, HopCap: 1, Timeout: 1000 * time.Second,
		Command: []string{bin, "guard", "--run-dir", dir}})
	g.WaitStderr("freeze: guard: armed", 30*time.Second)
	return dir
}

// guardRequests are the requests the guard's log records, one line each:
// source, outcome, request.
func guardRequests(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, guard.LogName))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		var e guard.RequestLine
		if json.Unmarshal([]byte(l), &e) == nil && e.Event == "request" {
			out = append(out, fmt.Sprint(e.Source, " ", e.Outcome, " ", e.Request))
		}
	}
	return out
}
