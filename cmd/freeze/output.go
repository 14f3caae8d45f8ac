package main

import (
	"freeze/internal/say"
	"freeze/internal/timeline"
)

// out is where a command's words go: one voice, package say's.
type out = say.Out

// Exit codes, as documented in the usage text and the README: the table
// is timeline.ExitCode, which names each outcome's code.
const (
	exitZero        = timeline.ExitZero
	exitSurvivors   = timeline.ExitSurvivors
	exitUsage       = timeline.ExitUsage
	exitRefused     = timeline.ExitRefused
	exitInterrupted = timeline.ExitInterrupted
)

// flagError says a flag parse error of cmd ("" for freeze itself), with
// the hints its options allow.
func flagError(o out, cmd, prefix string, err error) {
	o.FlagError(prefix, err, flagsOf(cmd))
}
