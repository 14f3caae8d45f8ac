package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"freeze/internal/contain"
	"freeze/internal/freeze"
	"freeze/internal/guard"
	"freeze/internal/incident"
	"freeze/internal/match"
	"freeze/internal/proc"
	"freeze/internal/safedir"
	"freeze/internal/timeline"
	"freeze/internal/version"
)

// Exit codes, as documented in the usage text and the README: the table
// is timeline.ExitCode, which names each outcome's code.
const (
	exitZero        = timeline.ExitZero
	exitSurvivors   = timeline.ExitSurvivors
	exitUsage       = timeline.ExitUsage
	exitRefused     = timeline.ExitRefused
	exitInterrupted = timeline.ExitInterrupted
)

func run(args []string, stdout, stderr io.Writer) int {
	o := out{stdout, stderr}
	if len(args) > 0 {
		switch args[0] {
		case "drill":
			return runDrill(o, args[1:])
		case "runbook":
			return runRunbook(o, args[1:])
		case "timeline":
			return runTimeline(o, args[1:])
		case "census":
			return runCensus(o, args[1:])
		case "restore":
			return runRestore(o, args[1:])
		case "guard":
			return runGuard(o, args[1:])
		case "run":
			return runRun(o, args[1:])
		case "node":
			return runNode(o, args[1:])
		case "version", "--version":
			fmt.Fprintln(o.stdout, version.Get())
			return exitZero
		case "help":
			return runHelp(o, args[1:])
		case "completion":
			return runCompletion(o, args[1:])
		case "man":
			fmt.Fprint(o.stdout, manPage())
			return exitZero
		case hiddenChain:
			return runChainFixture(args[1:])
		case contain.ChildArg:
			return contain.Child(args[1:])
		}
	}
	return runStop(o, args)
}

type stopFlags struct {
	words              []string // as given, for the record and the run lock
	paths, under, args []string
	uids               []int
	container, pod     string
	noDesc, hold       bool
	dryRun, jsonOut    bool
	force              bool
	revoke             bool
	disposable         []string
	method             string
	runDir             string
	noGuard            bool
	btf                string
	rounds             int
	timeout            time.Duration
	timeline           string
}

// runStop is the stop order's command: parse and check the flags once,
// hand the request to a running guard if one answers, else run it here.
func runStop(o out, args []string) int {
	f, code := parseStopFlags(o, args)
	if code >= 0 {
		return code
	}
	// What the checks say (a symlinked --path, say) is said once, by
	// whoever runs the request: a guard checks its request again.
	var pre bytes.Buffer
	req, code := f.request(out{&pre, &pre})
	if code != 0 || f.noGuard || f.dryRun {
		o.stderr.Write(pre.Bytes())
		if code != 0 {
			return code
		}
		return runHere(o, f, req).Code
	}
	// The guard runs in its own directory: a relative --timeline would be
	// written there (#24, finding 9). Resolved here, where the operator
	// meant it; a later flag overrides the earlier.
	if f.timeline != "" && !filepath.IsAbs(f.timeline) {
		args = append(args[:len(args):len(args)], "--timeline", mustAbs(f.timeline))
	}
	code, err := guard.Ask(f.runDir, args, o.stdout, o.stderr)
	switch {
	case err == nil:
		return code
	case errors.Is(err, guard.ErrLost):
		o.errorf("the guard at %s stopped answering mid-run: %v", f.runDir, err)
		o.hintf("see %s; what it froze stays frozen; run the same command with --no-guard to finish", filepath.Join(f.runDir, guard.LogName))
		return exitInterrupted
	case err == guard.ErrNoGuard:
		// None runs: freeze runs here, as it always has.
	default:
		o.warnf("%v; running here instead", err)
	}
	o.stderr.Write(pre.Bytes())
	return runHere(o, f, req).Code
}

