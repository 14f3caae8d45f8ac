// Package order is the stop order's command line, for every caller that
// takes one as words: freeze's own (cmd/freeze) and a guard's request
// (internal/guard), which the guard runs without passing through main.
// Parse reads the words, Request checks them into an stop.Request
// (every refusal and usage error said here, with its hint), Run runs it
// through incident and Report says how it ended. Start reading at Asked.
package order

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"freeze/internal/freeze"
	"freeze/internal/match"
	"freeze/internal/proc"
	"freeze/internal/safedir"
	"freeze/internal/say"
	"freeze/internal/show"
	"freeze/internal/stop"
	"freeze/internal/timeline"
)

// Flags are the stop order's words, parsed: what Parse read, for
// Request to check.
type Flags struct {
	words              []string // as given, for the record and the run lock
	paths, under, args []string
	uids               []int
	container, pod     string
	cgroup             string
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
	// tasks, when set, lists the processes for a deleted --path's
	// resolve (a guard's spare gate), where /proc is read otherwise.
	tasks match.TaskSource
}

// Local says the request runs in this process whatever guard runs: the
// operator said --no-guard, or a dry run (which changes nothing, and
// answers what this process can see).
func (f Flags) Local() bool { return f.noGuard || f.dryRun }

// RunDir is the guard's directory the request would be handed to.
func (f Flags) RunDir() string { return f.runDir }

// Timeline is --timeline as given ("" for none).
func (f Flags) Timeline() string { return f.timeline }

// Asked runs one request a guard took, as words (a FIFO's line, a
// socket's hand-over, the automatic mode's hold): parsed and checked
// once, then run in this process (the guard's), with what the run says
// going to the asker. judged, if not nil, is the file an automatic
// request judged: the words must still name it. ctx is the request's
// (the guard's: its SIGTERM ends a run between two steps). spare hands the run the
// gate a guard loaded ahead: taken before the checks, whose resolve of a
// deleted --path lists the processes with its task iterator, and unloaded
// when they refuse the request.
func Asked(ctx context.Context, o say.Out, words []string, judged *proc.File, spare func() *freeze.Spare) stop.Report {
	f, code := Parse(o, words)
	if code >= 0 {
		return stop.Report{Outcome: outcomeOf(code)}
	}
	if f.timeline != "" && !filepath.IsAbs(f.timeline) {
		// The guard cannot know the asker's directory (a FIFO request
		// has none): a relative path would land in the guard's own.
		o.Errorf("--timeline %s is relative: the guard does not know your directory", f.timeline)
		o.Hintf("give an absolute path, for example --timeline /var/tmp/freeze/stop.jsonl")
		return stop.Report{Outcome: timeline.StepUsage}
	}
	// The spare is taken before the checks: its task iterator lists the
	// processes for a deleted --path in one pass. A request refused
	// after this unloads it (the guard loads the next while idle).
	var sp *freeze.Spare
	if spare != nil {
		sp = spare()
	}
	if sp != nil {
		f.tasks = sp.Tasks
	}
	req, code := f.Request(o)
	if code != 0 {
		sp.Close()
		return stop.Report{Outcome: outcomeOf(code)}
	}
	if j := judged; j != nil && (len(req.Spec.Targets) != 1 || req.Spec.Targets[0].File.Dev != j.Dev || req.Spec.Targets[0].File.Ino != j.Ino) {
		// The guard judged one file; between its judging and this
		// resolve, the path's owner could have put another there.
		sp.Close()
		o.Errorf("refused: %s is no longer the file the guard judged (device %d, inode %d); nothing was changed", f.paths[0], j.Dev, j.Ino)
		return stop.Report{Outcome: timeline.StepRefused}
	}
	req.Spare = sp
	return Run(ctx, o, f, req)
}

// Run runs a checked request in this process and says how it ended;
// ctx ended (a signal) ends the run between two steps.
func Run(ctx context.Context, o say.Out, f Flags, req stop.Request) stop.Report {
	rep := stop.Run(ctx, req, Output(o))
	Report(o, f, rep)
	return rep
}

