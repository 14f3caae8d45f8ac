package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"freeze/internal/contain"
	"freeze/internal/say"
	"freeze/internal/show"
)

type runFlags struct {
	maxProcs       int
	timeout, delay time.Duration
	killAfter      time.Duration
	report         string
	junit          string
	leaks          string // fail (default) or warn
	jsonOut        bool
	allowLeftovers bool
	reap           bool
	timeline       string
	stateDir       string
	nodeTestNames  bool
}

// runRun is 'freeze run': parse, run the command contained, say what
// was left, and exit with the command's status or one of run's codes.
func runRun(ctx context.Context, o out, args []string) int {
	f, command, code := parseRunFlags(o, args)
	if code >= 0 {
		return code
	}
	if f.reap {
		return runReap(o, f.stateDir)
	}
	self, err := os.Executable()
	if err != nil {
		o.Errorf("run: cannot find freeze's own executable: %v", err)
		return exitRefused
	}
	rep, tl, err := contain.Recorded(ctx, contain.Config{Command: command, MaxProcs: f.maxProcs, Timeout: f.timeout, KillAfter: f.killAfter, WaitDelay: f.delay,
		Self: self, StateDir: f.stateDir, KeepEscaped: f.allowLeftovers, FailLeftovers: f.leaks == "fail" && !f.allowLeftovers,
		NodeTestNames: f.nodeTestNames},
		f.timeline, func(s string) { o.Warnf("%s", s) })
	if err != nil {
		o.Errorf("run: %v; the command was not run", err)
		return exitRefused
	}
	if !f.jsonOut {
		// With --json the report is the JSON alone: a reader pipes
		// stderr to jq, which a line of words before it broke (#52).
		sayRun(o, rep, tl, f.delay)
	}
	writeRunReports(o, f, rep, command, tl)
	return rep.Exit
}

// sayRun says, in freeze's voice, what held and what was left.
func sayRun(o out, rep contain.Report, tl string, delay time.Duration) {
	if rep.Cap == contain.CapRlimit {
		o.Warnf("run: %s", rep.CapWhy)
	}
	for i, l := range rep.Leftovers {
		if i == 20 {
			o.Sayf("run:   ... and %d more", len(rep.Leftovers)-20)
			break
		}
		o.Sayf("run: %s", l)
	}
	if rep.CapHit() {
		o.Sayf("run: the cap fired: %d fork(s) refused at pids.max=%d (peak %d tasks)", rep.Refused, rep.Max, rep.Peak)
		if len(rep.AtCap) > 0 {
			o.Sayf("run: when it first fired, the group held: %s", show.Term(strings.Join(rep.AtCap, ", ")))
		} else if rep.AtCapMissed != "" {
			o.Sayf("run: what the group held when it first fired is not known: %s", rep.AtCapMissed)
		}
	}
	if len(rep.Leftovers) > 0 && rep.LineageOff != "" {
		o.Sayf("run: the leftovers are named without who started them: %s", rep.LineageOff)
	}
	status := "nothing outlived it"
	if n := len(rep.Leftovers); n > 0 {
		status = fmt.Sprintf("%d process(es) outlived it and were killed", n)
	}
	o.Sayf("run: %s in %s; %s; the group is empty (zero confirmed)", rep.ExitWords(), show.Dur(rep.Took), status)
	if len(rep.Leftovers) > 0 && delay >= slowDelay {
		// #52: on a suite that leaks, this wait was most of freeze's
		// overhead (pytest: 2.0 s a run, 1.02 s with 100ms), and
		// nothing said so.
		o.Sayf("run: of that, up to %s was --wait-delay, the leftovers' time to exit before they were killed: on a suite that leaves processes each run, it is most of freeze's cost (--wait-delay 100ms shortens it)", show.Dur(delay))
	}
	if !rep.Zero {
		o.Errorf("run: %s", rep.Why)
		o.Hintf("see 'freeze census'; the groups are named in %s", tl)
	}
	if rep.Exit != rep.Status && tl != "" {
		o.Sayf("run: exit %d: %s; timeline: %s", rep.Exit, rep.Why, tl)
	}
}

// writeRunReports writes what the flags ask for: the JSON report (on
// stderr: stdout is the command's, and a report mixed into it would
// corrupt what a pipeline reads), --report, --junit, and GitHub's
// annotations.
func writeRunReports(o out, f runFlags, rep contain.Report, command []string, tl string) {
	b := rep.JSON(tl)
	if f.jsonOut {
		fmt.Fprintln(o.Stderr, string(b))
	}
	if f.report != "" {
		if err := contain.WriteFile(f.report, append(b, '\n')); err != nil {
			o.Warnf("run: --report %s: %v", f.report, err)
		}
	}
	if f.junit != "" {
		if err := contain.WriteFile(f.junit, rep.JUnit(command)); err != nil {
			o.Warnf("run: --junit %s: %v", f.junit, err)
		}
	}
	if err := rep.GitHub(o.Stdout); err != nil {
		o.Warnf("run: %v", err)
	}
}

