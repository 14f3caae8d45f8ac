package live_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"freeze/internal/containtest"
	"freeze/internal/drill"
	"freeze/internal/freeze"
	"freeze/internal/stop"
	"freeze/internal/timeline"
)

// No method frees a slot under the chain's cap. A chain at its cap
// (pids.max 300, the harness's) is held and killed by each method while
// the cap's pids.current and every pid in its groups are sampled every
// 10 ms: pids.current never passes 300, and the chain's total stays at
// the 300 it had, since a chain at its cap can grow only into a slot
// that something frees. cgroup2 freezes in place (a move to a group
// outside the cap took the pids charge with it, and the chain refilled
// each slot: 1,157 under a cap of 300 on Debian's 7.2); the v1 freezer
// moves in a hierarchy of its own, not the pids one; SIGSTOP and the gate
// move nothing. The line "cap: pids.max 300, peak P, chain total N" is
// the kernel matrix's reading (its pure-v2 guests: on a hybrid host, v1
// pids and v2 without controllers, no v2 move frees a pids slot, so this
// host cannot show a refill).
func TestNoMethodFreesASlotUnderTheCap(t *testing.T) {
	requireRoot(t)
	for _, m := range []freeze.Method{freeze.Cgroup2, freeze.Cgroup1, freeze.Sigstop, freeze.Bpf} {
		t.Run(string(m), func(t *testing.T) {
			supported(t, m)
			raise(t)
			c := containtest.Start(t, containtest.Spec{Shape: containtest.Tree, Cap: 300, HopCap: 1000000, Timeout: 660 * time.Second, Interval: 20 * time.Millisecond})
			if n := c.WaitPopulation(300, 90*time.Second); n != 300 {
				t.Fatalf("chain reached %d of its cap of 300", n)
			}
			stopSampling := drill.WatchCap(c.CapDir())
			rec, _ := timeline.New("", func(e timeline.Event) { t.Logf("%8.1f ms %s", e.ElapsedMS, e.Msg) })
			out, err := stop.Order(context.Background(), config(t, m, c.Path), rec)
			cs := stopSampling()
			peak, total := cs.Peak, cs.Total
			t.Logf("%s", cs)
			if err != nil || out.Kind != stop.Zero {
				t.Fatalf("stop order: %v (%v)", out.Kind, err)
			}
			if peak > 300 {
				t.Errorf("the cap's pids.current reached %d, past its pids.max of 300", peak)
			}
			// 330: the 300 at the start and a few a fork in flight as the
			// sampling began may add; a refill adds one a move.
			if total > 330 {
				t.Errorf("the chain totalled %d processes under a cap of 300 while freeze held it: slots were freed, and it refilled them", total)
			}
			if left := c.Survivors(); len(left) > 0 {
				t.Fatalf("%d alive after the stop order", len(left))
			}
		})
	}
}

// In place, on this kernel: a chain alone in a v2 group of its own is
// held by freezing that group itself, with nothing moved (its
// cgroup.procs still lists the whole chain), and marked as freeze's; the
// finishing run reuses it, kills the chain, gives the group back the
// cgroup.freeze it had and removes the mark. freeze's own group is never
// made at the hierarchy's top.
func TestCgroup2HoldsAChainInItsOwnGroup(t *testing.T) {
	requireRoot(t)
	supported(t, freeze.Cgroup2)
	raise(t)
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Tree, Cap: 200, HopCap: 1000000, Timeout: 300 * time.Second, V2Group: true})
	if n := c.WaitPopulation(200, 90*time.Second); n != 200 {
		t.Fatalf("chain reached %d of 200", n)
	}
	own := c.V2Dir()
	before := procsOf(t, own)
	cfg := config(t, freeze.Cgroup2, c.Path)
	cfg.Hold = true
	rec, _ := timeline.New("", nil)
	out, err := stop.Order(context.Background(), cfg, rec)
	if err != nil || out.Kind != stop.Held {
		t.Fatalf("hold: %+v %v", out, err)
	}
	if out.Group.Where() != own {
		t.Fatalf("held in %s, want the chain's own group %s, frozen in place", out.Group.Where(), own)
	}
	if b, _ := os.ReadFile(filepath.Join(own, "cgroup.freeze")); strings.TrimSpace(string(b)) != "1" {
		t.Fatalf("%s/cgroup.freeze reads %q: not frozen in place", own, b)
	}
	if after := procsOf(t, own); len(after) < len(before) {
		t.Fatalf("%s listed %d, now %d: something moved out", own, len(before), len(after))
	}
	name := freeze.GroupName(cfg.Spec)
	if _, err := os.Stat(filepath.Join(own, name)); err != nil {
		t.Fatalf("no mark %s in the group frozen in place: %v", name, err)
	}
	if dirs := freeze.GroupDirs(name); len(dirs) != 1 || dirs[0] != filepath.Join(own, name) {
		t.Fatalf("freeze's groups %v, want only the mark in %s", dirs, own)
	}
	cfg.Hold = false
	rec2, _ := timeline.New("", nil)
	out2, err := stop.Order(context.Background(), cfg, rec2)
	if err != nil || out2.Kind != stop.Zero || !out2.Group.Reused() {
		t.Fatalf("finishing run: %v reused %v (%v)", out2.Kind, out2.Group != nil && out2.Group.Reused(), err)
	}
	if b, _ := os.ReadFile(filepath.Join(own, "cgroup.freeze")); strings.TrimSpace(string(b)) != "0" {
		t.Fatalf("%s/cgroup.freeze reads %q after the finishing run: not given back", own, b)
	}
	if fileThere(filepath.Join(own, name)) {
		t.Fatalf("the mark %s is left in %s", name, own)
	}
}

func procsOf(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

func fileThere(p string) bool { _, err := os.Stat(p); return err == nil }
