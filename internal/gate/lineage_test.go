package gate

import (
	"errors"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"freeze/internal/containtest"
	"freeze/internal/proc"
	"freeze/internal/testenv"
)

// Lineage (tp_btf/sched_process_fork) marks every child of a gated
// process. With the stop or the refusal attached a gated process has no
// children but those whose fork was in flight at attach, so this test
// attaches lineage alone: a marked shell loop keeps forking, and each of
// its children is marked in the gate's task storage, while the children
// of an identical loop that is not marked are not.
func TestLineageMarksChildrenOfAGatedProcess(t *testing.T) {
	loop := []string{"/bin/sh", "-c", "while :; do /bin/sleep 0.2; done"}
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Name: "loop", Cap: 20, HopCap: 1000000, Timeout: 300 * time.Second, Command: loop})
	decoy := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Name: "loop", Cap: 20, HopCap: 1000000, Timeout: 300 * time.Second, Command: loop, Dir: t.TempDir()})
	g := loadOnly(t)
	l, err := link.AttachTracing(link.TracingOptions{Program: g.core[0]}) // gate_fork
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lead := pin(t, c.Leader)
	if err := g.Mark(lead); err != nil {
		t.Fatal(err)
	}
	marked, unmarked := 0, 0
	end := time.Now().Add(15 * time.Second)
	for (marked < 2 || unmarked < 2) && time.Now().Before(end) {
		for _, pid := range c.Survivors() {
			if pid != c.Leader && isMarked(t, g, pid) {
				marked++
			}
		}
		for _, pid := range decoy.Survivors() {
			if pid == decoy.Leader {
				continue
			}
			if isMarked(t, g, pid) {
				t.Fatalf("a child (pid %d) of the unmarked decoy is marked", pid)
			}
			unmarked++
		}
		time.Sleep(50 * time.Millisecond)
	}
	if marked < 2 || unmarked < 2 {
		t.Fatalf("saw %d marked children of the gated loop and %d unmarked of the decoy in 15s, want 2 of each", marked, unmarked)
	}
	cnt, _ := g.Counters()
	if cnt.Lineage == 0 {
		t.Errorf("counters %+v: no child gated by lineage", cnt)
	}
}

// loadOnly loads a gate for nothing by file, attached to nothing.
func loadOnly(t *testing.T) *Gate {
	t.Helper()
	testenv.RequireRoot(t, "loading BPF programs")
	g, err := Load(Config{Exempt: Exempt(proc.Default), Form: testForm(t)})
	if err != nil {
		testenv.GateMissing(t, Explain(err))
	}
	t.Cleanup(func() { g.Close() })
	return g
}

func pin(t *testing.T, pid int) *proc.Handle {
	t.Helper()
	st, err := proc.Default.ReadStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	h, err := proc.Default.Open(st.ID())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// isMarked reads whether pid has a mark in the gate's task storage,
// through a pidfd.
func isMarked(t *testing.T, g *Gate, pid int) bool {
	st, err := proc.Default.ReadStat(pid)
	if err != nil {
		return false
	}
	h, err := proc.Default.Open(st.ID())
	if err != nil {
		return false
	}
	defer h.Close()
	var v uint32
	err = g.gated.Lookup(uint32(h.FD()), &v)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return false
	}
	if err != nil {
		t.Fatalf("look up pid %d's mark: %v", pid, err)
	}
	return true // marked() in gate.bpf.c tests presence; lineage stores 0
}
