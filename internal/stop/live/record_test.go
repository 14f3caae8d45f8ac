package live_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/containtest"
	"freeze/internal/freeze"
	"freeze/internal/proc"
	"freeze/internal/stop"
	"freeze/internal/timeline"
)

// An armed guard's run named with --arg matches a process by the argv
// its exec recorded (the guard's argv recorder), without /proc: a perl
// exec'd with the marker that renamed itself since ($0), so that /proc
// shows no marker, is matched and killed from the record, and its twin
// (the same copy, exec'd without the marker) lives. Without the
// recorder the same run matches nothing: the record is what matched.
func TestAnArmedRunMatchesByTheArgvOfItsExec(t *testing.T) {
	requireRoot(t)
	supported(t, freeze.Bpf)
	armed := stop.Arm(func(s string) { t.Log("arm: " + s) })
	defer armed.Close()
	// Arm locks the process's memory, as a guard's: not this test
	// binary's for the rest of its tests.
	defer unix.Munlockall()
	if !armed.Recording() {
		t.Skipf("the argv recorder did not attach here: %s", armed.RecorderWhy)
	}
	if _, err := os.Stat("/usr/bin/perl"); err != nil {
		t.Skipf("no perl here to rewrite its argv: %v", err)
	}
	dir := t.TempDir()
	chain := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Name: "perl", Dir: dir, Cap: 10, HopCap: 1000000, Timeout: 120 * time.Second,
		Command: []string{"/usr/bin/perl", "-e", `$0 = "renamed"; sleep 100`, "marker"}})
	perl := filepath.Join(dir, "perl")
	twin := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Name: "launcher", Cap: 10, HopCap: 1000000, Timeout: 120 * time.Second,
		Command: []string{"/bin/sh", "-c", "exec " + perl + " -e 'sleep 100' other"}})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		args, _ := proc.Default.Args(chain.Leader)
		twinArgs, _ := proc.Default.Args(twin.Leader)
		if len(args) == 1 && args[0] == "renamed" && len(twinArgs) == 4 && twinArgs[3] == "other" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("perl did not rename itself (%q), or its twin did not exec (%q)", args, twinArgs)
		}
	}
	// The record is there: perl renamed itself in its own code, after
	// its exec had returned, so after the exec's tracepoint (which comes
	// a little after the exec lets its parent go).

	cfg := config(t, freeze.Bpf, perl)
	cfg.Spec.Args = []string{"marker"}
	rec, _ := timeline.New("", nil)
	out, err := stop.Order(context.Background(), cfg, rec)
	if err != nil || out.Matched != 0 {
		t.Fatalf("without the recorder: matched %d (%v); /proc shows no marker, so none should match", out.Matched, err)
	}

	cfg.Spare = armed.Take()
	if cfg.Spare == nil {
		t.Fatal("the armed guard has no spare to lend the recorder with")
	}
	rec, _ = timeline.New("", nil)
	out, err = stop.Order(context.Background(), cfg, rec)
	if err != nil || out.Kind != stop.Zero || out.Matched != 1 {
		t.Fatalf("with the recorder: %v, matched %d (%v); want the renamed perl matched and killed", out.Kind, out.Matched, err)
	}
	var m timeline.Matched
	for _, e := range rec.Events() {
		if e.Step == timeline.StepMatch {
			e.Decode(&m)
			t.Log(e.Msg)
		}
	}
	if m.ArgsRecorded != 1 {
		t.Errorf("the match event says %d matched by the record, want 1", m.ArgsRecorded)
	}
	// (Survivors would count the twin: it runs the copy in the chain's
	// directory.)
	if ws, ok := chain.Exit(10 * time.Second); !ok || ws.Signal() != 9 {
		t.Errorf("the renamed perl did not die of SIGKILL: exited %v, status %v", ok, ws)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(twin.Leader)); err != nil {
		t.Errorf("the twin (exec'd without the marker) was killed")
	} else if st, err := proc.Default.ReadStat(twin.Leader); err == nil && st.State == 'T' {
		t.Errorf("the twin is left stopped")
	}
}