// runReap ends the groups of runs whose freeze is gone.
func runReap(o out, dir string) int {
	reaped, err := contain.Reap(dir)
	if err != nil {
		o.Errorf("run --reap: %v", err)
		return exitRefused
	}
	code := exitZero
	for _, r := range reaped {
		if r.Err != nil {
			o.Warnf("run --reap: %s: %v", r.Name, r.Err)
			code = exitSurvivors
			continue
		}
		if r.Gone {
			o.Sayf("run --reap: %s (%s): its groups were gone already; its state file removed", r.Name, show.ShellJoin(r.Command))
			continue
		}
		o.Sayf("run --reap: ended %s (%s): %d process(es) it left, killed; its groups removed", r.Name, show.ShellJoin(r.Command), r.Left)
	}
	if len(reaped) == 0 {
		o.Sayf("run --reap: no run whose freeze is gone")
	}
	return code
}

// parseRunFlags parses freeze run's flags; the command is everything
// after --. A code of -1 means go on.
func parseRunFlags(o out, args []string) (runFlags, []string, int) {
	var f runFlags
	fl := pflag.NewFlagSet("freeze run", pflag.ContinueOnError)
	fl.SetOutput(io.Discard)
	fl.SetInterspersed(false)
	fl.IntVar(&f.maxProcs, "max-procs", 1024, "")
	fl.DurationVar(&f.timeout, "timeout", 0, "")
	fl.DurationVar(&f.killAfter, "kill-after", 10*time.Second, "")
	fl.DurationVar(&f.delay, "wait-delay", time.Second, "")
	fl.StringVar(&f.report, "report", "", "")
	fl.StringVar(&f.junit, "junit", "", "")
	fl.StringVar(&f.leaks, "leaks", "fail", "")
	fl.DurationVar(&f.delay, "leak-timeout", time.Second, "")
	ff := say.AddFormat(fl, "run: ", "text", "json")
	fl.BoolVar(&f.allowLeftovers, "allow-leftovers", false, "")
	fl.BoolVar(&f.reap, "reap", false, "")
	fl.StringVarP(&f.timeline, "timeline", "t", "", "")
	fl.StringVar(&f.stateDir, "state-dir", contain.StateDir(), "")
	fl.BoolVar(&f.nodeTestNames, "node-test-names", true, "")
	help := fl.BoolP("help", "h", false, "")
	if err := fl.Parse(args); err != nil {
		flagError(o, "run", "run: ", err)
		o.Hintf("freeze run [--max-procs N] [--timeout D] -- CMD [ARGS...]; see 'freeze run --help'")
		return f, nil, exitUsage
	}
	if *help {
		fmt.Fprint(o.Stdout, runUsage)
		return f, nil, exitZero
	}
	format, ok := ff.Resolve(o)
	if !ok {
		return f, nil, exitUsage
	}
	f.jsonOut = format == "json"
	command := fl.Args()
	if code := f.check(o, command); code >= 0 {
		return f, nil, code
	}
	if f.reap {
		return f, nil, -1
	}
	return f, command, -1
}

// check says what is wrong with the flags and the command, if anything:
// the usage exit code, else -1.
func (f runFlags) check(o out, command []string) int {
	switch {
	case f.reap && len(command) > 0:
		o.Errorf("run: --reap ends what earlier runs left; it takes no command")
	case f.reap:
		return -1
	case len(command) == 0:
		o.Errorf("run: no command")
		o.Hintf("freeze run -- make check; freeze run --max-procs 512 -- go test ./...")
	case f.maxProcs < 2:
		o.Errorf("run: --max-procs %d: the command needs at least 2 tasks (it and one child); a test suite wants hundreds", f.maxProcs)
	case !filepath.IsAbs(f.stateDir):
		o.Errorf("run: --state-dir %q is not absolute", f.stateDir)
	case f.timeout < 0:
		o.Errorf("run: --timeout %v: give a positive duration such as 30s or 10m (or leave it out: no timeout)", f.timeout)
	case f.delay < 0:
		o.Errorf("run: --wait-delay %v: give a duration of 0 or more, such as 1s", f.delay)
	case f.leaks != "fail" && f.leaks != "warn":
		o.Errorf("run: --leaks %q: give fail (a leftover fails the run, exit 122) or warn (it is reported, and the command's status kept)", f.leaks)
	case f.junit != "" && !filepath.IsAbs(f.junit) && strings.HasPrefix(f.junit, "-"):
		o.Errorf("run: --junit %q: give the file to write, such as --junit freeze-run.xml", f.junit)
	case f.killAfter < 0:
		o.Errorf("run: --kill-after %v: give a duration of 0 or more, such as 10s", f.killAfter)
	default:
		return -1
	}
	return exitUsage
}

