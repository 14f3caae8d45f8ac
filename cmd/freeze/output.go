package main

import (
	"freeze/internal/say"
	"freeze/internal/stop"
)

// out is where a command's words go: one voice, package say's.
type out = say.Out

// Exit codes, as documented in the usage text and the README: a run's
// is its stop.Report's Code, and these name the same codes for the
// commands' own words.
const (
	exitZero        = stop.ExitZero
	exitSurvivors   = stop.ExitSurvivors
	exitUsage       = stop.ExitUsage
	exitRefused     = stop.ExitRefused
	exitInterrupted = stop.ExitInterrupted
)

// flagError says a flag parse error of cmd ("" for freeze itself), with
// the hints its options allow.
func flagError(o out, cmd, prefix string, err error) {
	o.FlagError(prefix, err, flagsOf(cmd))
}