// Request checks the flags and makes the run's request of them; a
// non-zero code means stop with it (the words are said).
func (f Flags) Request(o say.Out) (stop.Request, int) {
	// The flags' own errors first: a usage error after the targets'
	// notices ("--path X is a symlink: matching ...") read as if the
	// targets were the problem (#52).
	method, code := f.check(o)
	if code != 0 {
		return stop.Request{}, code
	}
	spec, code := f.spec(o)
	if code != 0 {
		return stop.Request{}, code
	}
	return stop.Request{
		Spec: spec, Name: freeze.GroupName(spec), Method: method, BTF: f.btf, Hold: f.hold, DryRun: f.dryRun, Force: f.force,
		RevokeExec: f.revoke, Disposable: f.disposable, Timeline: f.timeline,
		Limits:  stop.Limits{Rounds: f.rounds, Timeout: f.timeout, RoundWait: stop.Defaults.RoundWait},
		Command: append([]string{"freeze"}, f.words...),
	}, 0
}

// Parse parses the stop order's flags. A code of -1 means go on;
// any other is the exit code (--help, or a usage error said already).
func Parse(o say.Out, args []string) (Flags, int) {
	f := Flags{words: args}
	fl := pflag.NewFlagSet("freeze", pflag.ContinueOnError)
	fl.SetOutput(io.Discard)
	fl.StringArrayVarP(&f.paths, "path", "p", nil, "")
	fl.StringArrayVarP(&f.under, "under", "u", nil, "")
	fl.StringArrayVarP(&f.args, "arg", "a", nil, "")
	fl.IntSliceVar(&f.uids, "uid", nil, "")
	fl.StringVar(&f.container, "container", "", "")
	fl.StringVar(&f.pod, "pod", "", "")
	fl.StringVar(&f.cgroup, "cgroup", "", "")
	fl.BoolVar(&f.noDesc, "no-descendants", false, "")
	fl.StringVarP(&f.method, "method", "m", "auto", "")
	fl.StringVar(&f.btf, "btf", "", "")
	fl.StringVar(&f.runDir, "run-dir", RunDir(), "")
	fl.BoolVar(&f.noGuard, "no-guard", false, "")
	fl.BoolVar(&f.hold, "hold", false, "")
	fl.BoolVarP(&f.dryRun, "dry-run", "n", false, "")
	fl.IntVar(&f.rounds, "rounds", stop.Defaults.Rounds, "")
	fl.DurationVar(&f.timeout, "timeout", stop.Defaults.Timeout, "")
	fl.StringVarP(&f.timeline, "timeline", "t", "", "")
	ff := say.AddFormat(fl, "", "text", "json")
	fl.BoolVar(&f.force, "force", false, "")
	fl.BoolVar(&f.revoke, "revoke-exec", false, "")
	fl.StringArrayVar(&f.disposable, "disposable", nil, "")
	help := fl.BoolP("help", "h", false, "")
	if err := fl.Parse(args); err != nil {
		o.FlagError("", err, say.Options(Usage()))
		o.Hintf("see 'freeze --help'")
		return f, timeline.ExitUsage
	}
	if *help {
		fmt.Fprint(o.Stdout, Usage())
		return f, timeline.ExitZero
	}
	format, ok := ff.Resolve(o)
	if !ok {
		return f, timeline.ExitUsage
	}
	f.jsonOut = format == "json"
	if fl.NArg() > 0 {
		o.Errorf("unexpected argument %q", fl.Arg(0))
		if near := say.DidYouMean(fl.Arg(0), Commands); near != "" && !strings.Contains(fl.Arg(0), "/") {
			o.Hintf("did you mean 'freeze %s'?", near)
		} else if !sayRunning(o, fl.Arg(0)) {
			o.Hintf("name the executable by its full path: freeze --path /abs/path/to/binary ('freeze census' shows what runs most)")
		}
		return f, timeline.ExitUsage
	}
	return f, -1
}

