package proc

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"freeze/internal/containtest"

	"golang.org/x/sys/unix"
)

// Exits pins a live process by pidfd (not by reading /proc), counts one
// that is gone or whose pid has another start time at once, and sees the
// pinned one die when it is killed.
func TestExitsWaitsOnPidfds(t *testing.T) {
	c, ids := chainOf(t, 4)
	reused := ID{PID: ids[0].PID, Start: ids[0].Start + 1}
	w, gone := watchAll(append(ids, reused))
	defer w.Close()
	if gone != 1 || w.Left() != len(ids) {
		t.Fatalf("Watch: %d gone and %d left, want 1 (the reused pid) and %d", gone, w.Left(), len(ids))
	}
	if len(w.byFD) != len(ids) || len(w.polled) != 0 {
		t.Fatalf("%d pinned by pidfd and %d read from /proc, want all %d pinned", len(w.byFD), len(w.polled), len(ids))
	}
	if n := w.Wait(200 * time.Millisecond); n != 0 {
		t.Fatalf("Wait saw %d exits of a chain that is alive", n)
	}
	c.Kill()
	seen := 0
	for deadline := time.Now().Add(10 * time.Second); w.Left() > 0 && time.Now().Before(deadline); {
		seen += w.Wait(100 * time.Millisecond)
	}
	if seen != len(ids) || w.Left() != 0 {
		t.Fatalf("after the kill Wait saw %d exits, %d left; want %d and 0", seen, w.Left(), len(ids))
	}
}

// With few descriptors to spare, Exits pins at most half of them and
// watches the rest by /proc, and still sees every exit.
func TestExitsLeavesDescriptorsToTheRun(t *testing.T) {
	c, ids := chainOf(t, 6)
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	// Descriptors for what is open now and 8 more: room to pin a few,
	// not all 6.
	open, _ := os.ReadDir("/proc/self/fd")
	low := lim
	low.Cur = uint64(len(open) + 8)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	w := func() *Exits {
		// Restored however Watch ends: the package's other tests need
		// their descriptors.
		defer unix.Setrlimit(unix.RLIMIT_NOFILE, &lim)
		w, _ := watchAll(ids)
		return w
	}()
	defer w.Close()
	if len(w.byFD) == 0 || len(w.byFD) > 4 || len(w.byFD)+len(w.polled) != len(ids) {
		t.Fatalf("with 8 descriptors to spare: %d pinned, %d watched by /proc; want at most 4 (half) pinned, the rest of %d watched", len(w.byFD), len(w.polled), len(ids))
	}
	c.Kill()
	seen := 0
	for deadline := time.Now().Add(10 * time.Second); w.Left() > 0 && time.Now().Before(deadline); {
		seen += w.Wait(100 * time.Millisecond)
	}
	if seen != len(ids) {
		t.Fatalf("after the kill Wait saw %d exits, want %d", seen, len(ids))
	}
}

// watchAll watches each of ids, as a kill round watches what it did not
// signal itself, and returns how many were gone already.
func watchAll(ids []ID) (*Exits, int) {
	w := Default.NewExits()
	gone := 0
	for _, id := range ids {
		if w.Watch(id) {
			gone++
		}
	}
	return w, gone
}

// chainOf starts a tree chain capped at n (a literal at the caller) and
// returns it with the IDs of its n processes.
func chainOf(t testing.TB, n int) (*containtest.Chain, []ID) {
	t.Helper()
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Tree, Cap: n, HopCap: 100, Timeout: 30 * time.Second})
	if got := c.WaitPopulation(n, 10*time.Second); got < n {
		t.Fatalf("chain reached %d processes, want %d", got, n)
	}
	var ids []ID
	for _, pid := range c.Survivors() {
		st, err := Default.ReadStat(pid)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, st.ID())
	}
	if len(ids) != n {
		t.Fatalf("%d live members of the chain, want %d", len(ids), n)
	}
	return c, ids
}

// A process signalled through a pidfd is watched through that same pidfd
// (Adopt): no second open, and its death is seen on it.
func TestExitsAdoptsTheSignalsPidfd(t *testing.T) {
	_, ids := chainOf(t, 3)
	w := Default.NewExits()
	defer w.Close()
	fds := map[int32]ID{}
	for _, id := range ids {
		h, err := Default.Open(id)
		if err != nil {
			t.Fatal(err)
		}
		fds[int32(h.FD())] = id
		if err := h.Signal(unix.SIGKILL); err != nil {
			t.Fatal(err)
		}
		w.Adopt(h)
	}
	for fd, id := range fds {
		if w.byFD[fd] != id {
			t.Fatalf("pidfd %d of %v is not the one watched (%v): Adopt opened another", fd, id, w.byFD)
		}
	}
	seen := 0
	for deadline := time.Now().Add(10 * time.Second); w.Left() > 0 && time.Now().Before(deadline); {
		seen += w.Wait(100 * time.Millisecond)
	}
	if seen != len(ids) {
		t.Fatalf("after the kill through the adopted pidfds Wait saw %d exits, want %d", seen, len(ids))
	}
}

// What a kill round saves per process it signals by pidfd, now that the
// wait adopts the signal's pidfd: one Open (pidfd_open and a read of the
// stat file to check the start time) and one close.
func BenchmarkOpen(b *testing.B) {
	_, ids := chainOf(b, 50)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h, err := Default.Open(ids[i%len(ids)])
		if err != nil {
			b.Fatal(err)
		}
		h.Close()
	}
}

// WatchKilled pins a killed process by its pidfd alone (no read of its
// stat: the reads, one per process of thousands while they die, took
// the CPU of their deaths) and sees it die; a pid with no process is
// gone at once.
func TestExitsWatchesTheKilledByPidfdAlone(t *testing.T) {
	c, ids := chainOf(t, 4)
	w := Default.NewExits()
	defer w.Close()
	c.Kill()
	gone := 0
	for _, id := range ids {
		if w.WatchKilled(id) {
			gone++
		}
	}
	if len(w.polled) != 0 || len(w.byFD)+gone != len(ids) {
		t.Fatalf("%d pinned, %d read from /proc, %d gone already: want all %d pinned or gone", len(w.byFD), len(w.polled), gone, len(ids))
	}
	for deadline := time.Now().Add(10 * time.Second); w.Left() > 0 && time.Now().Before(deadline); {
		gone += w.Wait(100 * time.Millisecond)
	}
	if gone != len(ids) || w.Left() != 0 {
		t.Fatalf("after the kill: %d seen gone, %d left; want %d and 0", gone, w.Left(), len(ids))
	}
	// One the test started and reaped itself: its pid has no process.
	cmd := exec.Command("/bin/true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if !w.WatchKilled(ID{PID: cmd.Process.Pid}) {
		t.Errorf("a pid with no process is not gone at once")
	}
}
