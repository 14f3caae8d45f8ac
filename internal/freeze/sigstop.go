package freeze

import (
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/match"
	"freeze/internal/proc"
)

// sigstopGroup stops each match with SIGSTOP through its pidfd. It needs
// no cgroup and works for a non-root user on their own processes. Unlike
// a frozen cgroup it has no container: a process forked in the instant
// before its parent stopped is found by the next scan, and anyone may send
// SIGCONT, so it is the last choice.
type sigstopGroup struct {
	fs    proc.FS
	moved []proc.ID
	sent  map[proc.ID]bool // stopped by this group: the same, by identity
}

func newSigstop(fs proc.FS) *sigstopGroup { return &sigstopGroup{fs: fs, sent: map[proc.ID]bool{}} }

func (g *sigstopGroup) Method() Method          { return Sigstop }
func (g *sigstopGroup) Where() string           { return "SIGSTOP (no cgroup)" }
func (g *sigstopGroup) Freezes() bool           { return true }
func (g *sigstopGroup) Holds() bool             { return false }
func (g *sigstopGroup) StopFirst() bool         { return false } // Move is the stop
func (g *sigstopGroup) KillReachesAll() bool    { return false }
func (g *sigstopGroup) ThawHint() string        { return "kill -CONT each stopped pid" }
func (g *sigstopGroup) Reused() bool            { return false }
func (g *sigstopGroup) Notes() []string         { return nil }
func (g *sigstopGroup) Terms() (string, string) { return cgroupTerms() }

// Snapshot counts a stopped process (state T) as in the set, and one
// this group stopped that sleeps uninterruptibly (state D): its SIGSTOP
// is pending, and it stops as it wakes, before it can run a line of its
// own, as a task in D joins a frozen cgroup. Counted outside, one such
// process (in an NFS read, say) kept every round finding it outside,
// each waiting 5 s for it, until the run's deadline.
func (g *sigstopGroup) Snapshot() (func(match.Proc) bool, error) {
	return func(p match.Proc) bool { return p.State == 'T' || p.State == 'D' && g.sent[p.ID] }, nil
}

func (g *sigstopGroup) Move(h *proc.Handle) error {
	if err := h.Signal(unix.SIGSTOP); err != nil {
		return err
	}
	g.moved = append(g.moved, h.ID)
	g.sent[h.ID] = true
	return nil
}

// WaitFrozen waits until every process stopped so far shows state T,
// sleeps in D with the stop pending (see Snapshot), or has gone.
func (g *sigstopGroup) WaitFrozen(deadline time.Time) error {
	return poll(deadline, func() (bool, error) {
		for _, id := range g.moved {
			st, err := g.fs.ReadStat(id.PID)
			if err != nil || st.Start != id.Start || st.Zombie() {
				continue
			}
			if st.State != 'T' && st.State != 'D' {
				return false, nil
			}
		}
		return true, nil
	})
}

// Kill is left to the rounds, which signal every match by pidfd.
func (g *sigstopGroup) Kill() error { return nil }

func (g *sigstopGroup) Populated() (bool, error) { return false, nil }

func (g *sigstopGroup) Remove() error { return nil }
