package gate

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"freeze/internal/exefile"
	"freeze/internal/proc"
	"freeze/internal/testenv"
)

// In a pid namespace of its own freeze's pids are not the kernel's, and
// the gate names processes by the kernel's (its identity reader knows
// freeze by pid, its exemptions are pids). There the gate refuses by
// name: Load returns ErrPidNamespace before anything loads, and the
// probe, which the dry run and the drill print, says the gate does not
// run here, where it used to say the gate loads. Before, the run found
// out at the identity reader ("did not see" the target) and said that.
func TestTheGateRefusesInAPidNamespaceOfItsOwn(t *testing.T) {
	if os.Getenv("FREEZE_GATE_PIDNS_CHILD") == "1" {
		pidnsChild(t)
		return
	}
	testenv.RequireRoot(t, "a pid namespace of its own (CLONE_NEWPID)")
	if k := Probe(""); !k[0].OK {
		testenv.GateMissing(t, k[0].Why)
	}
	// The child is PID 1 of a new pid namespace, which dies with it.
	out, err := testenv.Child(t, "FREEZE_GATE_PIDNS_CHILD=1", &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID})
	if err != nil {
		t.Fatalf("in a pid namespace of its own: %v\n%s", err, out)
	}
	t.Logf("%s", strings.TrimSpace(grepLine(string(out), "child: ")))
}

func pidnsChild(t *testing.T) {
	if os.Getpid() != 1 {
		t.Fatalf("the child is pid %d: not PID 1 of a pid namespace of its own", os.Getpid())
	}
	// A target of its own, never run: the load is refused before any
	// file is opened.
	b, err := os.ReadFile("/usr/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "target")
	if err := os.WriteFile(target, b, 0o755); err != nil {
		t.Fatal(err)
	}
	g, err := Load(Config{Files: []File{fileOf(t, target)}, Exempt: Exempt(proc.Default), Form: testForm(t)})
	if err == nil {
		g.Close()
		t.Fatal("the gate loaded in a pid namespace of its own, where it would exempt and name other processes than it means")
	}
	if !errors.Is(err, ErrPidNamespace) {
		t.Fatalf("the load failed, but not by name: %v", err)
	}
	k := Probe("")
	if k[0].OK || k[0].Why != ErrPidNamespace.Error() {
		t.Fatalf("the probe says of the gate: ok=%v, %q; want it refused by name", k[0].OK, k[0].Why)
	}
	// The refusal is freeze's: the kernel loads the programs here.
	if len(k) < 2 || !k[1].OK {
		t.Fatalf("the probe's first program: %+v; the parent loaded the gate", k[1:])
	}
	fmt.Println("child: refused by name:", Explain(err))
}

// The counter in a pid namespace of its own counts that namespace's
// forks alone. A guard there sees only its namespace's processes in
// /proc; counting the machine's, its --auto would judge its own
// processes of a file by forks made elsewhere (two containers of one
// image share a file). One copy of sh forks outside, without end, while
// the child, PID 1 of a new namespace, counts for half a second and runs
// the same copy for 20 forks: the child's count is its own 20, and the
// host's counter shows the loop outside forked meanwhile.
func TestTheCounterCountsOnlyItsOwnPidNamespace(t *testing.T) {
	if sh := os.Getenv("FREEZE_COUNTER_PIDNS_CHILD"); sh != "" {
		counterChild(t, sh)
		return
	}
	testenv.RequireRoot(t, "a pid namespace of its own (CLONE_NEWPID) and the counter")
	host, err := StartCounter()
	if err != nil {
		testenv.GateMissing(t, "the counter: "+err.Error())
	}
	defer host.Close()
	sh := filepath.Join(t.TempDir(), "sh")
	if err := exefile.Copy("/bin/sh", sh); err != nil {
		t.Fatal(err)
	}
	key := KeyOf(fileOf(t, sh).Stat)
	// Outside: one process at a time (the loop and its /bin/true), in a
	// group of its own, killed as a group at the end.
	loop := exec.Command(sh, "-c", "i=0; while [ $i -lt 1000000 ]; do /bin/true; i=$((i+1)); done")
	loop.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := loop.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		syscall.Kill(-loop.Process.Pid, syscall.SIGKILL)
		loop.Wait()
	}()
	before := countOf(t, host, key)
	out, err := testenv.Child(t, "FREEZE_COUNTER_PIDNS_CHILD="+sh, &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID})
	if err != nil {
		t.Fatalf("in a pid namespace of its own: %v\n%s", err, out)
	}
	outside := countOf(t, host, key) - before - 20
	if outside < 20 {
		t.Fatalf("the loop outside forked %d times while the child ran: too few to tell", outside)
	}
	t.Logf("%s; meanwhile %d forks outside", strings.TrimSpace(grepLine(string(out), "child: ")), outside)
}

func counterChild(t *testing.T, sh string) {
	if os.Getpid() != 1 {
		t.Fatalf("the child is pid %d: not PID 1 of a pid namespace of its own", os.Getpid())
	}
	c, err := StartCounter()
	if err != nil {
		t.Fatalf("the counter in a pid namespace of its own: %v", err)
	}
	defer c.Close()
	time.Sleep(500 * time.Millisecond)
	if err := exec.Command(sh, "-c", "i=0; while [ $i -lt 20 ]; do /bin/true; i=$((i+1)); done").Run(); err != nil {
		t.Fatal(err)
	}
	if n := countOf(t, c, KeyOf(fileOf(t, sh).Stat)); n != 20 {
		t.Fatalf("the counter counted %d forks of %s; this namespace made 20", n, sh)
	}
	fmt.Println("child: counted its own 20 forks")
}

func countOf(t *testing.T, c *Counter, key FileKey) uint64 {
	t.Helper()
	m, err := c.Read()
	if err != nil {
		t.Fatal(err)
	}
	return m[key]
}
