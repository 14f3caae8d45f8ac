// Package exporter is the guard's census exporter: at each tick of the
// guard's loop it takes a census of the machine, hands the guard one
// census line a minute for its log, and writes node_exporter's textfile
// (the census's rows and the guard's own metrics) when one is kept.
package exporter

import (
	"fmt"
	"time"

	"freeze/internal/census"
	"freeze/internal/metrics"
)

// LogEvery is how often the guard logs one census line: after an
// incident, the lines before it show what the process table looked like
// before the chain took over.
const LogEvery = time.Minute

// Exporter writes the census. Its zero value logs nothing and keeps no
// file; the guard fills in what it composes.
type Exporter struct {
	File  string                 // node_exporter's textfile, "" for none
	Every time.Duration          // how often with a file (else LogEvery)
	Say   func(string)           // the guard's voice: the file's failures, once
	Guard func() *metrics.Guard  // the guard's own metrics, read at each write
	Log   func(r *census.Report) // the guard's census line, once a minute

	lastLog time.Time
	failed  bool
}

// Tick is how often the guard's loop should call Write.
func (e *Exporter) Tick() time.Duration {
	if e.File != "" {
		return e.Every
	}
	return LogEvery
}

// Write takes a census, logs it if a minute has passed since the last
// line, and writes the metrics file, if any, with armed as given.
func (e *Exporter) Write(armed bool) error {
	sample := time.Second
	if !armed {
		sample = time.Millisecond // stopping: do not hold the stop up
	}
	r, err := census.Here(sample, 10)
	if err != nil {
		return err
	}
	if armed && e.Log != nil && time.Since(e.lastLog) >= LogEvery {
		e.lastLog = time.Now()
		e.Log(r)
	}
	if e.File == "" {
		return nil
	}
	g := &metrics.Guard{}
	if e.Guard != nil {
		g = e.Guard()
	}
	g.Armed = armed
	err = metrics.WriteFile(e.File, r, g)
	// Said once when it starts failing and once when it works again, not
	// every 15 seconds.
	if (err != nil) != e.failed {
		e.failed = err != nil
		switch {
		case e.Say == nil:
		case err != nil:
			e.Say(fmt.Sprintf("warning: metrics file %s: %v", e.File, err))
		default:
			e.Say("metrics file " + e.File + " is written again")
		}
	}
	return err
}
