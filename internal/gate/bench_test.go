package gate

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"freeze/internal/containtest"
	"freeze/internal/exefile"
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

// BenchmarkIdentityReaderBeside3000 reads freeze's own descriptors'
// identities (the identity reader, run at each fill of the gate, before
// anything is held) with a tree of 3,000 real processes on the machine,
// frozen in their own v2 group: attached to freeze's own process (own),
// and attached to every task, as the reader was before (every-task), in
// one run, so that their ratio carries over to other hosts.
//
//	go test ./internal/gate -run '^$' -bench IdentityReaderBeside3000 -benchtime 50x
func BenchmarkIdentityReaderBeside3000(b *testing.B) {
	testenv.RequireLive(b, "the chain's pids cgroup")
	g, err := Load(Config{Exempt: Exempt(proc.Default), Ahead: true})
	if err != nil {
		b.Skipf("the gate does not load here: %s", Explain(err))
	}
	defer g.Close()
	if g.ident == nil {
		b.Skipf("the identity reader does not load here: %v", g.Missing)
	}
	containtest.StartFrozenTree(b, 3000)
	every := func(p *ebpf.Program) (io.ReadCloser, error) {
		l, err := link.AttachIter(link.IterOptions{Program: p})
		if err != nil {
			return nil, err
		}
		defer l.Close()
		return l.Open()
	}
	for _, bc := range []struct {
		name string
		open func(*ebpf.Program) (io.ReadCloser, error)
	}{{"own", openOwnFiles}, {"every-task", every}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				r, err := bc.open(g.ident)
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.Copy(io.Discard, r)
				r.Close()
				if err != nil || n == 0 {
					b.Fatalf("read %d bytes: %v", n, err)
				}
			}
		})
	}
}

// BenchmarkExecBesideTheRecorder is the cost of the argv recorder to every
// exec on the machine: one fork and exec of a copy of true, waited for,
// with the recorder detached (off) and attached (on). An exec's time
// drifts by a third between runs here, more than the recorder's share,
// so "on" also reports the recorder's own time in the kernel per exec
// (the kernel's BPF statistics, turned on for the run): its ratio to the
// exec's time in the same run is what carries over to another host.
//
//	go test ./internal/gate -run '^$' -bench ExecBesideTheRecorder -benchtime 2000x -count 3
func BenchmarkExecBesideTheRecorder(b *testing.B) {
	testenv.RequireRoot(b, "loading BPF programs")
	tru := filepath.Join(b.TempDir(), "true")
	if err := exefile.Copy("/bin/true", tru); err != nil {
		b.Fatal(err)
	}
	for _, on := range []bool{false, true} {
		b.Run(map[bool]string{false: "off", true: "on"}[on], func(b *testing.B) {
			var r *Recorder
			if on {
				stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
				if err != nil {
					b.Skipf("the kernel's BPF statistics: %v", err)
				}
				defer stats.Close()
				if r, err = StartRecorder(); err != nil {
					b.Skipf("the argv recorder does not attach here: %v", err)
				}
				defer r.Close()
			}
			for b.Loop() {
				if err := exec.Command(tru, "an", "argv", "of", "a", "few", "words").Run(); err != nil {
					b.Fatal(err)
				}
			}
			if r != nil {
				st, err := r.prog.Stats()
				if err != nil || st.RunCount == 0 {
					b.Fatalf("the recorder's statistics: %+v %v", st, err)
				}
				b.ReportMetric(float64(st.Runtime.Nanoseconds())/float64(st.RunCount), "recorder-ns/exec")
			}
		})
	}
}
