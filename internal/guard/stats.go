package guard

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"time"

	"freeze/internal/timeline"

	"golang.org/x/sys/unix"
)

// Stats is what a guard's requests came to, for its metrics.
type Stats struct {
	Armed                bool
	Runs                 map[string]int // by outcome
	LastRun              time.Time
	LastZeroMS           float64
	GateForks, GateExecs uint64
	// AutoDeclined counts the chains --auto judged growing and deep and
	// would not act on (a daemon, an interpreter, outside --auto-under,
	// a file it could not pin): each one an alert.
	AutoDeclined int
	// WouldHold counts, in monitor mode (--auto-mode monitor), the holds
	// each trigger (growth, cap) would have made.
	WouldHold map[string]int
	// AutoDisarmed: the disarmer stopped the automatic triggers.
	AutoDisarmed bool
}

type stats struct {
	mu sync.Mutex
	s  Stats
}

func (st *stats) declined() {
	st.mu.Lock()
	st.s.AutoDeclined++
	st.mu.Unlock()
}

func (st *stats) wouldHold(trigger string) {
	st.mu.Lock()
	if st.s.WouldHold == nil {
		st.s.WouldHold = map[string]int{}
	}
	st.s.WouldHold[trigger]++
	st.mu.Unlock()
}

func (st *stats) add(outcome string, h timeline.HostRun, at time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.s.Runs == nil {
		st.s.Runs = map[string]int{}
	}
	st.s.Runs[outcome]++
	st.s.LastRun, st.s.LastZeroMS = at, h.ZeroMS
	st.s.GateForks += h.GateForks
	st.s.GateExecs += h.GateExecs
}

// Stats is what this guard's requests came to since it was armed.
func (g *Guard) Stats() Stats {
	g.stats.mu.Lock()
	defer g.stats.mu.Unlock()
	s := g.stats.s
	s.Armed = true
	s.Runs = map[string]int{}
	for k, v := range g.stats.s.Runs {
		s.Runs[k] = v
	}
	s.AutoDisarmed = g.disarmedNow()
	s.WouldHold = map[string]int{}
	for k, v := range g.stats.s.WouldHold {
		s.WouldHold[k] = v
	}
	return s
}

// ReadStats reads what the guards of runDir recorded in their log, and
// whether one is armed now (one holds the directory's lock). A missing
// log is no guard: zero stats and no error.
func ReadStats(runDir string) (Stats, error) {
	var st stats
	st.s = Stats{Runs: map[string]int{}, Armed: Armed(runDir)}
	f, err := os.Open(filepath.Join(runDir, LogName))
	if errors.Is(err, os.ErrNotExist) {
		return st.s, nil
	}
	if err != nil {
		return st.s, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		var e RequestLine
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Event != "request" {
			continue
		}
		at, _ := time.Parse(time.RFC3339Nano, e.Time)
		st.add(e.Outcome, timeline.HostRun{ZeroMS: e.ZeroMS, GateForks: e.GateForks, GateExecs: e.GateExecs}, at)
	}
	return st.s, sc.Err()
}

// Armed reports whether a guard holds runDir now: its lock is taken.
// Nothing is sent to the guard.
func Armed(runDir string) bool {
	f, err := os.Open(filepath.Join(runDir, lockName))
	if err != nil {
		return false
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		return errors.Is(err, unix.EWOULDBLOCK)
	}
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return false
}