// guardRequest is what a guard runs for one request: its words, parsed
// and checked once, then run here (in the guard), with what the run says
// going to the asker.
func guardRequest(o out, asked guard.Asked, spare *guard.Resident) guard.Result {
	f, code := parseStopFlags(o, asked.Words)
	if code >= 0 {
		return guard.Result{Code: code, Outcome: "usage"}
	}
	if f.timeline != "" && !filepath.IsAbs(f.timeline) {
		// The guard cannot know the asker's directory (a FIFO request
		// has none): a relative path would land in the guard's own.
		o.errorf("--timeline %s is relative: the guard does not know your directory", f.timeline)
		o.hintf("give an absolute path, for example --timeline /var/tmp/freeze/incident.jsonl")
		return guard.Result{Code: exitUsage, Outcome: "usage"}
	}
	req, code := f.request(o)
	if code != 0 {
		return guard.Result{Code: code, Outcome: outcomeOf(code)}
	}
	if j := asked.Judged; j != nil && (len(req.Spec.Targets) != 1 || req.Spec.Targets[0].File.Dev != j.Dev || req.Spec.Targets[0].File.Ino != j.Ino) {
		// The guard judged one file; between its judging and this
		// resolve, the path's owner could have put another there.
		o.errorf("refused: %s is no longer the file the guard judged (device %d, inode %d); nothing was changed", f.paths[0], j.Dev, j.Ino)
		return guard.Result{Code: exitRefused, Outcome: outcomeOf(exitRefused)}
	}
	req.Gate = spare.TakeSpare()
	return runHere(o, f, req)
}

// runHere runs a checked request in this process and says how it ended.
func runHere(o out, f stopFlags, req incident.Request) guard.Result {
	rep := incident.Run(req, o.incident())
	return report(o, f, rep)
}

// request checks the flags and makes the run's request of them; a
// non-zero code means stop with it (the words are said).
func (f stopFlags) request(o out) (incident.Request, int) {
	spec, code := f.spec(o)
	if code != 0 {
		return incident.Request{}, code
	}
	method, code := f.check(o)
	if code != 0 {
		return incident.Request{}, code
	}
	return incident.Request{
		Spec: spec, Method: method, BTF: f.btf, Hold: f.hold, DryRun: f.dryRun, Force: f.force,
		RevokeExec: f.revoke, Disposable: f.disposable, Timeline: f.timeline,
		Limits:  incident.Limits{Rounds: f.rounds, Timeout: f.timeout, RoundWait: incident.Defaults.RoundWait},
		Command: append([]string{"freeze"}, f.words...),
	}, 0
}

// parseStopFlags parses the stop order's flags. A code of -1 means go on;
// any other is the exit code (--help, or a usage error said already).
func parseStopFlags(o out, args []string) (stopFlags, int) {
	f := stopFlags{words: args}
	fl := pflag.NewFlagSet("freeze", pflag.ContinueOnError)
	fl.SetOutput(io.Discard)
	fl.StringArrayVarP(&f.paths, "path", "p", nil, "")
	fl.StringArrayVarP(&f.under, "under", "u", nil, "")
	fl.StringArrayVarP(&f.args, "arg", "a", nil, "")
	fl.IntSliceVar(&f.uids, "uid", nil, "")
	fl.StringVar(&f.container, "container", "", "")
	fl.StringVar(&f.pod, "pod", "", "")
	fl.BoolVar(&f.noDesc, "no-descendants", false, "")
	fl.StringVarP(&f.method, "method", "m", "auto", "")
	fl.StringVar(&f.btf, "btf", "", "")
	fl.StringVar(&f.runDir, "run-dir", guard.DefaultRunDir, "")
	fl.BoolVar(&f.noGuard, "no-guard", false, "")
	fl.BoolVar(&f.hold, "hold", false, "")
	fl.BoolVarP(&f.dryRun, "dry-run", "n", false, "")
	fl.IntVar(&f.rounds, "rounds", incident.Defaults.Rounds, "")
	fl.DurationVar(&f.timeout, "timeout", incident.Defaults.Timeout, "")
	fl.StringVarP(&f.timeline, "timeline", "t", "", "")
	ff := addFormat(fl, "", "text", "json")
	fl.BoolVar(&f.force, "force", false, "")
	fl.BoolVar(&f.revoke, "revoke-exec", false, "")
	fl.StringArrayVar(&f.disposable, "disposable", nil, "")
	help := fl.BoolP("help", "h", false, "")
	if err := fl.Parse(args); err != nil {
		o.flagError("", err)
		o.hintf("see 'freeze --help'")
		return f, exitUsage
	}
	if *help {
		fmt.Fprint(o.stdout, usageText())
		return f, exitZero
	}
	format, code := ff.resolve(o)
	if code >= 0 {
		return f, code
	}
	f.jsonOut = format == "json"
	if fl.NArg() > 0 {
		o.errorf("unexpected argument %q", fl.Arg(0))
		if near := didYouMean(fl.Arg(0), commands); near != "" && !strings.Contains(fl.Arg(0), "/") {
			o.hintf("did you mean 'freeze %s'?", near)
		} else if !sayRunning(o, fl.Arg(0)) {
			o.hintf("name the executable by its full path: freeze --path /abs/path/to/binary ('freeze census' shows what runs most)")
		}
		return f, exitUsage
	}
	return f, -1
}

