package main

import (
	"fmt"
	"io"

	"freeze/internal/match"
	"freeze/internal/timeline"
)

// All of freeze's words to the operator go through here: one voice on
// stderr, "freeze: " first, lower case, one message a line (a control
// character in a path is escaped, never printed).

type out struct {
	stdout, stderr io.Writer
}

func (o out) errorf(format string, a ...any) {
	fmt.Fprintf(o.stderr, "freeze: error: %s\n", match.OneLine(fmt.Sprintf(format, a...)))
}

func (o out) hintf(format string, a ...any) {
	fmt.Fprintf(o.stderr, "freeze: hint: %s\n", match.OneLine(fmt.Sprintf(format, a...)))
}

func (o out) warnf(format string, a ...any) {
	fmt.Fprintf(o.stderr, "freeze: warning: %s\n", match.OneLine(fmt.Sprintf(format, a...)))
}

func (o out) sayf(format string, a ...any) {
	fmt.Fprintf(o.stderr, "freeze: %s\n", match.OneLine(fmt.Sprintf(format, a...)))
}

// progress prints one event as a short timestamped line, with the runbook
// step it belongs to.
func (o out) progress(e timeline.Event) {
	if e.Msg == "" {
		return
	}
	stage := ""
	if e.Stage > 0 {
		stage = fmt.Sprintf("%d/4 %s: ", e.Stage, e.Stage)
	}
	fmt.Fprintf(o.stderr, "freeze: %s %s%s\n", e.Time.Format("15:04:05.000"), stage, match.OneLine(e.Msg))
}
