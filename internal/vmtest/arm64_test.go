package vmtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"freeze/internal/testenv"
)

// TestArm64Boot boots Debian's arm64 6.12 kernel (trixie's
// linux-image-6.12.*-arm64) under qemu-system-aarch64 (virt, TCG) with
// freeze and its test binaries cross-compiled for arm64 (static, cgo on,
// as the package builds them), and runs the arm64 list: a drill with what
// auto picks, one under each gate form forced (a form that loads must
// reach zero through the gate in that form, and one form at least must
// load: the gate's arm64 object), one by cgroup2, the gate's own tests
// of a spinning chain and an exec, the stop order by the gate, freeze
// run's fork bomb, and nothing left.
//
// Opt-in (FREEZE_VM_ARM64=1): emulating arm64 on this amd64 host is
// slower than the x86 boots, and .ci/run's 25 minutes have no room for it.
// Its parts: internal/vmtest/fetch-arm64 $FREEZE_VM_CACHE, Debian's
// qemu-system-arm, gcc-aarch64-linux-gnu and libc6-dev-arm64-cross.
func TestArm64Boot(t *testing.T) {
	testenv.RequireVM(t)
	if os.Getenv("FREEZE_VM_ARM64") != "1" {
		t.Skip("the arm64 boot is opt-in: FREEZE_VM_ARM64=1 (after internal/vmtest/fetch-arm64 $FREEZE_VM_CACHE)")
	}
	parts := filepath.Join(os.Getenv("FREEZE_VM_CACHE"), "arm64")
	for _, f := range []string{"vmlinuz", "busybox", "bash"} {
		if _, err := os.Stat(filepath.Join(parts, f)); err != nil {
			t.Fatalf("no arm64 %s: run internal/vmtest/fetch-arm64 %s", f, os.Getenv("FREEZE_VM_CACHE"))
		}
	}
	qemu, err := exec.LookPath("qemu-system-aarch64")
	if err != nil {
		t.Fatal("no qemu-system-aarch64: apt-get install qemu-system-arm (on Debian 12 after .ci/run, apt-get install -t bookworm-backports qemu-system-arm: it shares qemu-system-common with the x86 qemu .ci/run takes from there)")
	}
	if _, err := exec.LookPath("aarch64-linux-gnu-gcc"); err != nil {
		t.Fatal("no aarch64-linux-gnu-gcc: apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross")
	}
	root := arm64Tree(t, parts)
	common := filepath.Join(t.TempDir(), "arm64.cpio")
	cpio(t, root, common)
	mods := t.TempDir() // no module: the list needs none
	if err := os.WriteFile(filepath.Join(mods, "order"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	kernel, _ := os.ReadFile(filepath.Join(parts, "kernel"))
	b := boot{name: "debian-arm64", kernel: filepath.Join(parts, "vmlinuz"), modules: mods, arm64: true, append: "vmtest.suite=arm64"}
	r := runBoot(t, qemu, b, common)
	checkArm64(t, b, r)
	t.Logf("%s (%s, %s, lsm=%s, %v)\n%s", b.name, strings.TrimSpace(string(kernel)), r.kernel, r.lsm, r.took.Round(time.Second), r.figures())
}

// arm64Tree is guestTree's root for arm64: busybox and bash-static from
// Debian's arm64 packages, freeze and the test binaries cross-compiled,
// static (no library to copy), the chain fixture by the cross compiler.
func arm64Tree(t *testing.T, parts string) string {
	t.Helper()
	root := t.TempDir()
	mod, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	mkTreeDirs(t, root)
	static := "-linkmode external -extldflags -static"
	build := func(args ...string) {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = mod
		cmd.Env = append(os.Environ(), "GOARCH=arm64", "CGO_ENABLED=1", "CC=aarch64-linux-gnu-gcc")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("GOARCH=arm64 go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	build("build", "-tags", "osusergo,netgo", "-ldflags", static, "-o", filepath.Join(root, "bin/freeze"), "./cmd/freeze")
	build("test", "-c", "-tags", "osusergo,netgo", "-ldflags", static, "-o", filepath.Join(root, "t/gate.test"), "./internal/gate")
	build("test", "-c", "-tags", "osusergo,netgo", "-ldflags", static, "-o", filepath.Join(root, "t/stop.test"), "./internal/stop/live")
	build("test", "-c", "-tags", "osusergo,netgo", "-ldflags", static, "-o", filepath.Join(root, "t/cmd.test"), "./cmd/freeze/live")
	if out, err := exec.Command("aarch64-linux-gnu-gcc", "-O2", "-static", "-o", filepath.Join(root, "t/chain"),
		filepath.Join(mod, "internal/containtest/fixture/chain.c")).CombinedOutput(); err != nil {
		t.Fatalf("build the chain fixture for arm64: %v\n%s", err, out)
	}
	copyFile(t, filepath.Join(parts, "busybox"), filepath.Join(root, "bin/busybox"), 0o755)
	copyFile(t, filepath.Join(parts, "bash"), filepath.Join(root, "bin/sh"), 0o755)
	copyFile(t, filepath.Join(parts, "bash"), filepath.Join(root, "bin/bash"), 0o755)
	copyFile(t, "guest/init", filepath.Join(root, "init"), 0o755)
	copyFile(t, "guest/suite", filepath.Join(root, "suite"), 0o644)
	os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0:root:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"), 0o644)
	os.WriteFile(filepath.Join(root, "etc/group"), []byte("root:x:0:\nnogroup:x:65534:\n"), 0o644)
	return root
}

// checkArm64 checks the arm64 list: every step passed, a form that
// loads reached zero through the gate in that form, at least one did,
// and the required tests passed (not skipped).
func checkArm64(t *testing.T, b boot, r *result) {
	t.Helper()
	if !r.done {
		t.Errorf("%s: the suite did not finish (no VMTEST DONE)", b.name)
	}
	checkSteps(t, b, r, "drill-auto-tree", "drill-cgroup2-tree", "gate-auto", "stop-order", "run-v2", "leftovers")
	anyForm := checkFormDrills(t, b, r)
	if !anyForm {
		t.Errorf("%s: no form of the gate loads: the arm64 object did not load\n%s", b.name, tail(r.lines["drill-auto-tree"], 30))
	}
	for _, name := range []string{"TestGateStopsASpinningChainAndNotItsDecoy", "TestGateStopsAnExecOfTheTarget", "TestStopOrderReachesZero/bpf/tree", "TestRunCapStopsAForkBomb"} {
		if !r.passed(name) {
			t.Errorf("%s: %s did not pass", b.name, name)
		}
	}
	noFailures(t, b, r)
}
