// Package rounds kills a chain that freeze has made a fixed set, round by
// round, until two scans in a row find no live match and the group holds
// no process: that is zero.
//
// Each round rescans inside the group and outside it, kills what is alive
// (the group's own kill, then SIGKILL by pidfd for anything the group kill
// does not reach) and waits a short, bounded time for the deaths. It never
// touches a process the scan did not match, and signals only through
// pidfds checked against the scanned start time.
package rounds

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/freeze"
	"freeze/internal/match"
	"freeze/internal/proc"
)

// Config bounds the rounds.
type Config struct {
	FS       proc.FS
	Scanner  *match.Scanner
	Group    freeze.Group
	Rounds   int           // at most this many rounds
	Deadline time.Time     // and no later than this
	Wait     time.Duration // how long a round waits after the last death it saw
	// Stop, if set, is asked after each round: true ends the rounds with
	// ErrStopped, leaving what remains in the group.
	Stop func() bool
	// Progress, if set, is told every ProgressEvery inside a round that
	// lasts that long: how many it has signalled and how many of what it
	// waits for are gone. A run whose record stopped at "fixed" could
	// not say where its kill stood (#34).
	Progress func(Progress)
}

// ProgressEvery is how often a long round reports.
const ProgressEvery = time.Second

// Progress is where a round stands.
type Progress struct {
	N        int
	Live     int // live matches at the round's scan
	Signaled int // SIGKILLs sent by pidfd so far
	Waiting  int // processes the round waits for one by one
	Gone     int // of which known dead so far
	Group    bool
	Took     time.Duration
}

// progress reports p if ProgressEvery has passed since *last.
func (c Config) progress(last *time.Time, p Progress) {
	if c.Progress == nil || time.Since(*last) < ProgressEvery {
		return
	}
	*last = time.Now()
	c.Progress(p)
}

// Round is what one round saw and did.
type Round struct {
	N        int
	Live     int // live matches the scan found
	Inside   int // of which in the frozen set
	Signaled int // SIGKILLs sent by pidfd
	GroupErr string
	// KillTook is how long the group's own kill took (cgroup.kill, the
	// v1 freezer's round, the gate's iterator): a stalled round shows
	// whether it was stuck there (#34).
	KillTook time.Duration
	Took     time.Duration
}

// Survivor is a process still alive when the rounds ran out.
type Survivor struct {
	match.Proc
	Wchan string // where it sleeps, for state D
}

// Outcome is how the rounds ended.
type Outcome struct {
	Zero      bool
	Survivors []Survivor
	Zombies   []match.Zombie
}

// ErrSurvivors means the rounds ran out with live matches left.
var ErrSurvivors = errors.New("survivors remain")

// ErrStopped means Config.Stop ended the rounds early.
var ErrStopped = errors.New("stopped between kill rounds")

// Run kills in rounds until zero, calling onRound after each round.
func Run(c Config, onRound func(Round)) (Outcome, error) {
	var out Outcome
	empty := 0
	var last match.Result
	// groupKilled are the processes a group kill claimed to reach in an
	// earlier round. One that is alive a round later is signalled by
	// pidfd as well: inside is a claim (a gate that knows a file by an
	// identity the kernel does not share, a group kill that failed
	// quietly), and zero must not rest on it.
	groupKilled := map[proc.ID]bool{}
	for n := 1; n <= c.Rounds; n++ {
		t0 := time.Now()
		res, err := c.Scanner.Scan()
		if err != nil {
			return out, err
		}
		last = res
		populated, _ := c.Group.Populated()
		if res.Live() == 0 && !populated {
			// Zero needs two scans in a row: a process between fork and
			// its first scan is not seen by one.
			empty++
			if empty >= 2 {
				out.Zero = true
				out.Zombies = res.Zombies
				return out, nil
			}
			continue
		}
		empty = 0
		last := time.Now()
		r, w, err := kill(c, res, populated, groupKilled, n, t0, &last)
		if err != nil {
			return out, err
		}
		r.N = n
		waitDeaths(c, w, minTime(time.Now().Add(c.Wait), c.Deadline), r, t0, &last)
		w.exits.Close()
		r.Took = time.Since(t0)
		onRound(r)
		if c.Stop != nil && c.Stop() {
			return out, fmt.Errorf("%w: after round %d, %d were alive before it", ErrStopped, n, r.Live)
		}
		if time.Now().After(c.Deadline) {
			break
		}
	}
	return survivors(c, last)
}