// check validates the flags that do not name targets: every conflict has
// its own message and a hint.
func (f stopFlags) check(o out) (freeze.Method, int) {
	method, err := freeze.ParseMethod(f.method, f.revoke)
	switch {
	case errors.Is(err, freeze.ErrNoneNeedsRevoke):
		o.errorf("%v", err)
		o.hintf("add --revoke-exec (for a chain that execs at every hop), or use --method sigstop where no cgroup can be used")
		return "", exitUsage
	case err != nil:
		o.errorf("unknown --method %q", f.method)
		o.hintf("use auto, bpf, cgroup2, cgroup1, sigstop, or none with --revoke-exec")
		return "", exitUsage
	}
	for _, d := range f.disposable {
		if !filepath.IsAbs(d) {
			o.errorf("--disposable %q is not absolute", d)
			o.hintf("give the full path, for example --disposable %s", match.ShellQuote(mustAbs(d)))
			return "", exitUsage
		}
	}
	switch {
	case len(f.disposable) > 0 && !f.revoke:
		o.errorf("--disposable only says where --revoke-exec may act")
		o.hintf("add --revoke-exec, or drop --disposable")
	case f.rounds < 1:
		o.errorf("--rounds %d: need at least 1", f.rounds)
	case f.timeout <= 0:
		o.errorf("--timeout %v: need a positive duration such as 60s", f.timeout)
	case f.btf != "" && !filepath.IsAbs(f.btf):
		o.errorf("--btf %q is not absolute", f.btf)
		o.hintf("give the full path of a kernel BTF file, for example --btf /sys/kernel/btf/vmlinux")
	case f.hold && f.dryRun:
		o.errorf("--hold and --dry-run together: a dry run changes nothing, so there is nothing to hold")
		o.hintf("drop one of them")
	default:
		return method, 0
	}
	return "", exitUsage
}

// spec validates the targets; a non-zero code means stop with it.
func (f stopFlags) spec(o out) (match.Spec, int) {
	var spec match.Spec
	scope, members, code := f.scope(o)
	if code != 0 {
		return spec, code
	}
	if len(f.paths) == 0 && len(f.under) == 0 {
		o.errorf("no target: name the runaway executable")
		o.hintf("freeze --path /abs/path/to/binary; 'freeze census' shows what holds the machine and prints the command")
		return spec, exitUsage
	}
	for _, p := range f.paths {
		if !scope.Zero() {
			ts, code := f.containerTargets(o, p, scope, members)
			if code != 0 {
				return spec, code
			}
			spec.Targets = append(spec.Targets, ts...)
			continue
		}
		t, code := f.pathTarget(o, p)
		if code != 0 {
			return spec, code
		}
		spec.Targets = append(spec.Targets, t)
	}
	spec.Scope = scope
	for _, d := range f.under {
		real, code := f.underDir(o, d)
		if code != 0 {
			return spec, code
		}
		spec.Under = append(spec.Under, real)
	}
	for _, u := range f.uids {
		if u < 0 {
			o.errorf("--uid %d: a user id is 0 or more", u)
			o.hintf("name the chain's owner, as 'ps -o uid= -p PID' prints it")
			return spec, exitUsage
		}
	}
	spec.Args, spec.UIDs, spec.NoDescendants = f.args, f.uids, f.noDesc
	return spec, 0
}

