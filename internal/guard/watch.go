package guard

import (
	"time"

	"freeze/internal/census"
	"freeze/internal/contain"
	"freeze/internal/exporter"
	"freeze/internal/metrics"
)

// Watcher is the guard's own loop beside its requests: at each tick
// freeze run's reaper (a hook contain provides) and the census exporter,
// and the exporter again as soon as a request ends, when it keeps a
// metrics file.
type Watcher struct {
	*exporter.Exporter
	Reaper *contain.Reaper
	poke   chan struct{} // a request ended
}

// NewWatcher is a watcher of g's; file "" keeps no metrics file. It
// reaps the freeze runs whose state files are in stateDir.
func NewWatcher(g *Guard, file string, every time.Duration, stateDir string, say func(string)) *Watcher {
	return &Watcher{
		Exporter: &exporter.Exporter{File: file, Every: every, Say: say,
			Guard: func() *metrics.Guard { return g.Stats().Metrics() },
			Log:   g.logCensus},
		Reaper: &contain.Reaper{StateDir: stateDir, Say: say, Log: func(r contain.Reaped) {
			l := &ReapedLine{Run: r.Name, Command: r.Command, Left: r.Left, Gone: r.Gone}
			if r.Err != nil {
				l.Error = r.Err.Error()
			}
			g.Record("reaped", l)
		}},
		poke: make(chan struct{}, 1),
	}
}

// Poke asks for a census now: a request ended, and the metrics say what
// it came to.
func (w *Watcher) Poke() {
	select {
	case w.poke <- struct{}{}:
	default:
	}
}

// Run reaps and writes until stop is closed.
func (w *Watcher) Run(stop <-chan struct{}) {
	loop(w.Tick(), stop, w.poke, func(poked bool) {
		switch {
		case !poked:
			w.Reaper.Tick()
		case w.File == "":
			return // a request ended: only the metrics file wants a census now
		}
		w.Write(true)
	})
}

func (g *Guard) logCensus(r *census.Report) {
	l := &CensusLine{Processes: r.Total, Load: r.Load, PidSpace: r.PidLine}
	for _, row := range r.Rows[:min(5, len(r.Rows))] {
		l.Top = append(l.Top, CensusRow{Exe: row.Exe, Count: row.Count, Orphaned: row.Orphaned, Appeared: row.Appeared, Vanished: row.Vanished, Suspect: row.Suspect})
	}
	g.Record("census", l)
}

// Metrics is what a guard's stats add to the metrics.
func (s Stats) Metrics() *metrics.Guard {
	return &metrics.Guard{Armed: s.Armed, Runs: s.Runs, LastRun: s.LastRun,
		LastZero: time.Duration(s.LastZeroMS * float64(time.Millisecond)), ForksRefused: s.GateForks, ExecsRefused: s.GateExecs,
		AutoDeclined: s.AutoDeclined, WouldHold: s.WouldHold, AutoDisarmed: s.AutoDisarmed}
}
