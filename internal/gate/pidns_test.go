package gate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

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
