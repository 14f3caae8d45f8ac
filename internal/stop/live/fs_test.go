package live_test

import (
	"context"
	"testing"
	"time"

	"freeze/internal/containtest"
	"freeze/internal/freeze"
	"freeze/internal/stop"
	"freeze/internal/timeline"
)

// A chain running from overlayfs (layers on two filesystems, xino=off)
// or from a btrfs subvolume reaches zero through the whole stop order,
// with its decoy copy untouched: scans through the gate's iterator and
// through /proc (Tuning.ScanProc, FREEZE_SCAN=proc, where matches were once counted as
// held by a gate that did not know their file, and never signalled),
// and with the cgroup method, which needs no gate at all.
func TestStopOrderReachesZeroOnOverlayfsAndBtrfs(t *testing.T) {
	requireRoot(t)
	mounts := []struct {
		name  string
		mount func(testing.TB) string
	}{{"overlayfs", containtest.Overlay}, {"btrfs", containtest.Btrfs}}
	runs := []struct {
		name   string
		method freeze.Method
		scan   string
	}{{"bpf", freeze.Bpf, ""}, {"bpf-procscan", freeze.Bpf, "proc"}, {"cgroup2", freeze.Cgroup2, ""}}
	for _, mt := range mounts {
		for _, r := range runs {
			t.Run(mt.name+"/"+r.name, func(t *testing.T) {
				supported(t, r.method)
				dir := mt.mount(t)
				c := containtest.Start(t, containtest.Spec{Shape: containtest.Tree, Cap: 300, HopCap: 1000000, Timeout: 300 * time.Second, Interval: 20 * time.Millisecond, Dir: dir})
				decoy := startDecoy(t, t.TempDir())
				if n := c.WaitPopulation(300, 90*time.Second); n < 300 {
					t.Fatalf("chain reached %d processes, want 300", n)
				}
				cfg := config(t, r.method, c.Path)
				cfg.Tuning.ScanProc = r.scan == "proc"
				raise(t)
				rec, _ := timeline.New("", func(e timeline.Event) { t.Logf("%8.1f ms %s", e.ElapsedMS, e.Msg) })
				out, err := stop.Order(context.Background(), cfg, rec)
				if err != nil {
					t.Fatalf("run: %v (survivors %d)", err, len(out.Survivors))
				}
				if out.Group == nil {
					t.Fatalf("outcome %v with no group: nothing matched the chain", out.Kind)
				}
				if out.Kind != stop.Zero || out.Group.Method() != r.method {
					t.Fatalf("outcome %v, method %s, want zero by %s", out.Kind, out.Group.Method(), r.method)
				}
				if left := c.Survivors(); len(left) > 0 {
					t.Fatalf("freeze reported zero but %d processes of the chain are alive: %v", len(left), left)
				}
				checkDecoy(t, decoy)
				noGroupLeft(t, cfg.Spec)
			})
		}
	}
}
