package stop

import (
	"freeze/internal/freeze"
	"freeze/internal/timeline"
)

// OpenTimeline starts the recorder at path ("" for memory only), saying
// its troubles to o (timeline.Open).
func OpenTimeline(path string, o Output) *timeline.Recorder { return timeline.Open(path, o.voice()) }

// DefaultTimeline opens a new file named for this run in the caller's
// checked state directory (timeline.OpenDefault).
func DefaultTimeline(prefix string, o Output) *timeline.Recorder {
	return timeline.OpenDefault(prefix, o.voice())
}

// CloseTimeline closes the recorder and, if it missed events, saves a
// whole copy elsewhere (timeline.CloseOrSave).
func CloseTimeline(rec *timeline.Recorder, o Output) { rec.CloseOrSave(o.voice()) }

func (o Output) voice() timeline.Voice {
	return timeline.Voice{Progress: o.Progress, Warn: o.Warn, Note: o.Note}
}

// ErrUntrusted is the error Revoked wraps for a timeline that restore
// will not act on as root (timeline.ErrUntrusted).
var ErrUntrusted = timeline.ErrUntrusted

// Restore puts back the execute bits of one revocation Revoked read, if
// the file is still the one revoked (freeze.Restore).
func Restore(r freeze.Revocation) error { return freeze.Restore(r) }

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
