package gate

import (
	"os"
	"testing"

	"freeze/internal/proc"
	"freeze/internal/testenv"
)

// BenchmarkGateAttached is freeze's time from nothing loaded to "gate
// attached" when no guard preloaded a gate: load what fixes the set,
// fill, attach. The iterators (LoadExtras) come after, as a run loads
// them; -extras-first measures the order in which everything loads
// before the attach, the order freeze had before.
//
//	go test ./internal/gate -run '^$' -bench GateAttached -benchtime 20x
func BenchmarkGateAttached(b *testing.B) {
	testenv.RequireRoot(b, "loading BPF programs")
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	st, err := proc.StatFile(self)
	if err != nil {
		b.Fatal(err)
	}
	files := []File{{Path: self, Stat: st}} // a file whose processes are only this benchmark, which is exempt
	for _, bc := range []struct {
		name        string
		form        Form
		extrasFirst bool
	}{{"auto", FormAuto, false}, {"tp_btf", FormStop, false}, {"auto-extras-first", FormAuto, true}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				g, err := Load(Config{Files: files, Exempt: Exempt(proc.Default), Form: bc.form})
				if err != nil {
					b.Skipf("the gate does not load here: %s", Explain(err))
				}
				if bc.extrasFirst {
					g.LoadExtras()
				}
				if err := g.Attach(); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				g.LoadExtras()
				g.Close()
				b.StartTimer()
			}
		})
	}
}
