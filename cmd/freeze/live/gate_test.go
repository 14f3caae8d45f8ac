package live

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/containtest"
	"freeze/internal/gate"
	"freeze/internal/proc"
	"freeze/internal/testenv"
	"freeze/internal/timeline"
)

// needGate skips where the gate cannot load: not root, or a kernel
// without tp_btf.
func needGate(t *testing.T) {
	t.Helper()
	testenv.RequireLive(t, "loading BPF programs, and the chains are capped by pids cgroups")
	if k := gate.Probe(""); !k[0].OK {
		testenv.GateMissing(t, k[0].Why)
	}
}

// waitFor waits until stderr of c contains s.
func waitFor(t *testing.T, c *containtest.Chain, s string, within time.Duration) {
	t.Helper()
	c.WaitStderr(s, within)
}

// event returns the first event of step in the timeline at path.
func event(t *testing.T, path string, step timeline.Step) (timeline.Event, bool) {
	t.Helper()
	events, err := timeline.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if e.Step == step {
			return e, true
		}
	}
	return timeline.Event{}, false
}

// A freeze killed with SIGKILL while its gate holds the chain leaves the
// chain held (stopped by the gate) and nothing attached; a rerun
// finishes it. freeze stops itself once its gate is attached
// (FREEZE_PAUSE_AT): before, the test stopped it from outside once its
// output said so, and lifted it had gone on to its first freeze round
// (66 ms) in a third of the runs, or could end the run first.
func TestGatedRunKilledLeavesTheChainStoppedAndARerunFinishes(t *testing.T) {
	needGate(t)
	bin := buildFreeze(t)
	chain := treeAtCap(t, 400, 50*time.Millisecond)
	tl := filepath.Join(t.TempDir(), "t.jsonl")
	fz := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 100, HopCap: 1, Timeout: 200 * time.Second,
		Env: []string{"FREEZE_PAUSE_AT=gate-attached"}, Command: []string{bin, "--method", "bpf", "--hold", "--path", chain.Path, "--timeline", tl}})
	// freeze holds still with the gate attached until every process of
	// the chain has met it at its next fork; then it is killed outright.
	waitPaused(t, fz, 30*time.Second)
	// 60 s: a bound for a loaded machine (beside a CPU hog one process
	// of the chain had not met the gate after 10 s), not a speed.
	end := time.Now().Add(60 * time.Second)
	for {
		running := 0
		for _, pid := range chain.Survivors() {
			if !held(pid) {
				running++
			}
		}
		if running == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("%d processes of the chain not stopped 60s after the gate was attached", running)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := unix.Kill(fz.Leader, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	fz.Exit(30 * time.Second)

	e, ok := event(t, tl, timeline.StepGateAttached)
	if !ok {
		t.Fatal("the timeline has no gate-attached event")
	}
	ids := timeline.GatePrograms([]timeline.Event{e})
	if len(ids) == 0 {
		t.Fatalf("gate-attached records no program ids: %v", e.Fields)
	}
	if left := gate.StillLoaded(ids, 5*time.Second); len(left) > 0 {
		t.Fatalf("programs %v still loaded after freeze was killed", left)
	}
	before := chain.Survivors()
	time.Sleep(300 * time.Millisecond)
	after := chain.Survivors()
	if len(after) != len(before) {
		t.Fatalf("the chain went from %d to %d processes after freeze died: it is not held", len(before), len(after))
	}
	for _, pid := range after {
		if st, err := proc.Default.ReadStat(pid); err == nil && !held(pid) {
			t.Fatalf("pid %d of the chain is in state %c after freeze died, in no frozen group: want it held", pid, st.State)
		}
	}

	tl2 := filepath.Join(t.TempDir(), "t2.jsonl")
	rerun := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 100, HopCap: 1, Timeout: 90 * time.Second,
		Command: []string{bin, "--path", chain.Path, "--timeline", tl2}})
	if ws, ok := rerun.Exit(60 * time.Second); !ok || ws.ExitStatus() != 0 {
		t.Fatalf("the rerun: exit %d (finished %v):\n%s", ws.ExitStatus(), ok, rerun.Stderr())
	}
	if left := chain.Survivors(); len(left) > 0 {
		t.Fatalf("%d processes of the chain alive after the rerun", len(left))
	}
	stagesInOrder(t, rerun.Stderr())
}

