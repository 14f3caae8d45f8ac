package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"

	"freeze/internal/postmortem"
	"freeze/internal/say"
)

func runTimeline(o out, args []string) int {
	fl := pflag.NewFlagSet("freeze timeline", pflag.ContinueOnError)
	fl.SetOutput(io.Discard)
	ff := say.AddFormat(fl, "timeline: ", "markdown", "text", "svg", "json", "jsonl")
	fleet := fl.StringArray("fleet", nil, "")
	help := fl.BoolP("help", "h", false, "")
	if err := fl.Parse(args); err != nil {
		o.Errorf("timeline: %v", err)
		o.Hintf("freeze timeline FILE [--format markdown|text|svg|json|jsonl], or freeze timeline --fleet DIR")
		return exitUsage
	}
	if *help {
		fmt.Fprint(o.Stdout, timelineUsage)
		return exitZero
	}
	format, ok := ff.Resolve(o)
	if !ok {
		return exitUsage
	}
	if len(*fleet) > 0 || fl.NArg() > 1 {
		return runFleet(o, append(*fleet, fl.Args()...), format)
	}
	if fl.NArg() != 1 {
		o.Errorf("timeline: name one timeline file, or a directory with --fleet")
		o.Hintf("freeze timeline FILE [--format markdown|text|svg|json|jsonl]; freeze prints the path at the start and end of a run")
		return exitUsage
	}
	if st, err := os.Stat(fl.Arg(0)); err == nil && st.IsDir() {
		return runFleet(o, fl.Args(), format)
	}
	events, err := postmortem.ReadFile(fl.Arg(0))
	if err != nil && len(events) == 0 {
		o.Errorf("timeline %s: %v", fl.Arg(0), err)
		return exitUsage
	}
	if err != nil {
		o.Warnf("timeline %s: %v; rendering the %d events before it", fl.Arg(0), err, len(events))
	}
	if err := postmortem.Render(o.Stdout, events, format); err != nil {
		o.Errorf("timeline: %v", err)
		return exitUsage
	}
	return exitZero
}

// runFleet renders the fleet postmortem of the timelines in paths (files,
// or directories holding one subdirectory per host).
func runFleet(o out, paths []string, format string) int {
	switch format {
	case "markdown", "json":
	default:
		o.Errorf("timeline: --format %q is not one a fleet postmortem takes", format)
		o.Hintf("use markdown (the default) or json")
		return exitUsage
	}
	runs, err := postmortem.LoadFleet(paths)
	if err != nil {
		o.Errorf("timeline: %v", err)
		o.Hintf("name the directory the timelines were collected into, for example: freeze timeline --fleet ./freeze-incident")
		return exitUsage
	}
	for _, r := range runs {
		if r.Error != "" {
			o.Warnf("timeline %s: %s", r.File, r.Error)
		}
	}
	if err := postmortem.RenderFleet(o.Stdout, runs, format); err != nil {
		o.Errorf("timeline: %v", err)
		return exitUsage
	}
	// A fleet with hosts that need an operator is not a success: a
	// script that renders the postmortem can act on it.
	for _, r := range runs {
		if r.Attention != "" {
			return exitSurvivors
		}
	}
	return exitZero
}

const timelineUsage = `Usage:
    freeze timeline FILE [--format markdown|text|svg|json|jsonl]
    freeze timeline --fleet DIR [--format markdown|json]
    freeze timeline FILE FILE... [--format markdown|json]

Renders a run's timeline as a section for the postmortem. Freeze prints
the timeline's path at the start and at the end of every run. The
section holds a picture of the chain over the run (a mermaid chart and
text bars); --format svg writes that picture alone, as a file to attach:
    freeze timeline FILE --format svg > chain.svg

With --fleet (or several files), it renders one fleet postmortem: a
table with one row per host (outcome, method, matched, time to zero,
survivors, exit code), the hosts that need attention, then each host's
steps. DIR holds one subdirectory per host with that host's timelines,
as the Ansible playbook collects them (./freeze-incident/HOST/*.jsonl);
a host is named after its subdirectory, else after the hostname its
timeline recorded. A fleet postmortem exits 1 when any host needs
attention, 0 when none does.

Options:
    -f, --format FORMAT   markdown (default), text or svg (one file only), or json;
                          jsonl (one file): the file itself, checked, line by
                          line: how to fetch it through a command that is
                          freeze alone (kubectl exec into the DaemonSet's
                          image, which has no cat or tar)
        --json            the same as --format json
        --fleet DIR       a directory of collected timelines; repeatable
    -h, --help            this text
`
