// Package testenv says what a test needs, and skips it with that reason
// where it is not there: the tiers of freeze's tests, in one place.
//
//   - fixture: no root, no process of the machine's touched; `go test
//     -short ./...` runs this tier alone.
//   - root: root, but no live chain (files of another user, BPF loads).
//   - live: real chains in real pids cgroups, capped and owned by the
//     harness (internal/containtest), and freeze acting on them.
//   - podman, docker, containerd: live, in containers of a runtime of
//     the test's own (its state in the test's directory).
//   - vm: the kernel matrix, Debian's kernels under qemu.
//
// It must never decide a test's outcome: it skips and says why, makes
// the places a test needs (SearchableTempDir), and runs a test again in a
// child process of its own (Child), whose output the test judges.
package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// RequireRoot skips t unless it runs as root; why says what for.
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("needs root (%s)", why)
	}
}

// RequireLive skips t unless it may start live chains as root: see
// RequireChains, and root.
func RequireLive(t testing.TB, why string) {
	t.Helper()
	RequireChains(t, why)
	RequireRoot(t, why)
}

// RequireChains skips t unless it may start a live chain (as any user:
// the harness caps a non-root one by RLIMIT_NPROC): not -short (the
// fixture tier), and no armed `freeze guard --auto` of the machine's,
// whose holds would take the test's chains at their caps. The harness
// asks it of every chain it starts.
func RequireChains(t testing.TB, why string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("live tier, skipped by -short (%s)", why)
	}
	if g := AutoGuard(); g != "" {
		t.Skipf("live tier, skipped: %s (%s)", g, why)
	}
}

// RequirePodman skips t unless the live tier runs and podman and runc
// are installed (.ci/run installs Debian's).
func RequirePodman(t testing.TB, why string) {
	t.Helper()
	RequireLive(t, why)
	for _, tool := range []string{"podman", "runc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (%s): install Debian's podman and runc", tool, why)
		}
	}
}

// RequireDocker skips t unless the live tier runs and Debian's docker.io
// (dockerd and its client), containerd and runc are installed.
func RequireDocker(t testing.TB, why string) {
	t.Helper()
	RequireLive(t, why)
	requireTools(t, why, "docker.io, containerd and runc", "dockerd", "containerd", "runc")
}

// RequireContainerd skips t unless the live tier runs and Debian's
// containerd (with ctr) and runc are installed.
func RequireContainerd(t testing.TB, why string) {
	t.Helper()
	RequireLive(t, why)
	requireTools(t, why, "containerd and runc", "containerd", "ctr", "runc")
}

func requireTools(t testing.TB, why, pkgs string, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (%s): install Debian's %s (.ci/run does)", tool, why, pkgs)
		}
	}
}

// ExpectGateEnv, set to 1, says that the gate loads on this machine:
// .ci/run sets it where the kernel has BTF and is 5.11 or later (the
// gate's task-local storage), as on the machine CI runs on.
const ExpectGateEnv = "FREEZE_EXPECT_GATE"

// GateMissing is what a test does when the gate, or the part of it the
// test needs, does not load (why says what the load said): it skips, or
// where the gate is expected to load (ExpectGateEnv) it fails. From
// 5c8ef2f to de19f4c the gate did not load on the CI host (a refused
// RLIMIT_MEMLOCK raise was fatal) and every gate test skipped, its
// reason read by nobody; the runs passed.
func GateMissing(t testing.TB, why string) {
	t.Helper()
	if os.Getenv(ExpectGateEnv) == "1" {
		t.Fatalf("the gate does not load, and %s=1 says it does here: %s", ExpectGateEnv, why)
	}
	t.Skipf("the gate does not load here: %s", why)
}

// RequireVM skips t unless the kernel matrix can boot: not -short, root,
// qemu, and FREEZE_VM_CACHE naming the fetched kernels.
func RequireVM(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("vm tier, skipped by -short")
	}
	if os.Getenv("FREEZE_VM_CACHE") == "" {
		t.Skip("FREEZE_VM_CACHE is not set: run 'internal/vmtest/fetch-kernels DIR', then FREEZE_VM_CACHE=DIR go test ./internal/vmtest (as .ci/run does)")
	}
	RequireRoot(t, "the suite inside runs as root, and building its tree reads root's tools")
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("no qemu-system-x86_64: install Debian's qemu-system-x86")
	}
}

var autoGuard struct {
	sync.Once
	says string
}

// AutoGuard names an armed `freeze guard --auto` that no test started
// (none of its ancestors is a Go test binary), or "". Its holds take any
// chain at its cap, a test's too.
func AutoGuard() string {
	autoGuard.Do(func() { autoGuard.says = findAutoGuard("/proc") })
	return autoGuard.says
}

func findAutoGuard(procRoot string) string {
	ents, _ := os.ReadDir(procRoot)
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		argv := readArgv(procRoot, pid)
		if !isAutoGuard(argv) || underATest(procRoot, pid) {
			continue
		}
		return fmt.Sprintf("an armed freeze guard --auto of the machine's (pid %d: %s) holds chains at their caps, the tests' too; stop it to run this tier", pid, strings.Join(argv, " "))
	}
	return ""
}

// isAutoGuard: a freeze binary's argv with the guard subcommand and
// --auto.
func isAutoGuard(argv []string) bool {
	if len(argv) < 2 || !strings.HasPrefix(filepath.Base(argv[0]), "freeze") {
		return false
	}
	guard, auto := false, false
	for _, a := range argv[1:] {
		guard = guard || a == "guard"
		auto = auto || a == "--auto" || strings.HasPrefix(a, "--auto=") && a != "--auto=false"
	}
	return guard && auto
}

// underATest: one of pid's ancestors runs a Go test binary (NAME.test).
func underATest(procRoot string, pid int) bool {
	for i := 0; i < 64 && pid > 1; i++ {
		exe, _ := os.Readlink(filepath.Join(procRoot, strconv.Itoa(pid), "exe"))
		if strings.HasSuffix(strings.TrimSuffix(exe, " (deleted)"), ".test") {
			return true
		}
		b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
		if err != nil {
			return false
		}
		// pid (comm) state ppid: comm may hold spaces and parentheses.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 2 {
			return false
		}
		pid, _ = strconv.Atoi(f[1])
	}
	return false
}

func readArgv(procRoot string, pid int) []string {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "cmdline"))
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}

// SearchableTempDir is t.TempDir() made searchable by every user (0755,
// with its parent, the test's own directory): a place whose files
// another user can reach, as /run is for /run/freeze. Only for what a
// test means other users to read.
func SearchableTempDir(t testing.TB) string {
	t.Helper()
	d := t.TempDir()
	for _, p := range []string{filepath.Dir(d), d} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}
