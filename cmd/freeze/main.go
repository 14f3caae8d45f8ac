// Command freeze stops a runaway process chain in the order that works:
// match it by exact executable, freeze its growth, kill the fixed set in
// rounds until none remain, and record every step with timestamps.
//
// See 'freeze --help' for usage and exit codes, and 'freeze runbook' for
// what to do in an stop.
package main

import (
	"os"

	// Before any other package's init: see the package comment. Linked
	// by this command alone: a test binary of a package that imports
	// stop is not lifted at its start.
	"freeze/internal/priority/early"
	"freeze/internal/stop"
)

func main() {
	stop.Lift = early.Report
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
