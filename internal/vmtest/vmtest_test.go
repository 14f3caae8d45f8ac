package vmtest

import (
	"bufio"
	"context"
	"fmt"
	"freeze/internal/testenv"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Bounds of the matrix, as literals.
const (
	// bootDeadline bounds one VM, boot to poweroff: measured here under
	// TCG with -smp 2, a boot is 25-40 s and the suite a few minutes.
	bootDeadline = 30 * time.Minute
	vmMemory     = "2048"
)

// A boot is one kernel with one command line.
type boot struct {
	name    string
	kernel  string // vmlinuz
	modules string // the .modules directory fetch-kernels made
	append  string
	// form is the form the drill's auto run must name.
	form string
	// systemd boots systemd as PID 1 (systemdTree) and runs the systemd
	// suite instead of the gate's.
	systemd bool
	// short runs the short list (vmtest.suite=short): a drill under each
	// form that loads, the stop order by the gate and by cgroup2, a chain
	// on overlayfs, freeze run's fork bomb, leftovers; form is then what
	// the kernel's probe says, not a literal.
	short bool
	// forms runs the forms list (vmtest.suite=forms): the drills and the
	// gate's tests, what a command line changes on a kernel another boot
	// runs in full.
	forms bool
	// arm64 boots the kernel under qemu-system-aarch64 (virt, TCG) with
	// the arm64 tree (arm64Tree), and runs the arm64 list.
	arm64 bool
}

// TestKernelMatrix boots Debian's kernels under qemu (TCG) and runs the
// gate's suite inside each: the gate's own tests under the form auto
// picks and under the stopping form, the stop order by bpf, overlayfs
// and btrfs, --hold then finishing, drills, freeze run's control tests
// on cgroup v2, and a check that nothing is left loaded; and once more
// with systemd as PID 1, the guard's unit as shipped (systemd-suite). It
// reads a line per test from the serial console and fails on any failure, on a required test that skipped, and on a drill
// whose gate is not the form the kernel should give. The kernels come
// from internal/vmtest/fetch-kernels; set FREEZE_VM_CACHE to its
// directory (.ci/run does).
func TestKernelMatrix(t *testing.T) {
	testenv.RequireVM(t)
	cache := os.Getenv("FREEZE_VM_CACHE")
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Fatal(err)
	}
	boots := kernels(t, cache)
	// FREEZE_VM_ONLY=REGEXP boots only the kernels whose names match (by
	// hand, while working on one kernel; CI boots them all).
	if only := os.Getenv("FREEZE_VM_ONLY"); only != "" {
		re := regexp.MustCompile(only)
		boots = slices.DeleteFunc(boots, func(b boot) bool { return !re.MatchString(b.name) })
	}
	root := guestTree(t)
	common := filepath.Join(t.TempDir(), "common.cpio")
	cpio(t, root, common)
	sd := filepath.Join(t.TempDir(), "systemd.cpio")
	cpio(t, systemdTree(t, root), sd)
	// Each VM runs on one host thread (single-threaded TCG): two at a
	// time on this machine's two cores.
	slots := make(chan struct{}, 2)
	figures := make([]string, len(boots))
	t.Run("boots", func(t *testing.T) {
		for i, b := range boots {
			t.Run(b.name, func(t *testing.T) {
				t.Parallel()
				slots <- struct{}{}
				defer func() { <-slots }()
				parts := []string{common}
				if b.systemd {
					parts = append(parts, sd)
				}
				if b.short {
					b.append += " vmtest.suite=short"
				}
				if b.forms {
					b.append += " vmtest.suite=forms"
				}
				r := runBoot(t, qemu, b, parts...)
				check(t, b, r)
				figures[i] = fmt.Sprintf("%s (%s, lsm=%s, %v)\n%s", b.name, r.kernel, r.lsm, r.took.Round(time.Second), r.figures())
			})
		}
	})
	report := strings.Join(figures, "")
	t.Logf("figures (TCG: compare within a boot):\n%s", report)
	if out := os.Getenv("FREEZE_VM_REPORT"); out != "" {
		os.WriteFile(out, []byte(report), 0o644)
	}
}

