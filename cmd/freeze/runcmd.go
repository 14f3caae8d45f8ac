package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"freeze/internal/contain"
	"freeze/internal/incident"
	"freeze/internal/match"
	"freeze/internal/safedir"
	"freeze/internal/timeline"
)

// freeze run's own exit codes, apart from freeze's (0-5), from a
// command's ordinary ones, and from 128+N (killed by signal N); 124 is
// timeout(1)'s.
const (
	exitRunNotZero   = 121 // the teardown could not confirm the group empty
	exitRunLeftovers = 122 // processes outlived the command
	exitRunCapHit    = 123 // the cap refused a fork
	exitRunTimedOut  = 124 // --timeout fired
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
}

// runRun is 'freeze run': parse, run the command contained, say what
// was left, and exit with the command's status or one of run's codes.
func runRun(o out, args []string) int {
	f, command, code := parseRunFlags(o, args)
	if code >= 0 {
		return code
	}
	if f.reap {
		return runReap(o, f.stateDir)
	}
	self, err := os.Executable()
	if err != nil {
		o.errorf("run: cannot find freeze's own executable: %v", err)
		return exitRefused
	}
	// The record stays in memory unless asked for (-t) or worth keeping:
	// under go test -exec, a file per clean test binary would pile up.
	quiet := incident.Output{Warn: func(s string) { o.warnf("%s", s) }}
	rec, _ := timeline.New("", nil)
	if f.timeline != "" {
		rec = incident.OpenTimeline(f.timeline, quiet)
	}
	rep, err := contain.Run(contain.Config{Command: command, MaxProcs: f.maxProcs, Timeout: f.timeout, KillAfter: f.killAfter, WaitDelay: f.delay,
		Self: self, StateDir: f.stateDir, Rec: rec, KeepEscaped: f.allowLeftovers})
	if err != nil {
		rec.Close()
		o.errorf("run: %v; the command was not run", err)
		return exitRefused
	}
	code, why := runVerdict(f, rep)
	rec.RecordOf(timeline.StageRecord, timeline.StepRunEnd, why, timeline.RunEnd{Exit: code, Why: why, Leftovers: len(rep.Leftovers),
		Refused: rep.Refused, Peak: rep.Peak, Max: f.maxProcs, AtCap: rep.AtCap, Zero: rep.Zero, TookMS: msOf(rep.Took),
		TeardownMS: msOf(rep.TeardownTook), RemoveMS: msOf(rep.RemoveTook)})
	incident.CloseTimeline(rec, quiet)
	if rec.Path() == "" && code != rep.Status {
		keepRecord(o, rec)
	}
	sayRun(o, f, rep, code, why, rec.Path())
	if f.jsonOut || f.report != "" {
		writeRunReport(o, f, rep, code, why, rec.Path())
	}
	if f.junit != "" {
		writeJUnit(o, f, rep, command)
	}
	githubAnnotate(o, f, rep, code, why)
	return code
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// keepRecord saves a run's record that has something to report (a
// leftover, the cap, the timeout) in the caller's checked state directory.
func keepRecord(o out, rec *timeline.Recorder) {
	dir := timeline.StateDir()
	if err := timeline.CheckStateDir(dir); err != nil {
		o.warnf("run: the timeline is not kept: %v", err)
		return
	}
	rec.SaveAtEnd(timeline.RunName("run"))
	if _, err := rec.SaveCopy(dir); err != nil {
		o.warnf("run: the timeline is not kept: %v", err)
	}
}

// runVerdict is freeze run's exit code and its reason, strongest first.
func runVerdict(f runFlags, rep contain.Report) (int, string) {
	switch {
	case !rep.Zero:
		return exitRunNotZero, fmt.Sprintf("the teardown could not confirm zero: %v", rep.TeardownErr)
	case rep.TimedOut:
		return exitRunTimedOut, fmt.Sprintf("the command timed out after %v (SIGTERM, then %v of grace); its tree was torn down", f.timeout, f.killAfter)
	case rep.CapHit():
		return exitRunCapHit, fmt.Sprintf("the cap of %d tasks refused %d fork(s)", f.maxProcs, rep.Refused)
	case len(rep.Leftovers) > 0 && !f.allowLeftovers && f.leaks == "fail":
		return exitRunLeftovers, fmt.Sprintf("%d process(es) outlived the command", len(rep.Leftovers))
	case rep.Status < 0:
		return exitRunNotZero, "the command did not exit after " + rep.Signaled
	}
	return rep.Status, fmt.Sprintf("the command's own status, %d", rep.Status)
}

// sayRun says, in freeze's voice, what held and what was left.
func sayRun(o out, f runFlags, rep contain.Report, code int, why, tl string) {
	if rep.Cap == contain.CapRlimit {
		o.warnf("run: %s", rep.CapWhy)
	}
	for i, l := range rep.Leftovers {
		if i == 20 {
			o.sayf("run:   ... and %d more", len(rep.Leftovers)-20)
			break
		}
		o.sayf("run: %s", l)
	}
	if rep.CapHit() {
		o.sayf("run: the cap fired: %d fork(s) refused at pids.max=%d (peak %d tasks)", rep.Refused, f.maxProcs, rep.Peak)
		if len(rep.AtCap) > 0 {
			o.sayf("run: when it first fired, the group held: %s", match.OneLine(strings.Join(rep.AtCap, ", ")))
		}
	}
	status := "nothing outlived it"
	if n := len(rep.Leftovers); n > 0 {
		status = fmt.Sprintf("%d process(es) outlived it and were killed", n)
	}
	o.sayf("run: %s in %s; %s; the group is empty (zero confirmed)", rep.ExitWords(), timeline.Dur(rep.Took), status)
	if !rep.Zero {
		o.errorf("run: %s", why)
		o.hintf("see 'freeze census'; the groups are named in %s", tl)
	}
	if code != rep.Status && tl != "" {
		o.sayf("run: exit %d: %s; timeline: %s", code, why, tl)
	}
}

type runJSON struct {
	Exit      int                    `json:"exit"`
	Why       string                 `json:"why"`
	Status    int                    `json:"status"`
	Cap       string                 `json:"cap"`
	CapWhy    string                 `json:"cap_why"`
	Group     string                 `json:"group,omitempty"` // the group whose pids.max capped it
	TimedOut  bool                   `json:"timed_out"`
	Refused   int                    `json:"forks_refused"`
	Peak      int                    `json:"peak"`
	Leftovers []timeline.RunLeftover `json:"leftovers"`
	AtCap     []string               `json:"at_cap,omitempty"` // what the group held when the cap first fired
	Zero      bool                   `json:"zero"`
	Timeline  string                 `json:"timeline,omitempty"`
	TookMS    float64                `json:"took_ms"`
}

func writeRunReport(o out, f runFlags, rep contain.Report, code int, why, tl string) {
	j := runJSON{Exit: code, Why: why, Status: rep.Status, Cap: rep.Cap, CapWhy: rep.CapWhy, Group: rep.Group, TimedOut: rep.TimedOut,
		Refused: rep.Refused, Peak: rep.Peak, Zero: rep.Zero, Timeline: tl, TookMS: float64(rep.Took.Microseconds()) / 1000,
		Leftovers: []timeline.RunLeftover{}, AtCap: rep.AtCap}
	for _, l := range rep.Leftovers {
		j.Leftovers = append(j.Leftovers, l.Record())
	}
	b, _ := json.MarshalIndent(j, "", "  ")
	if f.jsonOut {
		// On stderr: stdout is the command's, and a report mixed into
		// it would corrupt what a pipeline reads.
		fmt.Fprintln(o.stderr, string(b))
	}
	if f.report != "" {
		// By descriptor, replacing whatever stands at the name: a user's
		// symlink there (in /tmp, say) must not make root truncate the
		// file it points to.
		if err := safedir.WriteFile(f.report, append(b, '\n'), 0o644); err != nil {
			o.warnf("run: --report %s: %v", f.report, err)
		}
	}
}

// runReap ends the groups of runs whose freeze is gone.
func runReap(o out, dir string) int {
	reaped, err := contain.Reap(dir)
	if err != nil {
		o.errorf("run --reap: %v", err)
		return exitRefused
	}
	code := exitZero
	for _, r := range reaped {
		if r.Err != nil {
			o.warnf("run --reap: %s: %v", r.Name, r.Err)
			code = exitSurvivors
			continue
		}
		if r.Gone {
			o.sayf("run --reap: %s (%s): its groups were gone already; its state file removed", r.Name, match.ShellJoin(r.Command))
			continue
		}
		o.sayf("run --reap: ended %s (%s): %d process(es) it left, killed; its groups removed", r.Name, match.ShellJoin(r.Command), r.Left)
	}
	if len(reaped) == 0 {
		o.sayf("run --reap: no run whose freeze is gone")
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
	ff := addFormat(fl, "run: ", "text", "json")
	fl.BoolVar(&f.allowLeftovers, "allow-leftovers", false, "")
	fl.BoolVar(&f.reap, "reap", false, "")
	fl.StringVarP(&f.timeline, "timeline", "t", "", "")
	fl.StringVar(&f.stateDir, "state-dir", contain.StateDir(), "")
	help := fl.BoolP("help", "h", false, "")
	if err := fl.Parse(args); err != nil {
		o.flagError("run: ", err)
		o.hintf("freeze run [--max-procs N] [--timeout D] -- CMD [ARGS...]; see 'freeze run --help'")
		return f, nil, exitUsage
	}
	if *help {
		fmt.Fprint(o.stdout, runUsage)
		return f, nil, exitZero
	}
	format, code := ff.resolve(o)
	if code >= 0 {
		return f, nil, code
	}
	f.jsonOut = format == "json"
	command := fl.Args()
	switch {
	case f.reap && len(command) > 0:
		o.errorf("run: --reap ends what earlier runs left; it takes no command")
	case f.reap:
		return f, nil, -1
	case len(command) == 0:
		o.errorf("run: no command")
		o.hintf("freeze run -- make check; freeze run --max-procs 512 -- go test ./...")
	case f.maxProcs < 2:
		o.errorf("run: --max-procs %d: the command needs at least 2 tasks (it and one child); a test suite wants hundreds", f.maxProcs)
	case !filepath.IsAbs(f.stateDir):
		o.errorf("run: --state-dir %q is not absolute", f.stateDir)
	case f.timeout < 0:
		o.errorf("run: --timeout %v: give a positive duration such as 30s or 10m (or leave it out: no timeout)", f.timeout)
	case f.delay < 0:
		o.errorf("run: --wait-delay %v: give a duration of 0 or more, such as 1s", f.delay)
	case f.leaks != "fail" && f.leaks != "warn":
		o.errorf("run: --leaks %q: give fail (a leftover fails the run, exit 122) or warn (it is reported, and the command's status kept)", f.leaks)
	case f.junit != "" && !filepath.IsAbs(f.junit) && strings.HasPrefix(f.junit, "-"):
		o.errorf("run: --junit %q: give the file to write, such as --junit freeze-run.xml", f.junit)
	case f.killAfter < 0:
		o.errorf("run: --kill-after %v: give a duration of 0 or more, such as 10s", f.killAfter)
	default:
		return f, command, -1
	}
	return f, nil, exitUsage
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
                           descendants get to exit by themselves (default 1s)
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
                           stdout at the end
        --json             the same as --format json
        --report FILE      write the report as JSON to FILE
    -t, --timeline FILE    the run's timeline; by default it is kept (in
                           /var/tmp/freeze for root) only when the exit code
                           is not the command's own
        --reap             end the groups of runs whose freeze was killed
        --state-dir DIR    where runs leave their state files for --reap
                           (default /run/freeze for root)

Exit codes:
    CMD's own status, when nothing outlived it and the cap was not hit
    (128+N when a signal N killed it), else:
    121   the teardown could not confirm the group empty
    122   processes outlived CMD (they were killed); not with --allow-leftovers
    123   the cap refused a fork: CMD grew to --max-procs
    124   --timeout fired
    2     usage;  3   freeze run could not start (no command run)
`