// deaths is what a round waits to see dead: exits watches the processes
// waited for one by one (n of them, gone of which were gone already).
// later are processes the group's kill reached that are not watched yet:
// of thousands killed at once, a sample is watched while they die, and
// the rest once the sample is gone (waitDeaths).
type deaths struct {
	exits   *proc.Exits
	n, gone int
	later   []proc.ID
}

// sampleSize is how many of the processes a group's kill reached are
// watched while they die; the rest are opened once those are gone. A
// pidfd_open and an epoll add for each of 2,000 killed at once, then an
// epoll delete and a close at each death, were 29 ms of freeze's CPU
// beside bomb-2000's dying chain (bench/README.md, 2026-12-05), CPU the
// deaths wanted; opened after the sample, most find no process.
const sampleSize = 64

// kill is one round's killing: the group's own kill, then a pidfd
// SIGKILL for each live match the group kill does not reach. It returns
// the round so far and what the round waits to see dead; the caller
// closes its exits.
func kill(c Config, res match.Result, populated bool, groupKilled map[proc.ID]bool, n int, t0 time.Time, last *time.Time) (Round, deaths, error) {
	inside, err := c.Group.Snapshot()
	if err != nil {
		return Round{}, deaths{}, err
	}
	r := Round{Live: res.Live()}
	killReached := false
	// The group's own kill first, whenever anything is alive: a cgroup's
	// kill of what it holds, the gate's of everything it gates (which
	// need not be in any group).
	k0 := time.Now()
	if err := c.Group.Kill(); err != nil {
		r.GroupErr = err.Error()
	} else {
		killReached = c.Group.KillReachesAll()
	}
	r.KillTook = time.Since(k0)
	// wait: what the round waits to see dead. Members of a group that
	// holds them (a cgroup), populated, are waited for through it; the
	// rest one by one. The gate's set is in no group: its Populated says
	// a child was born, not that members are left, and a round 1 that
	// trusted it waited for none and left the deaths to a second round
	// that signalled all 1,885 again.
	// A process signalled through a pidfd is waited for on that same
	// pidfd (Adopt), not opened again.
	direct := !populated || !c.Group.Holds()
	w := deaths{exits: c.FS.NewExits()}
	var reached []proc.ID // killed by the group's kill, waited for one by one
	for i, p := range res.Procs {
		if i%256 == 0 {
			c.progress(last, Progress{N: n, Live: r.Live, Signaled: r.Signaled, Waiting: w.n, Gone: w.gone, Took: time.Since(t0)})
		}
		in := inside(p)
		if in {
			r.Inside++
		}
		waited := !in || direct
		if waited {
			w.n++
		}
		if in && killReached && !groupKilled[p.ID] {
			groupKilled[p.ID] = true
			if waited {
				reached = append(reached, p.ID)
			}
			continue
		}
		h, err := c.FS.Open(p.ID)
		if errors.Is(err, proc.ErrGone) || errors.Is(err, proc.ErrReused) {
			if waited {
				w.gone++
			}
			continue // gone, or the pid now belongs to someone else
		}
		if err != nil {
			if waited && w.exits.Watch(p.ID) {
				w.gone++
			}
			continue
		}
		if h.Signal(unix.SIGKILL) == nil {
			r.Signaled++
		}
		if waited {
			w.exits.Adopt(h)
		} else {
			h.Close()
		}
	}
	w.later = w.watchSample(reached)
	return r, w, nil
}

// watchSample watches up to sampleSize of ids, spread evenly over them,
// by pidfd alone (WatchKilled: they are killed already), and returns the
// rest, to be watched once the sample is gone.
func (w *deaths) watchSample(ids []proc.ID) (rest []proc.ID) {
	step := max(len(ids)/sampleSize, 1)
	for i, id := range ids {
		if i%step != 0 || i/step >= sampleSize {
			rest = append(rest, id)
			continue
		}
		if w.exits.WatchKilled(id) {
			w.gone++
		}
	}
	return rest
}

