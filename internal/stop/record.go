package stop

import (
	"os"
	"path/filepath"
	"strings"

	"freeze/internal/freeze"
	"freeze/internal/timeline"
)

// FallbackDirs take a timeline whose own location failed: /dev/shm is
// memory, so it takes one even when every disk is full.
var FallbackDirs = []string{os.TempDir(), "/dev/shm"}

// DefaultTimeline opens a new file, named for this run alone (prefix, a
// time and a number), in the caller's checked state directory
// (timeline.StateDir: /var/tmp/freeze for root, which survives a
// reboot). Where that directory is unsafe the record stays in memory and
// is saved elsewhere at the end.
func DefaultTimeline(prefix string, o Output) *timeline.Recorder {
	dir, name := timeline.StateDir(), timeline.RunName(prefix)
	if err := timeline.CheckStateDir(dir); err != nil {
		o.warn("timeline: %v", err)
		o.note("this run records in memory and saves a copy in %s at the end", strings.Join(FallbackDirs, " or "))
		rec := OpenTimeline("", o)
		rec.SaveAtEnd(name)
		return rec
	}
	return OpenTimeline(filepath.Join(dir, name), o)
}

// OpenTimeline starts the recorder at path ("" for memory only). A
// location that cannot be written (read-only, full, missing permissions)
// does not stop the run: the events stay in memory and CloseTimeline
// saves them elsewhere.
func OpenTimeline(path string, o Output) *timeline.Recorder {
	rec, err := timeline.New(path, o.Progress)
	if err != nil {
		o.warn("cannot write the timeline: %v; carrying on: the record stays in memory and is saved elsewhere at the end", err)
	}
	rec.OnWriteError(func(err error) {
		o.warn("the timeline %s stopped taking events: %v; carrying on: the record stays in memory and is saved elsewhere at the end", path, err)
	})
	if rec.Path() != "" {
		o.note("timeline: %s", rec.Path())
	}
	return rec
}

// CloseTimeline closes the recorder and, if it missed events, saves a
// whole copy in FallbackDirs.
func CloseTimeline(rec *timeline.Recorder, o Output) {
	if err := rec.Close(); err != nil {
		o.warn("%v", err)
	}
	if !rec.Incomplete() {
		return
	}
	if p, err := rec.SaveCopy(FallbackDirs...); err == nil {
		o.note("the timeline was saved instead to %s", p)
	} else {
		o.warn("the timeline could not be saved anywhere (%v); the lines above are the record", err)
	}
}

// Revoked reads what a run's timeline says it revoked, for 'freeze
// restore': only a timeline that root or uid wrote, read whole, with
// every line parsed (timeline.ReadTrusted), since restore chmods what it
// names.
func Revoked(path string, uid int) ([]freeze.Revocation, error) {
	events, err := timeline.ReadTrusted(path, uid)
	if err != nil {
		return nil, err
	}
	return Revocations(events)
}