// held reports whether pid is held: stopped (state T), or in a frozen
// cgroup (v2's cgroup.events "frozen 1", v1's freezer.state FROZEN).
func held(pid int) bool {
	if st, err := proc.Default.ReadStat(pid); err != nil || st.State == 'T' {
		return err == nil
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return false
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		switch {
		case f[0] == "0" && f[1] == "":
			for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
				if ev, err := os.ReadFile(filepath.Join(root, f[2], "cgroup.events")); err == nil && strings.Contains(string(ev), "frozen 1") {
					return true
				}
			}
		case f[1] == "freezer":
			if st, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/freezer", f[2], "freezer.state")); err == nil && strings.TrimSpace(string(st)) == "FROZEN" {
				return true
			}
		}
	}
	return false
}

// stagesInOrder checks that the progress lines' "N/4" tags never go
// back: on 2e67e63 the gate's attach printed 2/4 before the match's 1/4,
// and its detach 2/4 after 4/4.
func stagesInOrder(t *testing.T, stderr string) {
	t.Helper()
	last, seen := 0, 0
	for _, l := range strings.Split(stderr, "\n") {
		var n int
		if _, err := fmt.Sscanf(afterClock(l), "%d/4 ", &n); err != nil {
			continue
		}
		seen++
		if n < last {
			t.Errorf("stage %d/4 after %d/4: %q\n%s", n, last, l, stderr)
			return
		}
		last = n
	}
	if seen == 0 {
		t.Errorf("no N/4 progress lines:\n%s", stderr)
	}
}

// afterClock is a progress line after "freeze: HH:MM:SS.mmm ".
func afterClock(l string) string {
	f := strings.SplitN(l, " ", 3)
	if len(f) < 3 || f[0] != "freeze:" || strings.Count(f[1], ":") != 2 {
		return ""
	}
	return f[2]
}

// Where the gate cannot load, freeze falls back to the cgroup methods
// and the timeline says why. The failure is forced with --btf, which an
// operator uses where the kernel's BTF ships apart.
func TestGateFailureFallsBackAndSaysWhy(t *testing.T) {
	needGate(t)
	bin := buildFreeze(t)
	chain := treeAtCap(t, 100, 50*time.Millisecond)
	bad := filepath.Join(t.TempDir(), "vmlinux")
	if err := os.WriteFile(bad, []byte("not BTF"), 0o644); err != nil {
		t.Fatal(err)
	}
	tl := filepath.Join(t.TempDir(), "t.jsonl")
	fz := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 100, HopCap: 1, Timeout: 90 * time.Second,
		Command: []string{bin, "--method", "bpf", "--btf", bad, "--path", chain.Path, "--timeline", tl}})
	if ws, ok := fz.Exit(60 * time.Second); !ok || ws.ExitStatus() != 0 {
		t.Fatalf("exit %d (finished %v):\n%s", ws.ExitStatus(), ok, fz.Stderr())
	}
	e, ok := event(t, tl, timeline.StepGateUnavailable)
	if !ok || !strings.Contains(e.Msg, bad) {
		t.Fatalf("the timeline does not say the gate failed on %s: %+v", bad, e)
	}
	m, _ := event(t, tl, timeline.StepMethod)
	var chosen timeline.MethodChosen
	if m.Decode(&chosen); chosen.Method != "cgroup2" || !strings.Contains(m.Msg, "the gate is not available") {
		t.Fatalf("method event %q (%v), want cgroup2 saying why not bpf", m.Msg, chosen.Method)
	}
	if _, ok := event(t, tl, timeline.StepZero); !ok {
		t.Fatalf("no zero:\n%s", fz.Stderr())
	}
}