const runUsage = `Usage:
    freeze run [options] -- CMD [ARGS...]
    freeze run --reap

Runs CMD so that nothing it starts can outlive it or grow past a cap:

  - a cap from outside: CMD starts in a cgroup made for it with pids.max
    (cgroup v2, cloned into it from its first instruction; else a v1
    pids group nested in freeze's own, joined before CMD's exec; else,
    as an ordinary user without either, RLIMIT_NPROC, which counts every
    process of your user and does not bind root: freeze says which);
  - its own process group, with freeze as the child subreaper of the
    whole tree; SIGINT, SIGTERM and SIGHUP are passed on to the group;
  - at every ending (CMD exits, --timeout, a signal to freeze) the group
    is frozen, killed, and zero is confirmed with the group empty; what
    outlived CMD is reported first: pid, executable, age, parent, how it
    left (a new session or process group, re-parented), pipes held;
  - a command run as root can always move a process of its own out of
    the groups (a write to another cgroup.procs): the cap and the
    group's teardown no longer reach it, but freeze, the subreaper of
    the whole tree, still sees it below itself: it is reported with the
    cgroup it went to, and killed (kept, with --allow-leftovers);
  - if freeze itself is killed, its groups outlive it: 'freeze run --reap'
    ends them from the state files in /run/freeze/runs.

freeze never reads CMD's output: a descendant holding stdout cannot hang
it, and once the group is gone, nothing holds the pipe of whoever reads it.

Examples:
    freeze run -- make check
    freeze run --max-procs 512 --timeout 20m -- pytest -n 8
    go test -exec 'freeze run --max-procs 512 --' ./...

Options:
        --max-procs N      pids.max: tasks, threads included (default 1024)
        --timeout D        after D, send SIGTERM to CMD's process group, as
                           timeout(1) does (default none)
        --kill-after D     how long CMD has after that SIGTERM to end by
                           itself (to write its report), before its tree
                           is torn down (default 10s, timeout -k's grace)
        --wait-delay D     after CMD exits (or is signalled), how long its
                           descendants get to exit by themselves (default
                           1s); a signal to freeze ends the wait at once
        --junit FILE       also write the run as JUnit XML: a failing test
                           case per leftover (with who started it) and per
                           cap hit, a passing one when clean (GitLab CI's
                           report; Jenkins reads it too). Under GitHub
                           Actions (GITHUB_ACTIONS=true) each is also an
                           error annotation, and a table is appended to
                           $GITHUB_STEP_SUMMARY
        --leaks fail|warn  fail (default): a leftover fails the run (122);
                           warn: it is reported, CMD's status is kept
        --leak-timeout D   the same as --wait-delay: how long CMD's
                           descendants get to exit after it does before
                           they count as left over (default 1s)
        --allow-leftovers  report leftovers, but keep CMD's status (and
                           leave alive what left the groups)
    -f, --format FORMAT    text (default), or json: the report as JSON on
                           stderr at the end, in place of freeze's words
                           (stdout stays CMD's own); where CMD writes
                           nothing to stderr:
                             freeze run --json -- CMD 2>&1 >/dev/null | jq .exit
                           else read it from --report FILE
        --json             the same as --format json
        --report FILE      write the report as JSON to FILE
    -t, --timeline FILE    the run's timeline; by default it is kept (in
                           /var/tmp/freeze for root) only when the exit code
                           is not the command's own
        --reap             end the groups of runs whose freeze was killed
        --state-dir DIR    where runs leave their state files for --reap
                           (default /run/freeze for root)
        --node-test-names  a leftover of node's test runner (node --test)
                           names its test, as pytest's do: freeze adds
                           --require=DIR/node-test-names-RUN.cjs to CMD's
                           NODE_OPTIONS, a preload that acts only in the
                           runner and its test files' processes, removed
                           at the run's end (on by default; =false leaves
                           NODE_OPTIONS alone). As root it goes
                           where every user can read it (in DIR-node
                           beside a DIR only root can search), for a CMD
                           that runs node as another user
    -h, --help             this text

Exit codes:
    CMD's own status, when nothing outlived it and the cap was not hit
    (128+N when a signal N killed it), else:
    121   the teardown could not confirm the group empty
    122   processes outlived CMD (they were killed); not with --allow-leftovers
    123   the cap refused a fork: CMD grew to --max-procs
    124   --timeout fired
    2     usage;  3   freeze run could not start (no command run)
`

// slowDelay is the --wait-delay past which a run with leftovers says what
// the wait cost.
const slowDelay = 500 * time.Millisecond
