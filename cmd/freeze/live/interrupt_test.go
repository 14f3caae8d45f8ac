package live

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/containtest"
	"freeze/internal/testenv"
	"freeze/internal/timeline"
)

// Real signals to the real binary: SIGINT and then SIGTERM arrive while
// freeze is in the middle of its run. freeze ends with exit 4, records
// both (the second as ignored), says how to go on, and leaves a frozen
// chain frozen; the command it prints finishes the job.
//
// freeze is stopped (SIGSTOP) while both signals are queued and then
// continued, so both arrive mid-run whatever the machine's speed: the
// step they land in varies, what the test asserts does not.
func TestSignalsEndTheRunInARecordedState(t *testing.T) {
	testenv.RequireLive(t, "the chain is capped by a pids cgroup")
	bin := buildFreeze(t)
	chain := treeAtCap(t, 400, 100*time.Millisecond)
	tl := filepath.Join(t.TempDir(), "t.jsonl")
	started := time.Now()
	fz := signalMidRun(t, bin, chain.Path, tl, unix.SIGINT, unix.SIGTERM)
	ws, ok := fz.Exit(60 * time.Second)
	stderr := fz.Stderr()
	if !ok {
		t.Fatalf("freeze did not end within 60 s of SIGINT:\n%s", stderr)
	}
	if ws.ExitStatus() != 4 {
		t.Fatalf("exit %d (signalled %v), want 4:\n%s", ws.ExitStatus(), ws.Signaled(), stderr)
	}
	events, err := timeline.ReadFile(tl)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) == 0 || events[0].Step != "start" {
		t.Fatalf("the timeline does not begin with the start event: %d events", len(events))
	}
	if os.Getenv("FREEZE_PRIORITY") != "off" {
		// As root freeze lifts itself while it starts; the start event
		// says when, which splits start-up in the benchmark.
		var start timeline.Start
		events[0].Decode(&start)
		at := start.LiftedAt
		lifted, err := time.Parse(time.RFC3339Nano, at)
		if err != nil || lifted.Before(started) || lifted.After(events[0].Time) {
			t.Fatalf("the start event's lifted_at is %q (%v): want a time between freeze's start (%v) and the start event (%v)", at, err, started, events[0].Time)
		}
	}
	steps := map[timeline.Step]string{}
	for _, e := range events {
		steps[e.Step] = e.Msg
	}
	// Both signals are queued while freeze is stopped: which of its
	// threads takes which first is the kernel's and the runtime's choice
	// (CI saw SIGTERM first once). The first is the interrupt, the second
	// is recorded and ignored.
	first, second := "SIGINT", "SIGTERM"
	if strings.HasPrefix(steps["signal"], "SIGTERM") {
		first, second = second, first
	}
	if !strings.HasPrefix(steps["signal"], first) || !strings.HasPrefix(steps["signal-again"], second) || steps["interrupted"] == "" {
		t.Fatalf("timeline lacks the signals or the interrupt: signal %q, signal-again %q, interrupted %q", steps["signal"], steps["signal-again"], steps["interrupted"])
	}
	if !strings.Contains(stderr, "interrupted by "+first) {
		t.Fatalf("stderr does not say it was interrupted by %s, the first signal recorded:\n%s", first, stderr)
	}
	if m := regexp.MustCompile(`the chain stays frozen in (\S+)`).FindStringSubmatch(stderr); m != nil {
		b, err := os.ReadFile(filepath.Join(m[1], "cgroup.events"))
		if err != nil || !strings.Contains(string(b), "frozen 1") {
			t.Fatalf("freeze said the chain stays frozen in %s, but cgroup.events reads %q (%v)", m[1], b, err)
		}
		if n := chain.Population(); n == 0 {
			t.Fatal("freeze said the chain stays frozen, but it is gone")
		}
	}
	m := regexp.MustCompile(`(?m)to (?:finish the job|run it again): freeze (.*?)(?:   \(|$)`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("freeze did not print how to go on:\n%s", stderr)
	}
	tl2 := filepath.Join(t.TempDir(), "t2.jsonl")
	args := append(strings.Fields(m[1]), "--timeline", tl2)
	again := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 100, HopCap: 1, Timeout: 90 * time.Second,
		Command: append([]string{bin}, args...)})
	if ws, ok := again.Exit(60 * time.Second); !ok || ws.ExitStatus() != 0 {
		t.Fatalf("the printed command (freeze %s) did not finish the job: exit %d\n%s", m[1], ws.ExitStatus(), again.Stderr())
	}
	if left := chain.Survivors(); len(left) > 0 {
		t.Fatalf("%d processes of the chain alive after the printed command", len(left))
	}
	// A finished run records its own peak resident memory last.
	events, err = timeline.ReadFile(tl2)
	if err != nil || len(events) == 0 {
		t.Fatalf("the second run's timeline: %d events, %v", len(events), err)
	}
	last := events[len(events)-1]
	var mem timeline.Memory
	if last.Decode(&mem); last.Step != "memory" || mem.VmHWMKiB < 1024 {
		t.Fatalf("the second run's last event is %s %v, want its peak memory (vm_hwm_kib of at least 1 MiB)", last.Step, last.Fields)
	}
}