// check validates the flags that do not name targets: every conflict has
// its own message and a hint.
func (f Flags) check(o say.Out) (freeze.Method, int) {
	method, err := freeze.ParseMethod(f.method, f.revoke)
	switch {
	case errors.Is(err, freeze.ErrNoneNeedsRevoke):
		o.Errorf("%v", err)
		o.Hintf("add --revoke-exec (for a chain that execs at every hop), or use --method sigstop where no cgroup can be used")
		return "", timeline.ExitUsage
	case err != nil:
		o.Errorf("unknown --method %q", f.method)
		o.Hintf("use auto, bpf, cgroup2, cgroup1, sigstop, or none with --revoke-exec")
		return "", timeline.ExitUsage
	}
	for _, d := range f.disposable {
		if !filepath.IsAbs(d) {
			o.Errorf("--disposable %q is not absolute", d)
			o.Hintf("give the full path, for example --disposable %s", show.Shell(say.MustAbs(d)))
			return "", timeline.ExitUsage
		}
	}
	switch {
	case len(f.disposable) > 0 && !f.revoke:
		o.Errorf("--disposable only says where --revoke-exec may act")
		o.Hintf("add --revoke-exec, or drop --disposable")
	case f.rounds < 1:
		o.Errorf("--rounds %d: need at least 1", f.rounds)
	case f.timeout <= 0:
		o.Errorf("--timeout %v: need a positive duration such as 60s", f.timeout)
	case f.btf != "" && !filepath.IsAbs(f.btf):
		o.Errorf("--btf %q is not absolute", f.btf)
		o.Hintf("give the full path of a kernel BTF file, for example --btf /sys/kernel/btf/vmlinux")
	case f.hold && f.dryRun:
		o.Errorf("--hold and --dry-run together: a dry run changes nothing, so there is nothing to hold")
		o.Hintf("drop one of them")
	default:
		return method, 0
	}
	return "", timeline.ExitUsage
}

// spec validates the targets; a non-zero code means stop with it.
func (f Flags) spec(o say.Out) (match.Spec, int) {
	var spec match.Spec
	scope, members, code := f.scope(o)
	if code != 0 {
		return spec, code
	}
	if len(f.paths) == 0 && len(f.under) == 0 {
		o.Errorf("no target: name the runaway executable")
		o.Hintf("freeze --path /abs/path/to/binary; 'freeze census' shows what holds the machine and prints the command")
		return spec, timeline.ExitUsage
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
			o.Errorf("--uid %d: a user id is 0 or more", u)
			o.Hintf("name the chain's owner, as 'ps -o uid= -p PID' prints it")
			return spec, timeline.ExitUsage
		}
	}
	if f.cgroup != "" {
		g, code := cgroupScope(o, f.cgroup)
		if code != 0 {
			return spec, code
		}
		spec.Cgroup = g
	}
	spec.Args, spec.UIDs, spec.NoDescendants = f.args, f.uids, f.noDesc
	return spec, 0
}

// cgroupScope checks --cgroup: a group's directory under /sys/fs/cgroup
// (cgroup v2's, or a v1 hierarchy's), or its path as /proc/PID/cgroup
// gives it; it returns the latter.
func cgroupScope(o say.Out, g string) (string, int) {
	if !filepath.IsAbs(g) || strings.Contains(g, "/../") || strings.HasSuffix(g, "/..") {
		o.Errorf("--cgroup %q: give the group's absolute path", g)
		o.Hintf("as /proc/PID/cgroup shows it (/system.slice/app.service), or its directory (/sys/fs/cgroup/system.slice/app.service)")
		return "", timeline.ExitUsage
	}
	rel := filepath.Clean(g)
	if rel == "/sys/fs/cgroup" {
		rel = "/"
	} else if r, ok := strings.CutPrefix(rel, "/sys/fs/cgroup/"); ok {
		// A v1 hierarchy's directory (pids/, cpu,cpuacct/, unified/)
		// or v2's own.
		rel = "/" + r
		first, rest, _ := strings.Cut(r, "/")
		if isHierarchy(first) {
			rel = "/" + rest
		}
	}
	if rel == "/" {
		o.Errorf("--cgroup %s is the root group: it holds every process", g)
		o.Hintf("name the unit's, container's or test's own group")
		return "", timeline.ExitUsage
	}
	return rel, 0
}

// isHierarchy reports whether name is a cgroup v1 hierarchy's (or the
// hybrid layout's unified) mount directory under /sys/fs/cgroup.
func isHierarchy(name string) bool {
	_, err := os.Stat(filepath.Join("/sys/fs/cgroup", name, "cgroup.procs"))
	if err != nil {
		return false
	}
	var st unix.Statfs_t
	if unix.Statfs(filepath.Join("/sys/fs/cgroup", name), &st) != nil {
		return false
	}
	parent := unix.Statfs_t{}
	unix.Statfs("/sys/fs/cgroup", &parent)
	return st.Type != parent.Type || parent.Type == unix.TMPFS_MAGIC
}

