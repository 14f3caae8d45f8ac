package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"freeze/internal/drill"
	"freeze/internal/freeze"
	"freeze/internal/guard"
	"freeze/internal/incident"
	"freeze/internal/match"
	"freeze/internal/say"
	"freeze/internal/timeline"
	"freeze/runbooks"
)

const hiddenChain = drill.FixtureArg

func runChainFixture(args []string) int { return drill.RunFixture(args) }

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
	fmt.Fprint(o.Stdout, stepAnchor.ReplaceAllString(text, ""))
	return exitZero
}

var stepAnchor = regexp.MustCompile(`<a id="step-[0-9]+"></a>`)

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
	format, code := ff.Resolve(o)
	if code >= 0 {
		return code
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
	events, err := timeline.ReadFile(fl.Arg(0))
	if err != nil && len(events) == 0 {
		o.Errorf("timeline %s: %v", fl.Arg(0), err)
		return exitUsage
	}
	if err != nil {
		o.Warnf("timeline %s: %v; rendering the %d events before it", fl.Arg(0), err, len(events))
	}
	if err := timeline.Render(o.Stdout, events, format); err != nil {
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
	runs, err := timeline.LoadFleet(paths)
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
	if err := timeline.RenderFleet(o.Stdout, runs, format); err != nil {
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
`

type drillFlags struct {
	size          int
	shape, method string
	timeline      string
	timeout       time.Duration
	via, runDir   string
}

func runDrill(o out, args []string) int {
	f, m, code := parseDrillFlags(o, args)
	if code >= 0 {
		return code
	}
	o.Sayf("drill: a practice incident on a runaway chain of its own; nothing else on this machine is touched")
	rep, err := drill.Run(drill.Config{Size: f.size, Shape: f.shape, Method: m, Timeout: f.timeout, Via: f.via, RunDir: f.runDir,
		Timeline: f.timeline, Stderr: o.Stderr, Out: o.Incident()})
	if err != nil {
		o.Errorf("drill: %v", err)
	}
	if rep.StopErr != nil {
		o.Errorf("drill: the stop order did not reach zero: %v", rep.StopErr)
	}
	for _, l := range rep.Leftovers {
		o.Errorf("drill: left behind: %s", l)
	}
	if !rep.Passed {
		o.Hintf("read the timeline, and 'freeze runbook no-cgroup' if no cgroup could be used")
		return exitSurvivors
	}
	// One count, said as what it is: the chain grows while freeze starts,
	// so the run's match is larger than the set-up's count (the drill
	// said "holds 331", then "357 match", then "331 contained").
	held := fmt.Sprintf("the chain (%d when the stop order started) contained", rep.Reached)
	if m := rep.Outcome.Matched; m > 0 && m != rep.Reached {
		held = fmt.Sprintf("the chain (%d when the stop order started, %d when freeze held it) contained", rep.Reached, m)
	}
	if rep.Guard != nil {
		o.Sayf("drill passed: %s to zero in %s by the guard (through its %s); nothing left behind; the guard's timeline: %s", held, timeline.Dur(rep.Incident), f.via, rep.Guard.Timeline)
	} else {
		o.Sayf("drill passed: %s to zero in %s with --method %s; nothing left behind", held, timeline.Dur(rep.Incident), rep.Outcome.Group.Method())
	}
	o.Sayf("in an incident here: %s --path /abs/path/of/the/runaway (this machine would use --method %s)", say.Self(), rep.WouldUse)
	if rep.Timeline != "" {
		o.Sayf("timeline: %s (render it with: %s timeline %s)", rep.Timeline, say.Self(), match.ShellQuote(rep.Timeline))
	}
	return exitZero
}

// parseDrillFlags parses and checks the drill's flags; a code of -1 means
// go on.
func parseDrillFlags(o out, args []string) (drillFlags, freeze.Method, int) {
	var f drillFlags
	fl := pflag.NewFlagSet("freeze drill", pflag.ContinueOnError)
	fl.SetOutput(io.Discard)
	fl.IntVar(&f.size, "size", 300, "")
	fl.StringVar(&f.shape, "shape", "tree", "")
	fl.StringVarP(&f.method, "method", "m", "auto", "")
	fl.StringVarP(&f.timeline, "timeline", "t", "", "")
	fl.DurationVar(&f.timeout, "timeout", incident.Defaults.Timeout, "")
	fl.StringVar(&f.via, "guard", "", "")
	fl.StringVar(&f.runDir, "run-dir", guard.DefaultRunDir, "")
	help := fl.BoolP("help", "h", false, "")
	if err := fl.Parse(args); err != nil {
		flagError(o, "drill", "drill: ", err)
		o.Hintf("freeze drill [--size N] [--shape tree|line|churn] [--method M] [--timeline FILE]")
		return f, "", exitUsage
	}
	if *help {
		fmt.Fprint(o.Stdout, drillUsage)
		return f, "", exitZero
	}
	m, err := freeze.ParseMethod(f.method, false)
	switch {
	case f.shape != "tree" && f.shape != "line" && f.shape != "churn":
		o.Errorf("drill: unknown --shape %q", f.shape)
		o.Hintf("use tree (every process keeps forking), line (each hop hands off to the next) or churn (each starts two and exits)")
	case f.size < 1 || f.size > drill.MaxSize:
		o.Errorf("drill: --size %d: choose 1 to %d", f.size, drill.MaxSize)
	case f.timeout <= 0:
		o.Errorf("drill: --timeout %v: need a positive duration such as 60s", f.timeout)
		o.Hintf("it bounds the stop order; the default is %v", incident.Defaults.Timeout)
	case err != nil:
		o.Errorf("drill: unknown --method %q", f.method)
		o.Hintf("use auto, bpf, cgroup2, cgroup1 or sigstop")
	case f.via != "" && f.via != "fifo" && f.via != "socket":
		o.Errorf("drill: --guard %q: use fifo or socket", f.via)
		o.Hintf("start one first: freeze guard (or systemctl start freeze-guard)")
	default:
		return f, m, -1
	}
	return f, "", exitUsage
}

const drillUsage = `Usage:
    freeze drill [--size N] [--shape tree|line|churn] [options]

A fire drill: freeze starts a disposable runaway chain of its own (a copy
of itself in a temporary test cache, capped by a pids cgroup, or by
RLIMIT_NPROC when not root), runs the real stop order against it by exact
path, and checks that nothing is left. It also reports what this machine
supports, and which method an incident here would use.

Options:
        --size N             processes in the chain (default 300, at most 2000)
        --shape SHAPE        tree (default), line or churn
    -m, --method METHOD      auto (default), bpf, cgroup2, cgroup1 or sigstop
    -t, --timeline FILE      write the timeline here
        --timeout DURATION   give the stop order up after DURATION (default 60s)
        --guard fifo|socket  practise through a running 'freeze guard': ask
                             it through its FIFO (as 'echo ... > ask'
                             would) or its socket (as 'freeze --path'
                             does), instead of running the stop order here
        --run-dir DIR        the guard's directory (default /run/freeze)

Exit codes:
    0   the chain was contained to zero and nothing was left behind
    1   it was not, or something was left behind: see the errors
    2   usage
`

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
	revs, err := incident.Revoked(*path, os.Getuid())
	if err != nil {
		o.Errorf("restore: timeline %s: %v", *path, err)
		if errors.Is(err, timeline.ErrUntrusted) {
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
		if err := freeze.Restore(r); err != nil {
			o.Warnf("restore: left %s alone: %v", r.Path, err)
			code = exitSurvivors
			continue
		}
		o.Sayf("restore: %s is back to mode %#o", r.Path, r.Mode)
	}
	return code
}

const runbookUsage = `Usage:
    freeze runbook [NAME]
    freeze runbook --list

Prints a runbook, markdown, from the binary itself (no network, no
repository needed): by default the incident runbook, the steps an
operator follows while a chain eats the machine.

Options:
    -l, --list   the runbooks, one a line, with what each is for
`

const restoreUsage = `Usage:
    freeze restore --timeline FILE

Puts back the execute bits that a run with --revoke-exec removed, as its
timeline recorded them; the run printed this exact command. Only a
timeline owned by root (or you) and not writable by others is taken, and
a file that is no longer the one revoked (another inode, owner or mode)
is left alone and said.

Options:
    -t, --timeline FILE   the timeline of the run that revoked exec

Exit codes:
    0   every mode was put back (or the run revoked nothing)
    1   a file was left alone: see the warnings
    2   usage, or a timeline restore will not take
`