// kernels finds the fetched kernels: bookworm's 6.1 and trixie's 6.12,
// and 6.12 again booted with bpf left out of lsm=.
func kernels(t *testing.T, cache string) []boot {
	t.Helper()
	find := func(pat string) (string, string) {
		m, _ := filepath.Glob(filepath.Join(cache, pat+".vmlinuz"))
		sort.Strings(m)
		if len(m) == 0 {
			t.Fatalf("no kernel %s.vmlinuz in %s: run internal/vmtest/fetch-kernels %s", pat, cache, cache)
		}
		k := m[len(m)-1]
		mods := strings.TrimSuffix(k, ".vmlinuz") + ".modules"
		if _, err := os.Stat(filepath.Join(mods, "order")); err != nil {
			t.Fatalf("no modules for %s: run internal/vmtest/fetch-kernels again", k)
		}
		return k, mods
	}
	k510, m510 := find("linux-image-5.10.0-*-amd64")
	k61, m61 := find("linux-image-6.1.0-*-amd64")
	k612, m612 := find("linux-image-6.12.*+deb13-amd64")
	kNew, mNew := find("linux-image-*+deb1[4-9]-amd64")
	lsm := configLSM(t, strings.TrimSuffix(k612, ".vmlinuz")+".config")
	return []boot{
		{name: "debian-6.1", kernel: k61, modules: m61, form: "refuse (lsm)"},
		{name: "debian-6.12", kernel: k612, modules: m612, form: "refuse (lsm)"},
		// Without bpf in lsm= the BPF LSM's hooks never run: auto must
		// not take the lsm form there, and takes fmod_ret, which hooks
		// security_* itself; the stopping form is run there too.
		// Only what the command line changes (the forms list): the rest
		// is debian-6.12's, the same kernel (it took 6m36s of the
		// matrix's 15 minutes in full).
		{name: "debian-6.12-lsm-without-bpf", kernel: k612, modules: m612, form: "refuse (fmod_ret)", append: "lsm=" + dropWord(lsm, "bpf"), forms: true},
		// systemd as PID 1: the guard's unit as shipped, and freeze in a
		// unit's group, as on a distribution's host.
		{name: "debian-6.12-systemd", kernel: k612, modules: m612, systemd: true},
		// The matrix's two ends, on the short list, last (the long boots
		// take a slot each first): Debian 11's 5.10 (no cgroup.kill, the
		// BPF LSM built but not in the default lsm=, no memcg accounting
		// of BPF memory), and sid's newest kernel, what users get next.
		{name: "debian-5.10", kernel: k510, modules: m510, short: true},
		{name: "debian-newest", kernel: kNew, modules: mNew, short: true},
	}
}

// configLSM is the kernel's default LSM list (CONFIG_LSM), from its
// config as the package ships it.
func configLSM(t *testing.T, config string) string {
	t.Helper()
	b, err := os.ReadFile(config)
	if err != nil {
		t.Fatalf("the kernel's config: %v: run internal/vmtest/fetch-kernels again", err)
	}
	m := regexp.MustCompile(`(?m)^CONFIG_LSM="([^"]*)"$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no CONFIG_LSM in %s", config)
	}
	return string(m[1])
}

// result is what one boot printed.
type result struct {
	kernel, lsm string
	steps       map[string]int               // step -> rc
	tests       map[string]map[string]string // step -> test -> PASS/FAIL/SKIP
	lines       map[string][]string          // step -> its output
	done        bool
	took        time.Duration
}

var (
	endRE  = regexp.MustCompile(`^VMTEST END (\S+) rc=(\d+)$`)
	testRE = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+)`)
	kernRE = regexp.MustCompile(`VMTEST KERNEL (\S+) lsm=(\S*) `) // not anchored: 7.2 clears the console before it
)

