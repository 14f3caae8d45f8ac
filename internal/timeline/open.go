package timeline

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// FallbackDirs take a timeline whose own location failed: /dev/shm is
// memory, so it takes one even when every disk is full.
var FallbackDirs = []string{os.TempDir(), "/dev/shm"}

// Voice is where a recorder's own troubles are said. A run carries on
// through every one of them: its record stays in memory and is saved
// elsewhere at the end.
type Voice struct {
	Progress func(Event)  // each event, as it is recorded
	Warn     func(string) // something went wrong and the run carries on
	Note     func(string) // something the operator should know
}

func (v Voice) warn(format string, a ...any) {
	if v.Warn != nil {
		v.Warn(fmt.Sprintf(format, a...))
	}
}

func (v Voice) note(format string, a ...any) {
	if v.Note != nil {
		v.Note(fmt.Sprintf(format, a...))
	}
}

// Open starts the recorder at path ("" for memory only). A location that
// cannot be written (read-only, full, missing permissions) does not stop
// the run: the events stay in memory and CloseOrSave saves them
// elsewhere.
func Open(path string, v Voice) *Recorder {
	rec, err := New(path, v.Progress)
	if err != nil {
		v.warn("cannot write the timeline: %v; carrying on: the record stays in memory and is saved elsewhere at the end", err)
	}
	rec.OnWriteError(func(err error) {
		v.warn("the timeline %s stopped taking events: %v; carrying on: the record stays in memory and is saved elsewhere at the end", path, err)
	})
	if rec.Path() != "" {
		v.note("timeline: %s", rec.Path())
	}
	return rec
}

// OpenDefault opens a new file, named for this run alone (prefix, a time
// and a number), in the caller's checked state directory (StateDir:
// /var/tmp/freeze for root, which survives a reboot). Where that
// directory is unsafe the record stays in memory and is saved elsewhere
// at the end.
func OpenDefault(prefix string, v Voice) *Recorder {
	dir, name := StateDir(), RunName(prefix)
	if err := CheckStateDir(dir); err != nil {
		v.warn("timeline: %v", err)
		v.note("this run records in memory and saves a copy in %s at the end", strings.Join(FallbackDirs, " or "))
		rec := Open("", v)
		rec.SaveAtEnd(name)
		return rec
	}
	return Open(filepath.Join(dir, name), v)
}

// CloseOrSave closes the recorder and, if it missed events, saves a
// whole copy in FallbackDirs.
func (r *Recorder) CloseOrSave(v Voice) {
	if err := r.Close(); err != nil {
		v.warn("%v", err)
	}
	if !r.Incomplete() {
		return
	}
	if p, err := r.SaveCopy(FallbackDirs...); err == nil {
		v.note("the timeline was saved instead to %s", p)
	} else {
		v.warn("the timeline could not be saved anywhere (%v); the lines above are the record", err)
	}
}

// KeepInStateDir saves a copy of a record kept in memory (a run that
// was not asked for one, but has something to report) in the caller's
// checked state directory, and says where; "" and why not, else.
func (r *Recorder) KeepInStateDir(prefix string) (string, error) {
	dir := StateDir()
	if err := CheckStateDir(dir); err != nil {
		return "", err
	}
	r.SaveAtEnd(RunName(prefix))
	return r.SaveCopy(dir)
}
