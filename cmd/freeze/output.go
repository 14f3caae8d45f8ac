package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/pflag"

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

// flagError says a flag parse error, with a hint where the mistake is a
// common one: a duration without its unit (--timeout 5).
func (o out) flagError(prefix string, err error) {
	o.errorf("%s%v", prefix, err)
	flagHint(o, strings.TrimSuffix(prefix, ": "), err)
	if strings.Contains(err.Error(), "missing unit in duration") {
		o.hintf("a duration needs its unit: 5s, 2m, 500ms")
	}
}

// formatFlag is the one output flag every command that prints a report
// takes: --format (-f) with the command's formats, the first its
// default, and --json as the alias of --format json.
type formatFlag struct {
	cmd     string // "census: ", or "" for freeze itself
	value   string
	json    bool
	allowed []string
}

func addFormat(fl *pflag.FlagSet, cmd string, allowed ...string) *formatFlag {
	f := &formatFlag{cmd: cmd, allowed: allowed}
	fl.StringVarP(&f.value, "format", "f", allowed[0], "")
	fl.BoolVar(&f.json, "json", false, "")
	return f
}

// resolve checks the flag after parsing: the format it names, or
// exitUsage after saying what is wrong.
func (f *formatFlag) resolve(o out) (string, int) {
	if f.json {
		if f.value != f.allowed[0] && f.value != "json" {
			o.errorf("%s--json and --format %s ask for two formats", f.cmd, f.value)
			o.hintf("--json is --format json: keep one of them")
			return "", exitUsage
		}
		f.value = "json"
	}
	if !slices.Contains(f.allowed, f.value) {
		o.errorf("%sunknown --format %q", f.cmd, f.value)
		o.hintf("use %s", strings.Join(f.allowed, ", "))
		return "", exitUsage
	}
	return f.value, -1
}