func runBoot(t *testing.T, qemu string, b boot, archives ...string) *result {
	t.Helper()
	dir := t.TempDir()
	mods := filepath.Join(dir, "modules")
	if err := os.MkdirAll(filepath.Join(mods, "modules"), 0o755); err != nil {
		t.Fatal(err)
	}
	copyFiles(t, b.modules, filepath.Join(mods, "modules"))
	modCpio := filepath.Join(dir, "modules.cpio")
	cpio(t, mods, modCpio)
	initrd := filepath.Join(dir, "initrd.cpio")
	// The kernel unpacks concatenated archives in order, a later file
	// over an earlier one (the systemd boot's /init over the common one).
	concat(t, initrd, append(archives, modCpio)...)
	ctx, cancel := context.WithTimeout(context.Background(), bootDeadline)
	defer cancel()
	// Single-threaded TCG: under multi-threaded TCG the 6.12 guest
	// crashed while a tp_btf program attached (Oops: int3 in
	// syscall_trace_enter: the kernel patches its text through int3, and
	// that cross-CPU code modification is what MTTCG gets wrong).
	machine, console := []string{}, "ttyS0"
	if b.arm64 {
		// The virt board's PL011 is the serial console; PSCI powers
		// the guest off.
		machine, console = []string{"-M", "virt", "-cpu", "max"}, "ttyAMA0"
	}
	args := append(machine, "-accel", "tcg,thread=single", "-smp", "2", "-m", vmMemory,
		"-kernel", b.kernel, "-initrd", initrd,
		"-append", "console="+console+" panic=-1 quiet "+strings.TrimSpace(b.append),
		"-nographic", "-no-reboot", "-nodefaults", "-serial", "stdio", "-monitor", "none")
	cmd := exec.CommandContext(ctx, qemu, args...)
	// Owned: qemu in a process group of its own, killed as a group at the
	// deadline, on failure and at cleanup.
	cmd.SysProcAttr = ownGroup()
	cmd.Cancel = func() error { return killGroup(cmd) }
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killGroup(cmd); cmd.Wait() })
	r := &result{steps: map[string]int{}, tests: map[string]map[string]string{}, lines: map[string][]string{}}
	// The serial console, as it comes, for reading while a boot runs.
	logFile := filepath.Join(os.TempDir(), "freeze-vm-"+b.name+".log")
	log, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	t.Logf("%s: serial console in %s", b.name, logFile)
	step := ""
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		log.WriteString(line + "\n")
		switch {
		case strings.HasPrefix(line, "VMTEST BEGIN "):
			step = strings.TrimPrefix(line, "VMTEST BEGIN ")
			r.tests[step] = map[string]string{}
		case endRE.MatchString(line):
			m := endRE.FindStringSubmatch(line)
			var rc int
			fmt.Sscan(m[2], &rc)
			r.steps[m[1]] = rc
			t.Logf("%s: step %s rc=%d (%v)", b.name, m[1], rc, time.Since(t0).Round(time.Second))
			step = ""
		case kernRE.MatchString(line):
			m := kernRE.FindStringSubmatch(line)
			r.kernel, r.lsm = m[1], m[2]
		case line == "VMTEST DONE":
			r.done = true
		case step != "":
			r.lines[step] = append(r.lines[step], line)
			if m := testRE.FindStringSubmatch(line); m != nil {
				r.tests[step][m[2]] = m[1]
			}
		}
	}
	cmd.Wait()
	r.took = time.Since(t0)
	t.Logf("%s: powered off after %v", b.name, r.took.Round(time.Second))
	if ctx.Err() != nil {
		t.Fatalf("%s: the VM did not power off within %v", b.name, bootDeadline)
	}
	return r
}

// required are the tests that must pass, not skip, in each step.
var required = map[string][]string{
	"gate-auto": {"TestGateStopsASpinningChainAndNotItsDecoy", "TestGateFollowsAChainThatExecsAnotherBinary",
		"TestGateStopsAnExecOfTheTarget", "TestMarkGatesAProcessByPid", "TestLineageMarksChildrenOfAGatedProcess",
		"TestGateHoldsAChainOnOverlayfs", "TestGateHoldsAChainOnBtrfs", "TestTasksAgreesWithProc",
		"TestRecorderRecordsArgvAtExec"},
	"gate-tp_btf": {"TestGateStopsASpinningChainAndNotItsDecoy", "TestGateFollowsAChainThatExecsAnotherBinary",
		"TestGateStopsAnExecOfTheTarget", "TestMarkGatesAProcessByPid", "TestGateKillEmptiesASpinningChain"},
	"stop-order": {"TestStopOrderReachesZero/bpf/tree", "TestStopOrderReachesZero/bpf/churn"},
	"stop-fs": {"TestStopOrderReachesZeroOnOverlayfsAndBtrfs/overlayfs/bpf", "TestStopOrderReachesZeroOnOverlayfsAndBtrfs/overlayfs/bpf-procscan",
		"TestStopOrderReachesZeroOnOverlayfsAndBtrfs/btrfs/bpf", "TestHoldThenRunReusesOneGroup/bpf", "TestHoldThenRunReusesOneGroup/cgroup2"},
	// cgroup2 holds a chain at its cap of 300 without freeing a slot
	// (the gate's case is run too, and passes where the gate loads).
	"cap-cgroup2": {"TestNoMethodFreesASlotUnderTheCap/cgroup2"},
	// freeze run on cgroup v2 (the fork bomb's test checks the kind).
	"run-v2": {"TestRunLeavesNothingOfASessionEscape", "TestRunNamesALeftoversPort", "TestRunCapStopsAForkBomb",
		"TestRunPassesTheStatusThrough", "TestRunSIGTERMLeavesNothing", "TestRunSIGTERMAtTheCommandsStartLeavesNothing",
		"TestRunReapEndsWhatAKilledRunLeft", "TestRunNestedInsideAnotherRun"},
}