// SIGHUP (an operator's ssh session dropping) ends the run between two
// steps as SIGINT does, recorded, with exit 4; and SIGPIPE, which
// freeze piped into a reader that went away would get, is ignored. On
// b1884f8 either killed freeze mid-step with no record.
func TestHangupAndBrokenPipeEndTheRunInARecordedState(t *testing.T) {
	testenv.RequireLive(t, "the chain is capped by a pids cgroup")
	bin := buildFreeze(t)
	chain := treeAtCap(t, 400, 100*time.Millisecond)
	tl := filepath.Join(t.TempDir(), "t.jsonl")
	fz := signalMidRun(t, bin, chain.Path, tl, unix.SIGPIPE, unix.SIGHUP)
	ws, ok := fz.Exit(60 * time.Second)
	stderr := fz.Stderr()
	if !ok {
		t.Fatalf("freeze did not end within 60 s of SIGHUP:\n%s", stderr)
	}
	if ws.Signaled() || ws.ExitStatus() != 4 {
		t.Fatalf("exit %d (killed by a signal: %v %v), want 4:\n%s", ws.ExitStatus(), ws.Signaled(), ws.Signal(), stderr)
	}
	events, err := timeline.ReadFile(tl)
	if err != nil {
		t.Fatal(err)
	}
	var sig, interrupted string
	for _, e := range events {
		switch e.Step {
		case "signal":
			sig = e.Msg
		case "interrupted":
			interrupted = e.Msg
		}
	}
	if !strings.HasPrefix(sig, "SIGHUP") || interrupted == "" {
		t.Fatalf("timeline: signal %q, interrupted %q; want SIGHUP recorded and the interrupt", sig, interrupted)
	}
	// Finish the job, so that the test leaves nothing frozen.
	again := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 100, HopCap: 1, Timeout: 90 * time.Second,
		Command: []string{bin, "--path", chain.Path, "--timeline", filepath.Join(t.TempDir(), "t2.jsonl")}})
	if ws, ok := again.Exit(60 * time.Second); !ok || ws.ExitStatus() != 0 {
		t.Fatalf("the second run did not finish the job: exit %d\n%s", ws.ExitStatus(), again.Stderr())
	}
}

// signalMidRun starts freeze on path, which stops itself at its match
// step (FREEZE_PAUSE_AT), and queues sigs while it is stopped (sigs, then
// SIGCONT), so that they arrive mid-run whatever the machine's speed.
// Before, the test stopped freeze once its output said "1/4 match":
// lifted, freeze can finish its run before a test at ordinary priority
// sends the stop (see TestConcurrentRunsAndAStaleLock).
func signalMidRun(t *testing.T, bin, path, tl string, sigs ...unix.Signal) *containtest.Chain {
	t.Helper()
	fz := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 100, HopCap: 1, Timeout: 90 * time.Second,
		Env: []string{"FREEZE_PAUSE_AT=match"}, Command: []string{bin, "--path", path, "--timeline", tl}})
	waitPaused(t, fz, 30*time.Second)
	for _, sig := range append(sigs, unix.SIGCONT) {
		if err := unix.Kill(fz.Leader, sig); err != nil {
			t.Fatalf("kill %v: %v", sig, err)
		}
	}
	return fz
}
