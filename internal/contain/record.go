package contain

import (
	"context"

	"freeze/internal/timeline"
)

// Recorded runs c with a record of its own: in the file at path when
// one is asked for, else in memory, kept in the caller's checked state
// directory when the run has something to report (a leftover, the cap,
// the timeout: an exit that is not the command's own). Under go test
// -exec, a file per clean test binary would pile up. warn says what
// went wrong with the record (the run carries on); tl is where the
// record is, "" when it stayed in memory. An error means the command
// was not run.
func Recorded(ctx context.Context, c Config, path string, warn func(string)) (rep Report, tl string, err error) {
	v := timeline.Voice{Warn: warn}
	rec, _ := timeline.New("", nil)
	if path != "" {
		rec = timeline.Open(path, v)
	}
	c.Rec = rec
	rep, err = Run(ctx, c)
	if err != nil {
		rec.Close()
		return rep, "", err
	}
	rec.CloseOrSave(v)
	if rec.Path() == "" && rep.Exit != rep.Status {
		if _, err := rec.KeepInStateDir("run"); err != nil && warn != nil {
			warn("run: the timeline is not kept: " + err.Error())
		}
	}
	return rep, rec.Path(), nil
}