// pathTarget resolves one --path to the file it names (or, deleted, the
// file its processes still run) and applies the refusals.
func (f Flags) pathTarget(o say.Out, p string) (match.Target, int) {
	t, err := match.Resolve(p)
	if err != nil && safedir.IsProcView(p) {
		o.Errorf("--path %s: %v", p, err)
		o.Hintf("the process is gone, or the path does not name a regular file in its root: list its processes again (ps, 'freeze census')")
		return t, timeline.ExitUsage
	}
	switch {
	case errors.Is(err, match.ErrRelative):
		o.Errorf("--path %q is not absolute", p)
		if !sayRunning(o, p) {
			o.PathHint("--path", p)
		}
		return t, timeline.ExitUsage
	case errors.Is(err, fs.ErrNotExist):
		// The test cache removed under its chain: the file is gone,
		// and its processes still run it.
		d, others, derr := match.ResolveDeletedFrom(proc.Default, f.tasks, p)
		if derr != nil && !errors.Is(derr, fs.ErrNotExist) {
			o.Errorf("--path %v", derr)
			return t, timeline.ExitUsage
		}
		if derr != nil {
			o.Errorf("--path %s: no such file, and no live process runs a deleted file of that name", p)
			if !sayRunning(o, p) {
				o.Hintf("check the path with ls -l %s; 'freeze census' shows what runs most", show.Shell(p))
			}
			return t, timeline.ExitUsage
		}
		o.Sayf("--path %s was deleted: matching the file its processes still run (device %d, inode %d)", p, d.File.Dev, d.File.Ino)
		if others > 0 {
			o.Warnf("%d other processes run an older deleted file of that path: not matched; run freeze again for them", others)
		}
		t = d
	case errors.Is(err, match.ErrNotRegular):
		o.Errorf("--path %v", err)
		o.Hintf("to match everything run from a directory, use --under %s", show.Shell(p))
		return t, timeline.ExitUsage
	case err != nil:
		o.Errorf("--path %s: %v", p, err)
		return t, timeline.ExitUsage
	}
	if t.Symlink {
		o.Sayf("--path %s is a symlink: matching the file it points to, %s", p, t.Path)
	}
	if t.View {
		o.Sayf("--path %s: matching the file that process sees there, as the kernel holds it (device %d, inode %d), not the same path on this host", p, t.File.Dev, t.File.Ino)
	}
	if r := match.Refuse(proc.Default, t, len(f.args) > 0, f.force); r != nil {
		o.Errorf("refused: %s", r.Rule)
		o.Hintf("%s", r.Hint)
		return t, timeline.ExitRefused
	}
	return t, 0
}

// underDir resolves one --under to the directory it names and applies
// the refusal of the machine's own program directories.
func (f Flags) underDir(o say.Out, d string) (string, int) {
	if !filepath.IsAbs(d) {
		o.Errorf("--under %q is not absolute", d)
		o.Hintf("give the full path, for example --under %s", show.Shell(say.MustAbs(d)))
		return "", timeline.ExitUsage
	}
	// Resolved, as a process's exe link reads: a symlinked --under
	// (current -> build-123) matched nothing before, and the
	// refusal below judged the unresolved text
	// (/proc/self/root/usr/bin passed it).
	real, err := filepath.EvalSymlinks(d)
	if err != nil {
		o.Errorf("--under %s: %v", d, err)
		o.Hintf("name the directory that holds the runaway executables")
		return "", timeline.ExitUsage
	}
	if st, err := os.Stat(real); err != nil || !st.IsDir() {
		o.Errorf("--under %s: not a directory", d)
		return "", timeline.ExitUsage
	}
	if real != filepath.Clean(d) {
		o.Sayf("--under %s is a symlink to %s: matching %s", d, real, real)
	}
	if freeze.SystemDir(real) && !f.force {
		o.Errorf("refused: --under %s would match the machine's own programs", real)
		o.Hintf("name the test cache that holds the chain, such as --under /tmp/TestX/cache, or add --force")
		return "", timeline.ExitRefused
	}
	return real, 0
}

// sayRunning names the executables live processes run whose file name is
// name's (a bare name, or a relative path's last element), with the
// command for each; false when none runs.
func sayRunning(o say.Out, name string) bool {
	running := match.RunningNamed(proc.Default, filepath.Base(name))
	for i, r := range running {
		if i == 5 {
			o.Hintf("... and %d more executables named %s", len(running)-5, filepath.Base(name))
			break
		}
		what := fmt.Sprintf("%d process", r.Count)
		if r.Count != 1 {
			what += "es"
		}
		if r.Deleted {
			what += ", of a file since deleted or replaced"
		}
		o.Hintf("running now: %s (%s): freeze --path %s", r.Path, what, show.Shell(r.Path))
	}
	return len(running) > 0
}
