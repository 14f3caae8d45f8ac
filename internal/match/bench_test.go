package match

import (
	"os"
	"testing"
	"time"

	"freeze/internal/containtest"
	"freeze/internal/gate"
	"freeze/internal/proc"
	"freeze/internal/testenv"
)

// BenchmarkScan12000 scans /proc with 12,000 real processes of a chain,
// frozen in their own v2 group so the machine is quiet while it is timed.
// Target: under 0.3 s a scan (a plain sequential scan measured 0.3 s
// here). Run: go test ./internal/match -run '^$' -bench Scan12000 -benchtime 10x
// (the chain takes a minute or two to grow, and is grown twice: once for
// the benchmark's trial run of one scan, once for the timed run).
func BenchmarkScan12000(b *testing.B) {
	testenv.RequireLive(b, "the chain's pids cgroup")
	c := containtest.Start(b, containtest.Spec{Shape: containtest.Tree, Cap: 12000, HopCap: 1000000,
		Timeout: 600 * time.Second, Interval: time.Second, V2Group: true})
	if n := c.WaitPopulation(12000, 400*time.Second); n < 12000 {
		b.Fatalf("the chain reached %d of 12000", n)
	}
	// The kernel takes seconds to freeze 12,000 tasks (5.5 s here); a scan
	// timed before that competes with the freezing, not with /proc.
	if err := c.FreezeV2(60 * time.Second); err != nil {
		b.Fatal(err)
	}
	tg, err := Resolve(c.Path)
	if err != nil {
		b.Fatal(err)
	}
	s := NewScanner(proc.Default, Spec{Targets: []Target{tg}})
	// The first scan that sees a process makes its /proc entries; freeze's
	// first scan in an incident is such a scan. Reported on its own.
	t0 := time.Now()
	if res, err := s.Scan(); err != nil || res.Live() < 12000 {
		b.Fatalf("first scan: %d of 12000, %v", res.Live(), err)
	}
	first := time.Since(t0)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := s.Scan()
		if err != nil {
			b.Fatal(err)
		}
		if res.Live() < 12000 {
			b.Fatalf("scan found %d of 12000", res.Live())
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(first.Milliseconds()), "first-scan-ms")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/12000, "µs/process")
}

// BenchmarkResolveDeleted3000 resolves --path of a file deleted under a
// tree of 3,000 real processes (the containment benchmark's
// deleted-3000, whose start-up from the guard was 31 ms against 4 for a
// file that still exists), through /proc and from the task iterator of a
// gate loaded ahead (a guard's spare). The first resolve of each is
// reported on its own: /proc's is the first look at each process's
// entries, as an incident's is; the timed ones find them made. The
// iterator's goes first, so /proc's first is still a first look. Run:
// go test ./internal/match -run '^$' -bench ResolveDeleted3000 -benchtime 20x
func BenchmarkResolveDeleted3000(b *testing.B) {
	testenv.RequireLive(b, "the chain's pids cgroup")
	c := containtest.StartFrozenTree(b, 3000)
	if err := os.Remove(c.Path); err != nil {
		b.Fatal(err)
	}
	// Without a gate's scan iterator, only /proc is measured.
	var fromGate TaskSource
	if g, err := gate.Load(gate.Config{Ahead: true}); err != nil {
		b.Logf("no gate here (%v): /proc only", err)
	} else {
		defer g.Close()
		if g.LoadExtras(); g.CanScan() {
			fromGate = g.Tasks
		} else {
			b.Logf("the scan iterator does not load here (%v): /proc only", g.Missing)
		}
	}
	resolve := func(b *testing.B, tasks TaskSource) time.Duration {
		t0 := time.Now()
		if _, others, err := ResolveDeletedFrom(proc.Default, tasks, c.Path); err != nil || others != 0 {
			b.Fatalf("resolve: %v (%d others)", err, others)
		}
		return time.Since(t0)
	}
	var firstGate time.Duration
	if fromGate != nil {
		firstGate = resolve(b, fromGate)
	}
	firstProc := resolve(b, nil)
	for _, r := range []struct {
		name  string
		tasks TaskSource
		first time.Duration
	}{{"proc", nil, firstProc}, {"gate", fromGate, firstGate}} {
		if r.name == "gate" && r.tasks == nil {
			continue
		}
		b.Run(r.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				resolve(b, r.tasks)
			}
			b.ReportMetric(float64(r.first.Microseconds())/1000, "first-ms")
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "warm-ms")
		})
	}
}