// An interpreter chain narrowed by --arg: the gate holds every process of
// the interpreter's file at once (as --path alone does), the scan reads
// their argv while none can fork, then the matches are held by mark and
// the others let go. A twin running another script of the same
// interpreter copy is paused at most, continued, and keeps running.
func TestGateNarrowedByArg(t *testing.T) {
	needGate(t)
	bin := buildFreeze(t)
	dir := t.TempDir()
	sh := filepath.Join(dir, "sh") // the harness copies /bin/sh there
	script := filepath.Join(dir, "bomb.sh")
	// A tree of the interpreter four levels deep (121 shells), each
	// forking a sleep every 0.1 s for ever: dash exits at its first
	// refused fork, so the tree stays clear of its cap.
	body := "d=${1:-0}; if [ $d -lt 4 ]; then for i in 1 2 3; do " + sh + " " + script + " $((d+1)) & done; fi; while :; do /bin/sleep 0.1; done\n"
	if err := os.WriteFile(script, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other.sh")
	if err := os.WriteFile(other, []byte("while :; do /bin/sleep 0.05; done\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	chain := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Name: "sh", Dir: dir, Cap: 400, HopCap: 1000000, Timeout: 120 * time.Second,
		Command: []string{"/bin/sh", script}})
	// The twin runs the very same copy, with another script.
	twin := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Name: "launcher", Cap: 10, HopCap: 1000000, Timeout: 120 * time.Second,
		Command: []string{"/bin/sh", "-c", "exec " + sh + " " + other}})
	if n := chain.WaitPopulation(200, 30*time.Second); n < 200 {
		ws, exited := chain.Exit(time.Millisecond)
		t.Fatalf("chain reached %d of 200 (leader exited %v: %v); stderr:\n%s", n, exited, ws, chain.Stderr())
	}
	tl := filepath.Join(t.TempDir(), "t.jsonl")
	fz := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 100, HopCap: 1, Timeout: 90 * time.Second,
		Command: []string{bin, "--method", "bpf", "--path", sh, "--arg", script, "--timeline", tl}})
	if ws, ok := fz.Exit(60 * time.Second); !ok || ws.ExitStatus() != 0 {
		t.Fatalf("exit %d (finished %v):\n%s", ws.ExitStatus(), ok, fz.Stderr())
	}
	e, ok := event(t, tl, timeline.StepGateAttached)
	var attached timeline.GateAttached
	if e.Decode(&attached); !ok || !attached.ByFile {
		t.Fatalf("gate-attached %+v: want the gate on, holding the interpreter's file", e)
	}
	// argv read for the chain's root and the twin at least, not for
	// each of the chain's 121 shells (their root matched).
	m, ok := event(t, tl, timeline.StepMatch)
	var matched timeline.Matched
	if m.Decode(&matched); !ok || matched.ArgsRead < 2 || matched.ArgsRead > 10 {
		t.Fatalf("match %q: want the argv of the chain's root and the twin read, and not the chain's every shell", m.Msg)
	}
	t.Log(m.Msg)
	lg, ok := event(t, tl, timeline.StepLetGo)
	if !ok {
		t.Fatalf("no let-go event: the decoys were not sorted out\n%s", fz.Stderr())
	}
	t.Log(lg.Msg)
	var sorted timeline.LetGo
	lg.Decode(&sorted)
	if sorted.LetGo < 1 {
		t.Fatalf("let-go %q: want at least the twin let go", lg.Msg)
	}
	if sorted.Marked < 100 {
		t.Fatalf("let-go %q: want the chain's shells (121) marked", lg.Msg)
	}
	var left []int
	for _, pid := range chain.Survivors() {
		// The twin runs from the chain's directory too, and must live:
		// known by its script, not by its pid (beside a CPU hog its
		// other.sh ran as a child of the twin's leader once, not as it).
		if args, _ := proc.Default.Args(pid); pid != twin.Leader && !slices.Contains(args, other) {
			left = append(left, pid)
		}
	}
	if len(left) > 0 {
		var who []string
		for _, pid := range left {
			args, _ := proc.Default.Args(pid)
			st, _ := proc.Default.ReadStat(pid)
			who = append(who, fmt.Sprintf("%d (ppid %d, state %c): %q", pid, st.PPID, st.State, args))
		}
		t.Fatalf("%d processes of the chain alive after freeze: %s\n%s", len(left), strings.Join(who, "; "), fz.Stderr())
	}
	if st, err := proc.Default.ReadStat(twin.Leader); err != nil || st.State == 'T' {
		t.Fatalf("the twin (same interpreter, other script) was stopped or killed: %v %c\n%s", err, st.State, lg.Msg)
	}
	// And it runs: it starts a sleep every 50 ms. Counted by the sleeps
	// it has started, from the harness's group (its own pids cgroup).
	born := func() map[int]bool {
		m := map[int]bool{}
		for _, pid := range twin.Survivors() {
			if st, err := proc.Default.ReadStat(pid); err == nil && st.PPID == twin.Leader {
				m[pid] = true
			}
		}
		return m
	}
	first := born()
	end := time.Now().Add(10 * time.Second)
	for {
		fresh := 0
		for pid := range born() {
			if !first[pid] {
				fresh++
			}
		}
		if fresh > 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the twin started no process in 10 s after freeze let it go: it is held (%s)", lg.Msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// After '--method cgroup1 --hold', the command freeze prints to finish
// the job finishes it (the first audit: it left survivors, exit 1: it took
// the gate, whose kills waited on tasks the v1 freezer held).
func TestTheFinishingCommandAfterACgroup1HoldReachesZero(t *testing.T) {
	testenv.RequireLive(t, "the chain's pids cgroup and the v1 freezer")
	if _, err := os.Stat("/sys/fs/cgroup/freezer/cgroup.procs"); err != nil {
		t.Skip("no v1 freezer hierarchy here (a host that is all cgroup v2)")
	}
	bin := buildFreeze(t)
	chain := treeAtCap(t, 200, 50*time.Millisecond)
	hold := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 100, HopCap: 1, Timeout: 90 * time.Second,
		Command: []string{bin, "--path", chain.Path, "--method", "cgroup1", "--hold", "--timeline", filepath.Join(t.TempDir(), "hold.jsonl")}})
	if ws, ok := hold.Exit(60 * time.Second); !ok || ws.ExitStatus() != 0 {
		t.Fatalf("the hold: exit %d (finished %v):\n%s", ws.ExitStatus(), ok, hold.Stderr())
	}
	var finish []string
	for _, l := range strings.Split(hold.Stderr(), "\n") {
		if _, after, ok := strings.Cut(l, "to finish the job: freeze "); ok {
			finish = strings.Fields(after)
		}
	}
	if len(finish) == 0 {
		t.Fatalf("the hold printed no finishing command:\n%s", hold.Stderr())
	}
	fin := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 100, HopCap: 1, Timeout: 90 * time.Second,
		Command: append(append([]string{bin}, finish...), "--timeline", filepath.Join(t.TempDir(), "finish.jsonl"))})
	if ws, ok := fin.Exit(60 * time.Second); !ok || ws.ExitStatus() != 0 {
		t.Fatalf("freeze %s: exit %d (finished %v):\n%s", strings.Join(finish, " "), ws.ExitStatus(), ok, fin.Stderr())
	}
	if left := chain.Survivors(); len(left) > 0 {
		t.Fatalf("%d processes of the chain alive after the finishing command %v", len(left), finish)
	}
}
