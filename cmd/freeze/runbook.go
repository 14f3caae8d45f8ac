package main

import (
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"

	"github.com/spf13/pflag"

	"freeze/runbooks"
)

func runRunbook(o out, args []string) int {
	fl := pflag.NewFlagSet("freeze runbook", pflag.ContinueOnError)
	fl.SetOutput(io.Discard)
	list := fl.BoolP("list", "l", false, "")
	help := fl.BoolP("help", "h", false, "")
	if err := fl.Parse(args); err != nil {
		o.Errorf("runbook: %v", err)
		o.Hintf("freeze runbook [NAME | --list]")
		return exitUsage
	}
	if *help {
		fmt.Fprint(o.Stdout, runbookUsage)
		return exitZero
	}
	if *list {
		for _, r := range runbooks.List() {
			fmt.Fprintf(o.Stdout, "%-12s %s\n", r[0], r[1])
		}
		return exitZero
	}
	name := runbooks.Default
	if fl.NArg() > 1 {
		o.Errorf("runbook: one name at a time")
		return exitUsage
	}
	if fl.NArg() == 1 {
		name = fl.Arg(0)
	}
	text, ok := runbooks.Get(name)
	if !ok {
		var names []string
		for _, r := range runbooks.List() {
			names = append(names, r[0])
		}
		o.Errorf("no runbook called %q", name)
		o.Hintf("the runbooks are: %s", strings.Join(names, ", "))
		return exitUsage
	}
	// The steps' anchors (<a id="step-N"></a>, what the alerts'
	// runbook_url points at) are for a renderer, not for a terminal.
	fmt.Fprint(o.Stdout, stepAnchor().ReplaceAllString(text, ""))
	return exitZero
}

var stepAnchor = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`<a id="step-[0-9]+"></a>`) })

const runbookUsage = `Usage:
    freeze runbook [NAME]
    freeze runbook --list

Prints a runbook, markdown, from the binary itself (no network, no
repository needed): by default the incident runbook, the steps an
operator follows while a chain eats the machine.

Options:
    -l, --list   the runbooks, one a line, with what each is for
    -h, --help   this text
`