// systemdSteps are the systemd suite's steps.
var systemdSteps = []string{"sd-guard", "sd-drill", "sd-drill-fifo", "sd-drill-socket", "sd-revoke-home", "sd-tasksmax", "sd-auto-on-cap", "cap-cgroup2", "run-v2",
	"sd-watchdog", "sd-security", "leftovers"}

func check(t *testing.T, b boot, r *result) {
	t.Helper()
	if !r.done {
		t.Errorf("%s: the suite did not finish (no VMTEST DONE)", b.name)
	}
	if b.short {
		checkShort(t, b, r)
		return
	}
	steps := []string{"drill-auto-tree", "drill-tp_btf-tree", "drill-auto-churn", "drill-tp_btf-churn", "drill-cgroup2-tree", "cap-cgroup2",
		"gate-auto", "gate-tp_btf", "stop-order", "stop-fs", "run-v2", "leftovers"}
	if b.systemd {
		steps = systemdSteps
	}
	if b.forms {
		steps = []string{"drill-auto-tree", "drill-tp_btf-tree", "drill-auto-churn", "drill-tp_btf-churn", "gate-auto", "gate-tp_btf", "leftovers"}
	}
	checkSteps(t, b, r, steps...)
	for s, tests := range required {
		if b.systemd && s != "run-v2" && s != "cap-cgroup2" {
			continue // the gate's steps are not the systemd suite's
		}
		if b.forms && s != "gate-auto" && s != "gate-tp_btf" {
			continue // the forms list runs the gate's steps alone
		}
		for _, name := range tests {
			if got := r.tests[s][name]; got != "PASS" {
				t.Errorf("%s: %s: %s is %q, want PASS", b.name, s, name, got)
			}
		}
	}
	noFailures(t, b, r)
	if b.systemd {
		return
	}
	if !b.forms {
		checkCap(t, b, r, "drill-cgroup2-tree")
	}
	// The drills: the gate, with no fallback. Auto holds the chain with
	// the stop, and loads the refusing form only when it is wanted (a
	// hold, or a second kill round), so its drill attaches as tp_btf's.
	for _, s := range []string{"drill-auto-tree", "drill-auto-churn", "drill-tp_btf-tree", "drill-tp_btf-churn"} {
		out := strings.Join(r.lines[s], "\n")
		if !strings.Contains(out, "gate attached, form stop (tp_btf) ") {
			t.Errorf("%s: %s: no 'gate attached, form stop (tp_btf)':\n%s", b.name, s, tail(r.lines[s], 30))
		}
		if strings.Contains(out, "falling back") {
			t.Errorf("%s: %s fell back from the gate", b.name, s)
		}
	}
	// And where the refusal is wanted (the gate's tests attach it all),
	// auto reaches the refusing form this kernel must give.
	if out := strings.Join(r.lines["gate-auto"], "\n"); !strings.Contains(out, "(form "+b.form+")") {
		t.Errorf("%s: gate-auto: no chain held in form %s:\n%s", b.name, b.form, tail(r.lines["gate-auto"], 30))
	}
}