// survivors lists who is left when the rounds ran out of rounds or time.
func survivors(c Config, last match.Result) (Outcome, error) {
	var out Outcome
	res, err := c.Scanner.Scan()
	if err != nil {
		res = last
	}
	for _, p := range res.Procs {
		s := Survivor{Proc: p}
		if p.State == 'D' {
			s.Wchan = c.FS.Wchan(p.PID)
		}
		out.Survivors = append(out.Survivors, s)
	}
	out.Zombies = res.Zombies
	if len(out.Survivors) == 0 {
		// The last scan found none, but zero was never confirmed twice:
		// the group still reported members, or the chain forked until
		// the rounds ran out (a method that freezes nothing).
		return out, fmt.Errorf("%w: the last scan found none, but zero was not confirmed by two empty scans before the rounds ran out", ErrSurvivors)
	}
	return out, fmt.Errorf("%w: %d", ErrSurvivors, len(out.Survivors))
}

// waitDeaths waits until the group is empty and every process ds
// watches is gone or a zombie, or until deadline. A death seen pushes deadline
// out to c.Wait from now (never past c.Deadline): a round does not end
// while its kill is still taking effect. On a slow kernel the signalled
// chain died at 20 a second, and twenty rounds of 3 s each, every one
// signalling all that was left again, ran out with 135 still dying.
// c.Stop is asked while waiting, so an interrupt is not held up by a
// long round. The wait costs no CPU while nothing dies (proc.Exits): the
// count of every death that it made every 100 ms, at real-time priority,
// kept a killed tree of 1,500 from dying for 3 min 11 s (#34).
func waitDeaths(c Config, ds deaths, deadline time.Time, r Round, t0 time.Time, last *time.Time) {
	// The deaths are waited for on pidfds, not by reading /proc: the
	// reads took the CPU the dying chain needed (proc.Exits says how).
	w, gone, later := ds.exits, ds.gone, ds.later
	asked := time.Now()
	for {
		populated, err := c.Group.Populated()
		held := err == nil && populated
		c.progress(last, Progress{N: r.N, Live: r.Live, Signaled: r.Signaled, Waiting: ds.n, Gone: gone, Group: held, Took: time.Since(t0)})
		if w.Left() == 0 && len(later) > 0 {
			// The sample is gone: the rest now, each checked against its
			// start time (a pid freed by the deaths may be someone's
			// already). Most find no process.
			for _, id := range later {
				if w.Watch(id) {
					gone++
				}
			}
			later = nil
			continue
		}
		if !held && w.Left() == 0 {
			return
		}
		if c.Stop != nil && time.Since(asked) >= askEvery {
			asked = time.Now()
			if c.Stop() {
				return
			}
		}
		// A group that holds members is looked at every 2 ms (its
		// emptiness has no pidfd); otherwise the wait sleeps until a
		// death, the next question to Stop, or the deadline.
		d := min(time.Until(deadline), askEvery)
		if held {
			d = 2 * time.Millisecond
		}
		if n := w.Wait(max(d, time.Millisecond)); n > 0 {
			gone += n
			deadline = minTime(time.Now().Add(c.Wait), c.Deadline)
			if w.Left() > 0 {
				// Let deaths gather: woken at each one, a real-time
				// waiter takes a CPU from the dying thousands as often.
				time.Sleep(coalesce)
			}
		}
		// The deadline is judged after a look at the deaths, never
		// before: a waiter that got no CPU for longer than the wait
		// (at ordinary priority beside the dying chain) would otherwise
		// end the round with the deaths of that time unseen.
		if time.Now().After(deadline) {
			return
		}
	}
}

// coalesce is how long the wait sleeps after it saw deaths, before it
// looks again.
const coalesce = 2 * time.Millisecond

// askEvery is how often a round asks Stop while it waits, and the longest
// it sleeps at a time.
const askEvery = 100 * time.Millisecond

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