// pathTarget resolves one --path to the file it names (or, deleted, the
// file its processes still run) and applies the refusals.
func (f stopFlags) pathTarget(o out, p string) (match.Target, int) {
	t, err := match.Resolve(p)
	if err != nil && safedir.IsProcView(p) {
		o.errorf("--path %s: %v", p, err)
		o.hintf("the process is gone, or the path does not name a regular file in its root: list its processes again (ps, 'freeze census')")
		return t, exitUsage
	}
	switch {
	case errors.Is(err, match.ErrRelative):
		o.errorf("--path %q is not absolute", p)
		if !sayRunning(o, p) {
			pathHint(o, "--path", p)
		}
		return t, exitUsage
	case errors.Is(err, fs.ErrNotExist):
		// The test cache removed under its chain: the file is gone,
		// and its processes still run it.
		d, others, derr := match.ResolveDeleted(proc.Default, p)
		if derr != nil {
			o.errorf("--path %s: no such file, and no live process runs a deleted file of that name", p)
			if !sayRunning(o, p) {
				o.hintf("check the path with ls -l %s; 'freeze census' shows what runs most", match.ShellQuote(p))
			}
			return t, exitUsage
		}
		o.sayf("--path %s was deleted: matching the file its processes still run (device %d, inode %d)", p, d.File.Dev, d.File.Ino)
		if others > 0 {
			o.warnf("%d other processes run an older deleted file of that path: not matched; run freeze again for them", others)
		}
		t = d
	case errors.Is(err, match.ErrNotRegular):
		o.errorf("--path %v", err)
		o.hintf("to match everything run from a directory, use --under %s", match.ShellQuote(p))
		return t, exitUsage
	case err != nil:
		o.errorf("--path %s: %v", p, err)
		return t, exitUsage
	}
	if t.Symlink {
		o.sayf("--path %s is a symlink: matching the file it points to, %s", p, t.Path)
	}
	if t.View {
		o.sayf("--path %s: matching the file that process sees there, as the kernel holds it (device %d, inode %d), not the same path on this host", p, t.File.Dev, t.File.Ino)
	}
	if r := match.Refuse(proc.Default, t, len(f.args) > 0, f.force); r != nil {
		o.errorf("refused: %s", r.Rule)
		o.hintf("%s", r.Hint)
		return t, exitRefused
	}
	return t, 0
}

// underDir resolves one --under to the directory it names and applies
// the refusal of the machine's own program directories.
func (f stopFlags) underDir(o out, d string) (string, int) {
	if !filepath.IsAbs(d) {
		o.errorf("--under %q is not absolute", d)
		o.hintf("give the full path, for example --under %s", match.ShellQuote(mustAbs(d)))
		return "", exitUsage
	}
	// Resolved, as a process's exe link reads: a symlinked --under
	// (current -> build-123) matched nothing before, and the
	// refusal below judged the unresolved text
	// (/proc/self/root/usr/bin passed it).
	real, err := filepath.EvalSymlinks(d)
	if err != nil {
		o.errorf("--under %s: %v", d, err)
		o.hintf("name the directory that holds the runaway executables")
		return "", exitUsage
	}
	if st, err := os.Stat(real); err != nil || !st.IsDir() {
		o.errorf("--under %s: not a directory", d)
		return "", exitUsage
	}
	if real != filepath.Clean(d) {
		o.sayf("--under %s is a symlink to %s: matching %s", d, real, real)
	}
	if freeze.SystemDir(real) && !f.force {
		o.errorf("refused: --under %s would match the machine's own programs", real)
		o.hintf("name the test cache that holds the chain, such as --under /tmp/TestX/cache, or add --force")
		return "", exitRefused
	}
	return real, 0
}

func mustAbs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}

// runHelp is 'freeze help [CMD]': the usage of freeze or of CMD.
func runHelp(o out, args []string) int {
	name := ""
	if len(args) > 0 {
		name = args[0]
	}
	text := usageOf(name)
	if text == "" || len(args) > 1 {
		o.errorf("help: no command %q", strings.Join(args, " "))
		o.hintf("freeze help [%s]", strings.Join(helpable(), " | "))
		return exitUsage
	}
	fmt.Fprint(o.stdout, text)
	return exitZero
}

// helpable are the commands with a usage text of their own.
func helpable() []string {
	var out []string
	for _, c := range commands[1:] {
		if usageOf(c) != "" {
			out = append(out, c)
		}
	}
	return out
}

// sayRunning names the executables live processes run whose file name is
// name's (a bare name, or a relative path's last element), with the
// command for each; false when none runs.
func sayRunning(o out, name string) bool {
	running := match.RunningNamed(proc.Default, filepath.Base(name))
	for i, r := range running {
		if i == 5 {
			o.hintf("... and %d more executables named %s", len(running)-5, filepath.Base(name))
			break
		}
		what := fmt.Sprintf("%d process", r.Count)
		if r.Count != 1 {
			what += "es"
		}
		if r.Deleted {
			what += ", of a file since deleted or replaced"
		}
		o.hintf("running now: %s (%s): freeze --path %s", r.Path, what, match.ShellQuote(r.Path))
	}
	return len(running) > 0
}