// forms are the gate's forms a short boot forces, each with the probe's
// lines that must all say "loads" for the form to load there.
var forms = []struct {
	word, name string
	needs      []string
}{
	{"lsm", "refuse (lsm)", []string{"BPF lsm/task_alloc ", "BPF lsm/bprm_check_security ", "BPF the BPF LSM's hooks:"}},
	{"fmod_ret", "refuse (fmod_ret)", []string{"BPF fmod_ret/security_task_alloc ", "BPF fmod_ret/security_bprm_check "}},
	{"tp_btf", "stop (tp_btf)", []string{"BPF tp_btf/sys_enter "}},
}

// loads reports whether every one of the probe's lines named by needs,
// as the auto drill printed them, says the program loads, with the
// first line that does not.
func (r *result) loads(needs []string) (bool, string) {
	common := []string{"BPF tp_btf/sched_process_fork ", "BPF tp_btf/sched_process_exec "}
	for _, n := range append(common, needs...) {
		found := ""
		for _, l := range r.lines["drill-auto-tree"] {
			if strings.Contains(l, "machine:   "+n) {
				found = l
			}
		}
		if found == "" {
			// No program was probed: the gate's maps did not load.
			for _, l := range r.lines["drill-auto-tree"] {
				if i := strings.Index(l, "machine: method bpf: "); i >= 0 {
					return false, l[i+len("machine: "):]
				}
			}
			return false, n + ": no probe line"
		}
		if !strings.HasSuffix(strings.TrimSpace(found), ": loads") && !strings.Contains(found, "): loads (") && !strings.Contains(found, ": loads (") {
			return false, found[strings.Index(found, "BPF "):]
		}
	}
	return true, ""
}

// checkSteps fails the boot for each step that never ended or failed.
func checkSteps(t *testing.T, b boot, r *result, steps ...string) {
	t.Helper()
	for _, s := range steps {
		rc, ok := r.steps[s]
		switch {
		case !ok:
			t.Errorf("%s: step %s never ended", b.name, s)
		case rc != 0:
			t.Errorf("%s: step %s failed (rc=%d):\n%s", b.name, s, rc, tail(r.lines[s], 40))
		}
	}
}

// passed reports whether a test passed in any step.
func (r *result) passed(name string) bool {
	for _, tests := range r.tests {
		if tests[name] == "PASS" {
			return true
		}
	}
	return false
}

// noFailures fails the boot for each test that failed in any step.
func noFailures(t *testing.T, b boot, r *result) {
	t.Helper()
	for s, tests := range r.tests {
		for name, v := range tests {
			if v == "FAIL" {
				t.Errorf("%s: %s: %s failed", b.name, s, name)
			}
		}
	}
}

// checkFormDrills checks each form's drill (drill-FORM-tree): a form
// that loads (by the kernel's probe) reached zero through the gate in
// that form; one that does not is reported, not failed. It says whether
// any form loads.
func checkFormDrills(t *testing.T, b boot, r *result) bool {
	t.Helper()
	anyForm := false
	for _, f := range forms {
		step := "drill-" + f.word + "-tree"
		ok, why := r.loads(f.needs)
		if !ok {
			t.Logf("%s: form %s does not load here (%s)", b.name, f.word, why)
			continue
		}
		anyForm = true
		out := strings.Join(r.lines[step], "\n")
		if rc := r.steps[step]; rc != 0 || !strings.Contains(out, "gate attached, form "+f.name+" ") || strings.Contains(out, "falling back") {
			t.Errorf("%s: form %s loads here, but its drill did not reach zero through it (rc=%d):\n%s", b.name, f.word, rc, tail(r.lines[step], 30))
		}
	}
	return anyForm
}

