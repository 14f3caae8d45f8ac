package guard

import (
	"fmt"
	"time"

	"freeze/internal/census"
	"freeze/internal/contain"
	"freeze/internal/metrics"
	"freeze/internal/proc"
	"freeze/internal/show"
)

// CensusEvery is how often the guard logs one census line: after an
// incident, the lines before it show what the process table looked like
// before the chain took over.
const CensusEvery = time.Minute

// Watcher takes a census every Every when the guard keeps a metrics file
// (else once a minute), writes the file, and logs one census line a
// minute.
type Watcher struct {
	G     *Guard
	File  string // the metrics file, "" for none
	Every time.Duration
	Say   func(string)
	// StateDir holds freeze run's state files (in its runs directory):
	// Reap ends the runs whose freeze is gone. "" reaps nothing.
	StateDir   string
	poke       chan struct{} // a request ended
	lastLog    time.Time
	failed     bool
	reapFailed bool
	unreapable map[string]bool // runs Reap could not end, said once
}

// Poke asks for a census now: a request ended, and the metrics say what
// it came to.
func (w *Watcher) Poke() {
	select {
	case w.poke <- struct{}{}:
	default:
	}
}

// Run writes until stop is closed.
func (w *Watcher) Run(stop <-chan struct{}) {
	every := CensusEvery
	if w.File != "" {
		every = w.Every
	}
	loop(every, stop, w.poke, func(poked bool) {
		switch {
		case !poked:
			w.Reap()
		case w.File == "":
			return // a request ended: only the metrics file wants a census now
		}
		w.Write(true)
	})
}

// Write takes a census, logs it if a minute has passed since the last
// line, and writes the metrics file, if any, with armed as given.
func (w *Watcher) Write(armed bool) error {
	sample := time.Second
	if !armed {
		sample = time.Millisecond // stopping: do not hold the stop up
	}
	r, err := census.Take(proc.Default, sample, 10)
	if err != nil {
		return err
	}
	if armed && time.Since(w.lastLog) >= CensusEvery {
		w.lastLog = time.Now()
		w.logCensus(r)
	}
	if w.File == "" {
		return nil
	}
	st := w.G.Stats()
	st.Armed = armed
	err = metrics.WriteFile(w.File, r, st.Metrics())
	// Said once when it starts failing and once when it works again, not
	// every 15 seconds.
	if (err != nil) != w.failed {
		w.failed = err != nil
		if err != nil {
			w.Say(fmt.Sprintf("warning: metrics file %s: %v", w.File, err))
		} else {
			w.Say("metrics file " + w.File + " is written again")
		}
	}
	return err
}

func (w *Watcher) logCensus(r *census.Report) {
	l := &CensusLine{Processes: r.Total, Load: r.Load, PidSpace: r.PidLine}
	for _, row := range r.Rows[:min(5, len(r.Rows))] {
		l.Top = append(l.Top, CensusRow{Exe: row.Exe, Count: row.Count, Orphaned: row.Orphaned, Appeared: row.Appeared, Vanished: row.Vanished, Suspect: row.Suspect})
	}
	w.G.Record("census", l)
}

// NewWatcher is a watcher of g's; file "" keeps no metrics file. It
// reaps the freeze runs whose state files are in stateDir.
func NewWatcher(g *Guard, file string, every time.Duration, stateDir string, say func(string)) *Watcher {
	return &Watcher{G: g, File: file, Every: every, StateDir: stateDir, Say: say, poke: make(chan struct{}, 1), unreapable: map[string]bool{}}
}

// Metrics is what a guard's stats add to the metrics.
func (s Stats) Metrics() *metrics.Guard {
	return &metrics.Guard{Armed: s.Armed, Runs: s.Runs, LastRun: s.LastRun,
		LastZero: time.Duration(s.LastZeroMS * float64(time.Millisecond)), ForksRefused: s.GateForks, ExecsRefused: s.GateExecs,
		AutoDeclined: s.AutoDeclined, WouldHold: s.WouldHold, AutoDisarmed: s.AutoDisarmed}
}

// Reap ends the groups of freeze runs whose freeze is gone (killed by
// SIGKILL or the OOM killer), as 'freeze run --reap' would, from the
// state files in StateDir/runs. It runs when the guard arms and with
// every census. A run it cannot end is said once, not every minute.
func (w *Watcher) Reap() {
	if w.StateDir == "" {
		return
	}
	reaped, err := contain.Reap(w.StateDir)
	if err != nil {
		if !w.reapFailed {
			w.Say(fmt.Sprintf("warning: cannot reap freeze runs whose freeze is gone: %v", err))
		}
		w.reapFailed = true
		return
	}
	w.reapFailed = false
	for _, r := range reaped {
		l := &ReapedLine{Run: r.Name, Command: r.Command, Left: r.Left, Gone: r.Gone}
		switch {
		case r.Gone:
			// An outer run ended it: its state file is all that was left.
		case r.Err != nil:
			if w.unreapable[r.Name] {
				continue
			}
			w.unreapable[r.Name] = true
			l.Error = r.Err.Error()
			w.Say(fmt.Sprintf("warning: run %s, whose freeze is gone, was not ended: %v", r.Name, r.Err))
		default:
			w.Say(fmt.Sprintf("reaped %s (%s): its freeze is gone; %d process(es) it left, killed; its groups removed", r.Name, show.ShellJoin(r.Command), r.Left))
		}
		w.G.Record("reaped", l)
	}
}
