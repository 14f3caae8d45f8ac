package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"freeze/internal/drill"
	"freeze/internal/guard"
	"freeze/internal/order"
	"freeze/internal/say"
	"freeze/internal/show"
	"freeze/internal/stop"
)

const hiddenChain = drill.FixtureArg

func runChainFixture(args []string) int { return drill.RunFixture(args) }

type drillFlags struct {
	size          int
	shape, method string
	timeline      string
	timeout       time.Duration
	via, runDir   string
}

// askGuard is how a drill handed to the guard (--guard) asks it: through
// its FIFO, as 'echo ... > ask' would, or its socket, as 'freeze --path'
// does (the guard's words go to the asker's stderr).
func askGuard(o out, f drillFlags) func([]string, func(string)) (drill.Answer, error) {
	return func(words []string, say func(string)) (drill.Answer, error) {
		if f.via == "fifo" {
			say(fmt.Sprintf("drill: asking the guard at %s through its FIFO: echo %s > %s", f.runDir, show.Shell(strings.Join(words, " ")), filepath.Join(f.runDir, guard.AskName)))
			rep, err := guard.AskFIFO(f.runDir, words, f.timeout+30*time.Second)
			return drill.Answer{Exit: rep.Code(), Outcome: rep.Outcome, Timeline: rep.Timeline}, err
		}
		say(fmt.Sprintf("drill: handing the stop order to the guard at %s over its socket, as 'freeze --path' does", f.runDir))
		code, err := guard.Ask(f.runDir, words, o.Stderr, o.Stderr)
		return drill.Answer{Exit: code}, err
	}
}

func runDrill(ctx context.Context, o out, args []string) int {
	f, m, code := parseDrillFlags(o, args)
	if code >= 0 {
		return code
	}
	o.Sayf("drill: a practice incident on a runaway chain of its own; nothing else on this machine is touched")
	rep, err := drill.Run(ctx, drill.Config{Size: f.size, Shape: f.shape, Method: m, Timeout: f.timeout, Via: f.via, Ask: askGuard(o, f),
		Timeline: f.timeline, Out: order.Output(o)})
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
		o.Sayf("drill passed: %s to zero in %s by the guard (through its %s); nothing left behind; the guard's timeline: %s", held, show.Dur(rep.Incident), f.via, rep.Guard.Timeline)
	} else {
		o.Sayf("drill passed: %s to zero in %s with --method %s; nothing left behind", held, show.Dur(rep.Incident), rep.Outcome.Group.Method())
	}
	o.Sayf("in an incident here: %s --path /abs/path/of/the/runaway (this machine would use --method %s)", say.Self(), rep.WouldUse)
	if rep.Timeline != "" {
		o.Sayf("timeline: %s (render it with: %s timeline %s)", rep.Timeline, say.Self(), show.Shell(rep.Timeline))
	}
	return exitZero
}

// parseDrillFlags parses and checks the drill's flags; a code of -1 means
// go on.
func parseDrillFlags(o out, args []string) (drillFlags, drill.Method, int) {
	var f drillFlags
	fl := pflag.NewFlagSet("freeze drill", pflag.ContinueOnError)
	fl.SetOutput(io.Discard)
	fl.IntVar(&f.size, "size", 300, "")
	fl.StringVar(&f.shape, "shape", "tree", "")
	fl.StringVarP(&f.method, "method", "m", "auto", "")
	fl.StringVarP(&f.timeline, "timeline", "t", "", "")
	fl.DurationVar(&f.timeout, "timeout", stop.Defaults.Timeout, "")
	fl.StringVar(&f.via, "guard", "", "")
	fl.StringVar(&f.runDir, "run-dir", order.RunDir(), "")
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
	m, err := drill.ParseMethod(f.method)
	switch {
	case f.shape != "tree" && f.shape != "line" && f.shape != "churn":
		o.Errorf("drill: unknown --shape %q", f.shape)
		o.Hintf("use tree (every process keeps forking), line (each hop hands off to the next) or churn (each starts two and exits)")
	case f.size < 1 || f.size > drill.MaxSize:
		o.Errorf("drill: --size %d: choose 1 to %d", f.size, drill.MaxSize)
	case f.timeout <= 0:
		o.Errorf("drill: --timeout %v: need a positive duration such as 60s", f.timeout)
		o.Hintf("it bounds the stop order; the default is %v", stop.Defaults.Timeout)
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
        --run-dir DIR        the guard's directory (default /run/freeze,
                             or $FREEZE_RUN_DIR)
    -h, --help               this text

Exit codes:
    0   the chain was contained to zero and nothing was left behind
    1   it was not, or something was left behind: see the errors
    2   usage
`