// checkShort checks a boot of the short list: the auto drill and the
// cgroup2 drill reach zero, each form that loads there reaches zero
// through the gate in that form (one that does not load is reported,
// not failed), and the tests of the stop order, overlayfs and freeze
// run's fork bomb pass: by the gate where any form loads.
func checkShort(t *testing.T, b boot, r *result) {
	t.Helper()
	checkSteps(t, b, r, "drill-auto-tree", "drill-cgroup2-tree", "drill-overlay-cgroup2", "drill-overlay-auto", "cap-cgroup2", "stop-order", "stop-fs", "run-v2", "auto-on-cap", "cap-notice", "leftovers")
	checkCap(t, b, r, "drill-cgroup2-tree", "drill-overlay-cgroup2")
	anyForm := checkFormDrills(t, b, r)
	var required []string
	if anyForm {
		required = append(required, "TestStopOrderReachesZero/bpf/tree", "TestStopOrderReachesZero/bpf/churn",
			"TestStopOrderReachesZeroOnOverlayfsAndBtrfs/overlayfs/bpf")
	}
	// The drills on overlayfs ran from it.
	for _, s := range []string{"drill-overlay-cgroup2", "drill-overlay-auto"} {
		if !strings.Contains(strings.Join(r.lines[s], "\n"), "/ov/merged/freeze-drill-") {
			t.Errorf("%s: %s did not run its chain from the overlay:\n%s", b.name, s, tail(r.lines[s], 20))
		}
	}
	for _, name := range required {
		if !r.passed(name) {
			t.Errorf("%s: %s did not pass", b.name, name)
		}
	}
	if !strings.Contains(strings.Join(r.lines["cap-cgroup2"], "\n"), "--- PASS: TestNoMethodFreesASlotUnderTheCap/cgroup2") {
		t.Errorf("%s: cgroup2 at the chain's cap did not pass:\n%s", b.name, tail(r.lines["cap-cgroup2"], 30))
	}
	if !strings.Contains(strings.Join(r.lines["run-v2"], "\n"), "--- PASS: TestRunCapStopsAForkBomb") {
		t.Errorf("%s: freeze run's fork bomb test did not pass:\n%s", b.name, tail(r.lines["run-v2"], 30))
	}
	if !strings.Contains(strings.Join(r.lines["auto-on-cap"], "\n"), "--- PASS: TestGuardAutoOnCapHoldsTheCappedChain") {
		t.Errorf("%s: the guard's --auto-on-cap test did not pass:\n%s", b.name, tail(r.lines["auto-on-cap"], 30))
	}
	if !strings.Contains(strings.Join(r.lines["cap-notice"], "\n"), "--- PASS: TestCapLookReadsOnTheKernelsNotice") {
		t.Errorf("%s: the cap's read on the kernel's notice (pure v2) did not pass:\n%s", b.name, tail(r.lines["cap-notice"], 30))
	}
	noFailures(t, b, r)
	// The drill as an operator runs it says what it used.
	if out := strings.Join(r.lines["drill-auto-tree"], "\n"); !strings.Contains(out, "drill passed:") || !strings.Contains(out, " with --method ") {
		t.Errorf("%s: the auto drill does not say it passed and by which method:\n%s", b.name, tail(r.lines["drill-auto-tree"], 20))
	}
}

// checkCap reads each cgroup2 drill's cap line: the cap's pids.current
// never passed its pids.max, and the chain's total stayed within twice
// the drill's size (300, the suite's literal: the chain may grow on
// until freeze holds it; 300-348 in place on Debian's 7.2). A freeze that
// moves the chain out of its cap frees slots that the chain refills: on
// Debian's 7.2 the total reached 1,157.
func checkCap(t *testing.T, b boot, r *result, steps ...string) {
	t.Helper()
	for _, s := range steps {
		var m []string
		for _, l := range r.lines[s] {
			if mm := capRE.FindStringSubmatch(l); mm != nil {
				m = mm
			}
		}
		if m == nil {
			t.Errorf("%s: %s printed no cap line:\n%s", b.name, s, tail(r.lines[s], 20))
			continue
		}
		max, _ := strconv.Atoi(m[1])
		peak, _ := strconv.Atoi(m[2])
		total, _ := strconv.Atoi(m[3])
		if peak > max {
			t.Errorf("%s: %s: the cap's peak %d passed its pids.max %d", b.name, s, peak, max)
		}
		if total > 600 {
			t.Errorf("%s: %s: the chain totalled %d processes for a drill of 300: it refilled its cap while freeze held it", b.name, s, total)
		}
	}
}

var capRE = regexp.MustCompile(`cap: pids.max (\d+), peak (\d+), chain total (\d+)`)

