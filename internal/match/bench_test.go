package match

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"freeze/internal/containtest"
	"freeze/internal/proc"
)

// BenchmarkScan12000 scans /proc with 12,000 real processes of a chain,
// frozen in their own v2 group so the machine is quiet while it is timed.
// Target: under 0.3 s a scan (a plain sequential scan measured 0.3 s
// here). Run: go test ./internal/match -run '^$' -bench Scan12000 -benchtime 5x
func BenchmarkScan12000(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root for the chain's pids cgroup")
	}
	c := containtest.Start(b, containtest.Spec{Shape: containtest.Tree, Cap: 12000, HopCap: 1000000,
		Timeout: 300 * time.Second, Interval: time.Second, V2Group: true})
	if n := c.WaitPopulation(12000, 120*time.Second); n < 12000 {
		b.Fatalf("the chain reached %d of 12000", n)
	}
	if err := os.WriteFile(filepath.Join(c.V2Dir(), "cgroup.freeze"), []byte("1"), 0); err != nil {
		b.Fatal(err)
	}
	tg, err := Resolve(c.Path)
	if err != nil {
		b.Fatal(err)
	}
	s := NewScanner(proc.Default, Spec{Targets: []Target{tg}})
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
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/12000, "µs/process")
}
