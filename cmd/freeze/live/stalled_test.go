package live

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/containtest"
	"freeze/internal/guard"
	"freeze/internal/testenv"
)

// freeze's words never hold its run up: with stderr a pipe that is full
// and never read (a terminal paused with ^S, journald starved by the
// chain, a reader that stalled), the run still reaches zero, and freeze
// exits once its reader reads again. Before, the first line that could
// not be written held the stop order there: the gate had stopped the
// chain and nothing killed it, and the record ended at the last event
// written before that line (#34's run that stopped at "fixed").
func TestAStalledOutputDoesNotHoldTheRun(t *testing.T) {
	testenv.RequireLive(t, "the chain is capped by a pids cgroup")
	bin := buildFreeze(t)
	chain := treeAtCap(t, 400, 100*time.Millisecond)
	dir := t.TempDir()
	tl := filepath.Join(dir, "t.jsonl")
	rd := stalledPipe(t, filepath.Join(dir, "stderr"))
	fz := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 100, HopCap: 1, Timeout: 180 * time.Second,
		Command: []string{"/bin/sh", "-c", `f=$1; shift; exec "$@" 2>"$f"`, "sh", filepath.Join(dir, "stderr"), bin, "--path", chain.Path, "--timeline", tl}})
	end := time.Now().Add(120 * time.Second)
	for {
		b, _ := os.ReadFile(tl)
		if strings.Contains(string(b), `"step":"zero"`) {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("no zero in 120 s with stderr stalled; the record:\n%s", b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if left := chain.Survivors(); len(left) > 0 {
		t.Fatalf("zero recorded, but %d of the chain are alive", len(left))
	}
	// The reader reads again: freeze says the rest and exits 0.
	go io.Copy(io.Discard, rd)
	if ws, ok := fz.Exit(60 * time.Second); !ok || ws.ExitStatus() != 0 {
		t.Fatalf("freeze did not exit 0 within 60 s once its stderr was read (exit %d, ended %v)", ws.ExitStatus(), ok)
	}
}

// stalledPipe makes a FIFO at path whose buffer (one page) is already
// full, and returns its read end, which nobody reads until the test
// does: a writer's next write blocks.
func stalledPipe(t *testing.T, path string) *os.File {
	t.Helper()
	if err := unix.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	rd, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close() })
	wr, err := os.OpenFile(path, os.O_WRONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer wr.Close()
	raw, err := wr.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	raw.Control(func(fd uintptr) { _, serr = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, 4096) })
	if serr != nil {
		t.Fatal(serr)
	}
	// Fill it: writes until one would wait.
	wr.SetWriteDeadline(time.Now().Add(500 * time.Millisecond))
	line := []byte(strings.Repeat("x", 63) + "\n")
	for {
		if _, err := wr.Write(line); err != nil {
			break
		}
	}
	return rd
}

// Nor do the guard's own lines hold a request up: with the guard's
// stderr (the journal, under systemd) a full pipe nobody reads, a request
// through the FIFO still runs to zero and is logged. Before, the guard
// waited to say "request from" and never ran it.
func TestAStalledJournalDoesNotHoldTheGuard(t *testing.T) {
	testenv.RequireLive(t, "the guard and the chain's pids cgroup")
	bin := buildFreeze(t)
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	rd := stalledPipe(t, filepath.Join(dir, "stderr"))
	containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 200, HopCap: 1, Timeout: 300 * time.Second,
		Command: []string{"/bin/sh", "-c", `f=$1; shift; exec "$@" 2>"$f"`, "sh", filepath.Join(dir, "stderr"), bin, "guard", "--run-dir", run}})
	for end := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(run, guard.LogName)); err == nil {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the guard did not start its log in 60 s with its stderr stalled")
		}
	}
	waitLog(t, run, 60*time.Second, func(l logLine) bool { return l.Event == "armed" })
	chain := treeAtCap(t, 200, 100*time.Millisecond)
	ask(t, run, "--path "+chain.Path+"\n")
	req := waitLog(t, run, 120*time.Second, func(l logLine) bool { return l.Event == "request" }).request()
	if req.Exit != 0 || req.Outcome != "zero" {
		t.Fatalf("the request ended %d (%s), want 0 (zero)", req.Exit, req.Outcome)
	}
	if left := chain.Survivors(); len(left) > 0 {
		t.Fatalf("the guard logged zero, but %d of the chain are alive", len(left))
	}
	go io.Copy(io.Discard, rd)
}