// figures are the drills' times from freeze's start: to gate attached,
// to the fixed set, to zero (the progress lines' clock).
func (r *result) figures() string {
	var b strings.Builder
	if _, ok := r.steps["sd-guard"]; ok {
		// The systemd boot: the drills' lines, the watchdog's restart
		// and the unit's exposure.
		for _, s := range []string{"sd-drill", "sd-drill-fifo", "sd-drill-socket", "sd-tasksmax", "sd-auto-on-cap", "cap-cgroup2", "sd-watchdog", "sd-security"} {
			for _, l := range r.lines[s] {
				if strings.Contains(l, "drill passed:") || strings.HasPrefix(l, "after ") || strings.Contains(l, "Overall exposure") || strings.HasPrefix(l, "cap: ") {
					fmt.Fprintf(&b, "  %-16s %s\n", s, l)
				}
			}
		}
		return b.String()
	}
	// What loads: the drill's probe, program by program.
	for _, l := range r.lines["drill-auto-tree"] {
		if i := strings.Index(l, "machine:   BPF "); i >= 0 {
			fmt.Fprintf(&b, "  %s\n", l[i+len("machine:   BPF "):])
		} else if i := strings.Index(l, "machine: method bpf: "); i >= 0 {
			fmt.Fprintf(&b, "  gate: %s\n", l[i+len("machine: method bpf: "):])
		}
	}
	for _, l := range r.lines["cap-cgroup2"] {
		if m := capRE.FindString(l); m != "" {
			fmt.Fprintf(&b, "  %-20s %s (a chain at its cap: cgroup2, then the gate where it loads)\n", "cap-cgroup2", m)
		}
	}
	var drills []string
	for s := range r.steps {
		if strings.HasPrefix(s, "drill-") {
			drills = append(drills, s)
		}
	}
	sort.Strings(drills)
	for _, s := range drills {
		at := map[string]time.Duration{}
		var start time.Time
		for _, l := range r.lines[s] {
			ts, ok := clock(l)
			if !ok {
				continue
			}
			switch {
			case strings.Contains(l, "freeze started"):
				start = ts
			case start.IsZero():
			case strings.Contains(l, "gate attached"):
				at["gate"] = ts.Sub(start)
			case strings.Contains(l, "fixed set:"):
				at["fixed"] = ts.Sub(start)
			case strings.Contains(l, "zero remain"):
				at["zero"] = ts.Sub(start)
			}
		}
		form, held := "", "-"
		for _, l := range r.lines[s] {
			if m := formRE.FindStringSubmatch(l); m != nil {
				form = m[1]
				if m := heldRE.FindStringSubmatch(l); m != nil {
					held = m[1]
				}
			}
		}
		method := ""
		for _, l := range r.lines[s] {
			if m := methodRE.FindStringSubmatch(l); m != nil {
				method = m[1]
			}
		}
		if method == "" {
			method = "failed (rc=" + strconv.Itoa(r.steps[s]) + ")"
		}
		fmt.Fprintf(&b, "  %-20s method %-8s form %-18s gate attached %6s (attach held the chain after %s)  fixed set %6s  zero %6s\n", s, method, form,
			ms(at["gate"]), held, ms(at["fixed"]), ms(at["zero"]))
		for _, l := range r.lines[s] {
			if m := capRE.FindString(l); m != "" {
				fmt.Fprintf(&b, "  %-20s %s\n", "", m)
			}
		}
	}
	return b.String()
}

var (
	methodRE = regexp.MustCompile(`drill passed: .* with --method (\S+);`)
	heldRE   = regexp.MustCompile(`held after ([0-9.]+[µm]?s)`)
	formRE   = regexp.MustCompile(`gate attached, form (.+?) \((?:load|preloaded)`)
)

var clockRE = regexp.MustCompile(`^freeze: (\d\d:\d\d:\d\d\.\d\d\d) `)

func clock(l string) (time.Time, bool) {
	m := clockRE.FindStringSubmatch(l)
	if m == nil {
		return time.Time{}, false
	}
	ts, err := time.Parse("15:04:05.000", m[1])
	return ts, err == nil
}

func ms(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%dms", d.Milliseconds())
}

func tail(lines []string, n int) string {
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func dropWord(list, w string) string {
	var out []string
	for _, x := range strings.Split(list, ",") {
		if x != w && x != "" {
			out = append(out, x)
		}
	}
	return strings.Join(out, ",")
}
