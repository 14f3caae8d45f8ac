// Package deploy_test tests what runs freeze beyond one machine (the
// systemd unit, the Ansible playbooks, the Kubernetes manifests, the
// Prometheus rules) with each ecosystem's own tools, against a real
// build of freeze. Its own package, so that go test runs it beside
// cmd/freeze's tests rather than after them.
package deploy_test

import (
	"context"
	"encoding/json"
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

	"freeze/internal/containtest"
	"freeze/internal/priority"
	"freeze/runbooks"
)

// The tests run under the containment harness: the Ansible test's chains
// are capped, owned and reaped like every other package's.
func TestMain(m *testing.M) {
	priority.Lower()
	os.Exit(containtest.Main(m))
}

// buildFreeze returns the test's own copy of a real build of freeze.
func buildFreeze(t *testing.T) string {
	t.Helper()
	return containtest.GoBinary(t, "../cmd/freeze", "freeze", "")
}

// needTool skips a test whose ecosystem's tool is missing, except under
// CI (CI=true), where .ci/run installs it and a skip would hide a check.
func needTool(t *testing.T, tool, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(tool)
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s not found under CI: .ci/run must install Debian's %s", tool, pkg)
	}
	t.Skipf("%s not found (apt-get install %s): .ci/run installs it", tool, pkg)
	return ""
}

// The alerting rules pass Prometheus' own checks and unit tests
// (promtool), and every runbook_url names a runbook freeze has and a step
// that runbook has.
func TestPrometheusRules(t *testing.T) {
	promtool := needTool(t, "promtool", "prometheus")
	dir := "prometheus"
	for _, args := range [][]string{{"check", "rules", "freeze.rules.yml"}, {"test", "rules", "freeze.rules.test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "freeze.rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	urls := regexp.MustCompile(`runbook_url: https://runbooks\.example\.org/freeze/([a-z-]+)\.md#step-([0-9]+)`).FindAllStringSubmatch(string(b), -1)
	if alerts := strings.Count(string(b), "- alert:"); len(urls) != alerts {
		t.Fatalf("%d alerts but %d runbook_urls of the documented form", alerts, len(urls))
	}
	for _, u := range urls {
		text, ok := runbooks.Get(u[1])
		if !ok {
			t.Errorf("runbook_url names runbook %q, which freeze does not have", u[1])
			continue
		}
		n, _ := strconv.Atoi(u[2])
		if !regexp.MustCompile(`(?m)^`+u[2]+`\. <a id="step-`+u[2]+`"></a>`).MatchString(text) || n < 1 {
			t.Errorf("runbook_url names step %s of %s, which has no such step", u[2], u[1])
		}
	}
}

// The guard's systemd unit passes systemd's own check, runs the real
// binary's guard command, and keeps the settings that make it a guard
// (the list): a misspelt directive or a wrong ExecStart fails.
func TestSystemdUnitVerifies(t *testing.T) {
	needTool(t, "systemd-analyze", "systemd")
	b, err := os.ReadFile("systemd/freeze-guard.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	for _, want := range []string{
		"ExecStart=/usr/local/bin/freeze guard --run-dir /run/freeze $FREEZE_GUARD_ARGS",
		"EnvironmentFile=-/etc/default/freeze-guard", "Type=notify", "WatchdogSec=", "MemoryMax=384M", "Documentation=man:freeze(1)",
		"Restart=always", "CPUSchedulingPolicy=rr", "OOMScoreAdjust=-1000",
		"TasksMax=", "MemoryMin=", "CAP_BPF", "RuntimeDirectoryMode=0700",
	} {
		if !strings.Contains(unit, want) {
			t.Errorf("the unit lacks %q", want)
		}
	}
	// The Ansible role's template is this unit, with the role's binary
	// directory: the role is self-contained, and says the same.
	tmpl, err := os.ReadFile("ansible/roles/freeze/templates/freeze-guard.service.j2")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitN(string(tmpl), "\n", 4)
	if len(lines) < 4 || strings.ReplaceAll(lines[3], "{{ freeze_bin_dir }}/freeze", "/usr/local/bin/freeze") != unit {
		t.Errorf("deploy/ansible/roles/freeze/templates/freeze-guard.service.j2 differs from the unit: regenerate it (sed 's#/usr/local/bin/freeze#{{ freeze_bin_dir }}/freeze#g' after its three header lines)")
	}
	// systemd-analyze checks that ExecStart's program exists: point it at
	// a real build, and check that build takes the unit's arguments.
	bin := buildFreeze(t)
	if out, err := exec.Command(bin, "guard", "--run-dir", "/run/freeze", "--help").CombinedOutput(); err != nil {
		t.Fatalf("the unit's command line is not one freeze takes: %v\n%s", err, out)
	}
	path := filepath.Join(t.TempDir(), "freeze-guard.service")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(unit, "/usr/local/bin/freeze", bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	// --man=no: the man page its Documentation= names comes with the
	// package (.ci/run verifies the installed unit with it).
	out, err := exec.Command("systemd-analyze", "verify", "--man=no", path).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	// Its exposure, as systemd scores it offline: at most 5.0 (the
	// threshold is in tenths). A directive dropped from the hardening
	// raises it past that.
	if out, err := exec.Command("systemd-analyze", "security", "--offline=true", "--threshold=50", path).CombinedOutput(); err != nil {
		t.Errorf("the unit's exposure is above 5.0: %v\n%s", err, out)
	}
}

// The Kubernetes manifests decode strictly against the Kubernetes API
// types (deploy/kubernetes/check, a module of its own so that k8s.io/api
// stays out of freeze's), and the freeze command lines in them are ones
// freeze takes.
func TestKubernetesManifests(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "./...")
	cmd.Dir = "kubernetes/check"
	// Its own process group, killed whole on timeout.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the manifests' strict decoding (cd deploy/kubernetes/check && go test ./...): %v\n%s", err, out)
	}
	bin := buildFreeze(t)
	files, _ := filepath.Glob("kubernetes/*.yaml")
	seen := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`(?m)^\s*command: (\[.*\])$`).FindAllStringSubmatch(string(b), -1) {
			var argv []string
			if err := json.Unmarshal([]byte(m[1]), &argv); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			// /freeze node -- ARGS: ARGS are freeze's words on the node.
			i := slices.Index(argv, "--")
			if len(argv) < 3 || argv[0] != "/freeze" || argv[1] != "node" || i != 2 {
				continue
			}
			seen++
			args := append(append([]string{}, argv[i+1:]...), "--help")
			if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
				t.Errorf("%s: freeze does not take %q: %v\n%s", f, argv[i+1:], err, out)
			}
		}
	}
	if seen != 2 {
		t.Fatalf("%d freeze command lines found in the manifests, want 2 (the guard's and the job's)", seen)
	}
}
