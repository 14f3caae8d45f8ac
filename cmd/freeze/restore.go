package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"

	"freeze/internal/stop"
)

func runRestore(o out, args []string) int {
	fl := pflag.NewFlagSet("freeze restore", pflag.ContinueOnError)
	fl.SetOutput(io.Discard)
	path := fl.StringP("timeline", "t", "", "")
	help := fl.BoolP("help", "h", false, "")
	err := fl.Parse(args)
	if err == nil && *help {
		fmt.Fprint(o.Stdout, restoreUsage)
		return exitZero
	}
	if err != nil || *path == "" || fl.NArg() > 0 {
		if err != nil {
			o.Errorf("restore: %v", err)
		} else {
			o.Errorf("restore: name the timeline of the run that revoked exec")
		}
		o.Hintf("freeze restore --timeline FILE (the run printed the exact command)")
		return exitUsage
	}
	revs, err := stop.Revoked(*path, os.Getuid())
	if err != nil {
		o.Errorf("restore: timeline %s: %v", *path, err)
		if errors.Is(err, stop.ErrUntrusted) {
			o.Hintf("restore takes only a timeline owned by root (or you), not writable by others: the one the run printed")
		}
		return exitUsage
	}
	if len(revs) == 0 {
		o.Sayf("restore: the run in %s revoked nothing; nothing to restore", *path)
		return exitZero
	}
	code := exitZero
	for _, r := range revs {
		if err := stop.Restore(r); err != nil {
			o.Warnf("restore: left %s alone: %v", r.Path, err)
			code = exitSurvivors
			continue
		}
		o.Sayf("restore: %s is back to mode %#o", r.Path, r.Mode)
	}
	return code
}

const restoreUsage = `Usage:
    freeze restore --timeline FILE

Puts back the execute bits that a run with --revoke-exec removed, as its
timeline recorded them; the run printed this exact command. Only a
timeline owned by root (or you) and not writable by others is taken, and
a file that is no longer the one revoked (another inode, owner or mode)
is left alone and said.

Options:
    -t, --timeline FILE   the timeline of the run that revoked exec
    -h, --help            this text

Exit codes:
    0   every mode was put back (or the run revoked nothing)
    1   a file was left alone: see the warnings
    2   usage, or a timeline restore will not take
`
