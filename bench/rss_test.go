package bench

import (
	"flag"
	"path/filepath"
	"testing"
	"time"

	"freeze/internal/containtest"
	"freeze/internal/testenv"
)

var rss = flag.Bool("rss", false, "measure freeze's peak RSS against chains of 3,000 and 12,000 (root, minutes)")

// TestFreezeRSS measures freeze's peak RSS (VmHWM, which freeze records
// in its timeline at the end of a run) on a full run against a tree of 3,000 and of 12,000.
// The chain is frozen in its own v2 group first, so freeze gets to run at
// 12,000 (under 12,000 tasks spinning it does not start within 30 s; see
// the containment benchmark) and the figure is freeze's, not the load's:
//
//	go test ./bench -run FreezeRSS -v -timeout 20m -args -rss
func TestFreezeRSS(t *testing.T) {
	if !*rss {
		t.Skip("measures with -args -rss (root, minutes)")
	}
	testenv.RequireLive(t, "the benchmark's chains, in pids cgroups")
	bin := buildBench(t)
	for _, n := range []int{3000, 12000} {
		c := containtest.Start(t, containtest.Spec{Shape: containtest.Tree, Cap: n, HopCap: 1000000,
			Timeout: 600 * time.Second, Interval: time.Second, V2Group: true})
		if got := c.WaitPopulation(n, 300*time.Second); got < n {
			t.Fatalf("the chain reached %d of %d", got, n)
		}
		if err := c.FreezeV2(60 * time.Second); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		tl := filepath.Join(t.TempDir(), "t.jsonl")
		t0 := time.Now()
		runFreeze(stop, bin, "--path", c.Path, "--timeout", "120s", "--timeline", tl)
		took := time.Since(t0)
		close(stop)
		left := len(c.Survivors())
		var r Result
		breakdown(&r, t0, tl)
		t.Logf("%d processes: freeze peak RSS %.1f MiB, %v (start-up %.0f ms, match %.0f ms, freeze growth %.0f ms, kill rounds %.0f ms), %d left",
			n, float64(r.RSSKiB)/1024, took.Round(time.Millisecond), r.StartupMS, r.MatchMS, r.FreezeMS, r.KillMS, left)
		if left > 0 {
			t.Errorf("freeze left %d of %d:\n%s", left, n, freezeOutput)
		}
		// Before the next size: the chains must not overlap.
		if err := c.Kill(); err != nil {
			t.Fatal(err)
		}
	}
}
