package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"freeze/internal/census"
	"freeze/internal/gate"
	"freeze/internal/guard"
	"freeze/internal/metrics"
	"freeze/internal/proc"
)

// censusEvery is how often the guard logs one census line: after an
// incident, the lines before it show what the process table looked like
// before the chain took over.
const censusEvery = time.Minute

// runGuard is 'freeze guard': arm, say so, then take requests until
// SIGTERM or SIGINT.
func runGuard(o out, args []string) int {
	fl := pflag.NewFlagSet("freeze guard", pflag.ContinueOnError)
	fl.SetOutput(io.Discard)
	runDir := fl.String("run-dir", guard.DefaultRunDir, "")
	autoN := fl.Int("auto", 0, "")
	autoKill := fl.Bool("auto-kill", false, "")
	autoUnder := fl.StringArray("auto-under", nil, "")
	metricsFile := fl.String("metrics-file", "", "")
	metricsEvery := fl.Duration("metrics-every", 15*time.Second, "")
	help := fl.BoolP("help", "h", false, "")
	if err := fl.Parse(args); err != nil {
		o.errorf("%v", err)
		o.hintf("see 'freeze guard --help'")
		return exitUsage
	}
	if *help {
		fmt.Fprint(o.stdout, guardUsage)
		return exitZero
	}
	if fl.NArg() > 0 {
		o.errorf("unexpected argument %q", fl.Arg(0))
		o.hintf("freeze guard takes its requests from %s/%s and %s/%s, not from its command line", *runDir, guard.AskName, *runDir, guard.SocketName)
		return exitUsage
	}
	switch {
	case *metricsFile != "" && !filepath.IsAbs(*metricsFile):
		o.errorf("--metrics-file %q is not absolute", *metricsFile)
		o.hintf("give the full path in node_exporter's textfile directory, for example --metrics-file /var/lib/node_exporter/textfile_collector/freeze.prom")
		return exitUsage
	case *metricsEvery < 5*time.Second || *metricsEvery > time.Hour:
		o.errorf("--metrics-every %v: choose between 5s and 1h", *metricsEvery)
		return exitUsage
	case *autoN < 0:
		o.errorf("--auto %d: give the number of live processes of one executable above which a growing chain is held, such as 300", *autoN)
		return exitUsage
	case *autoKill && *autoN == 0:
		o.errorf("--auto-kill goes with --auto N: it says what an automatic hold may go on to do")
		o.hintf("add --auto 300 (for example), or drop --auto-kill")
		return exitUsage
	}
	say := func(s string) { o.sayf("guard: %s", s) }
	var auto *guard.Auto
	if *autoN > 0 {
		var err error
		for _, d := range *autoUnder {
			if !filepath.IsAbs(d) {
				o.errorf("--auto-under %q is not absolute", d)
				return exitUsage
			}
		}
		if auto, err = guard.StartAuto(*autoN, *autoKill, *autoUnder); err != nil {
			o.errorf("guard: --auto needs the gate's fork counter: %s", gate.Explain(err))
			o.hintf("run without --auto: requests by the FIFO and the socket need no BPF")
			return exitRefused
		}
		defer auto.Close()
		say(fmt.Sprintf("auto: holding a chain of one executable over %d live processes that is its own ancestor %d deep and tries at least %d forks in %v%s",
			*autoN, 3, guard.AutoAttempts, guard.AutoEvery, map[bool]string{true: "; killing it where the file is disposable (--auto-kill)", false: ""}[*autoKill]))
	}
	raised, err := raise()
	if err != nil && len(raised) == 0 {
		o.warnf("guard: %v", err)
	}
	say("priority: " + strings.Join(raised, ", "))
	w := &watcher{file: *metricsFile, every: *metricsEvery, say: say, poke: make(chan struct{}, 1)}
	g, err := guard.Arm(guard.Config{RunDir: *runDir, Say: say, Auto: auto, Run: func(words []string, stdout, stderr io.Writer) guard.Result {
		if rel := relativeTimeline(words); rel != "" {
			// The guard cannot know the asker's directory (a FIFO
			// request has none): a relative path would land in the
			// guard's own.
			o := out{stdout, stderr}
			o.errorf("--timeline %s is relative: the guard does not know your directory", rel)
			o.hintf("give an absolute path, for example --timeline /var/tmp/freeze/incident.jsonl")
			return guard.Result{Code: exitUsage, Outcome: "usage"}
		}
		res := runLocal(out{stdout, stderr}, words)
		select {
		case w.poke <- struct{}{}: // the metrics say what the run came to
		default:
		}
		loadSpare() // for the next request, while idle
		// A run turns the collector off; the guard lives on.
		debug.SetGCPercent(100)
		runtime.GC()
		return res
	}})
	if err != nil {
		o.errorf("guard: %v", err)
		return exitRefused
	}
	defer g.Close()
	defer func() {
		if spareGate != nil {
			spareGate.Close()
		}
	}()
	arm(g, say)
	stop := make(chan struct{})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		s := <-sig
		say("stopping on " + s.String())
		close(stop)
	}()
	w.g = g
	if w.file != "" {
		if err := w.write(true); err != nil {
			o.errorf("guard: --metrics-file: %v", err)
			o.hintf("make the directory, or name a writable file in node_exporter's textfile directory")
			return exitUsage
		}
	}
	done := make(chan struct{})
	go func() { w.run(stop); close(done) }()
	fmt.Fprintln(o.stderr, "freeze: guard: armed")
	g.Serve(stop)
	<-done
	if w.file != "" {
		// Disarmed: say so, so an alert on freeze_guard_armed fires.
		w.write(false)
	}
	return exitZero
}

// arm does what a run would otherwise do after it starts: the memory is
// faulted in and locked, and the gate's programs are loaded once, which
// also reads the kernel's types (kept for every later load).
func arm(g *guard.Guard, say func(string)) {
	debug.SetGCPercent(100)
	if err := unix.Mlockall(unix.MCL_CURRENT | unix.MCL_FUTURE | unix.MCL_ONFAULT); err != nil {
		say(fmt.Sprintf("warning: mlockall: %v; the guard's memory may be paged out", err))
	}
	k := gate.Probe("")
	say(fmt.Sprintf("gate: %s: %s", map[bool]string{true: "loads", false: "not available"}[k[0].OK], k[0].Why))
	if k[0].OK {
		loadSpare()
	}
	g.Record("armed", map[string]any{"gate": k[0].OK, "gate_why": k[0].Why, "gate_loaded": spareGate != nil, "pid": os.Getpid()})
}

// spareGate is a gate the guard loaded before it was asked: a request
// fills and attaches it (microseconds and a millisecond) instead of
// loading one. Requests run one at a time, so one spare is enough.
var spareGate *gate.Gate

// loadSpare loads a spare gate if there is none; without one, a request
// loads its own.
func loadSpare() {
	if spareGate != nil {
		return
	}
	if g, err := gate.Load(gate.Config{}); err == nil {
		g.LoadExtras()
		spareGate = g
	}
}

// takeSpare hands the spare gate to a run, which owns it from then on.
func takeSpare() *gate.Gate {
	g := spareGate
	spareGate = nil
	return g
}

// watcher takes a census every 'every' when the guard keeps a metrics
// file (else once a minute), writes the file, and logs one census line a
// minute: after an incident, the lines before it show what the process
// table looked like before the chain took over.
type watcher struct {
	g       *guard.Guard
	file    string
	every   time.Duration
	say     func(string)
	poke    chan struct{} // a request ended
	lastLog time.Time
	failed  bool
}

func (w *watcher) run(stop <-chan struct{}) {
	every := censusEvery
	if w.file != "" {
		every = w.every
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		case <-w.poke:
			if w.file == "" {
				continue
			}
		}
		w.write(true)
	}
}

// write takes a census, logs it if a minute has passed since the last
// line, and writes the metrics file, if any, with armed as given.
func (w *watcher) write(armed bool) error {
	sample := time.Second
	if !armed {
		sample = time.Millisecond // stopping: do not hold the stop up
	}
	r, err := census.Take(proc.Default, sample, 10)
	if err != nil {
		return err
	}
	if armed && time.Since(w.lastLog) >= censusEvery {
		w.lastLog = time.Now()
		var top []map[string]any
		for _, row := range r.Rows[:min(5, len(r.Rows))] {
			top = append(top, map[string]any{"exe": row.Exe, "count": row.Count, "orphaned": row.Orphaned, "appeared": row.Appeared, "vanished": row.Vanished, "suspect": row.Suspect})
		}
		w.g.Record("census", map[string]any{"processes": r.Total, "load": r.Load, "pid_space": r.PidLine, "top": top})
	}
	if w.file == "" {
		return nil
	}
	st := w.g.Stats()
	st.Armed = armed
	err = metrics.WriteFile(w.file, r, guardMetrics(st))
	// Said once when it starts failing and once when it works again, not
	// every 15 seconds.
	if (err != nil) != w.failed {
		w.failed = err != nil
		if err != nil {
			w.say(fmt.Sprintf("warning: metrics file %s: %v", w.file, err))
		} else {
			w.say("metrics file " + w.file + " is written again")
		}
	}
	return err
}

const guardUsage = `Usage:
    freeze guard [--run-dir DIR]

freeze guard is an armed responder: it runs in the foreground (for
systemd), lifted and locked in memory, with the BPF gate's programs
loaded once, and prints "freeze: guard: armed" when it is ready. Then a
request costs no fork and no exec:

    echo "--path /abs/path/to/binary" > /run/freeze/ask   # a shell builtin
    freeze --path /abs/path/to/binary                     # hands over

Each line written to DIR/ask is one request, with the same flags as
freeze's command line, split into words as a shell would split them
(quotes honoured, nothing expanded, never run by a shell). freeze --path
... hands its request to a running guard over DIR/guard.sock and prints
the guard's progress and exit code; --no-guard runs it locally.

DIR (default /run/freeze) is made the guard's own, mode 0700; the socket
takes root and the guard's own user only (SO_PEERCRED). Requests run one
after another, each with its own timeline; DIR/guard.log has one JSON
line per start (unclean=1 after a guard that did not stop cleanly),
request, refusal, and a census line a minute.

Metrics: with --metrics-file PATH the guard takes a census every
--metrics-every (default 15s) and after each request, and writes it to
PATH in Prometheus' text format, as 'freeze census --format prometheus'
prints it, with its own: freeze_guard_armed (0 written when it stops),
freeze_guard_runs_total by outcome, freeze_last_run_time_to_zero_seconds
and freeze_gate_forks_refused_total. Point node_exporter's textfile
collector at PATH's directory; deploy/prometheus/freeze.rules.yml has
the alerts.

Automatic mode (opt-in): with --auto N the guard holds a chain nobody
asked it to, when one executable (one file) has more than N live
processes, is its own ancestor three deep (a process of it whose parent
and grandparent run it too), and tries at least 20 forks in 20 ms
(counted in the kernel, refused or not). Holding is 'freeze --hold': growth
frozen, nothing killed, reversible. A server's pool (master and workers:
two deep), a recursive build (deep, but small) and a loop that runs a
tool many times (one at a time) are left alone. Never acted on: the
guard's own executable, PID 1's, daemons, shells and interpreters.

Options:
        --run-dir DIR   where the FIFO, socket, log and ledger live
        --auto N        hold, unasked, a growing chain of over N processes
        --auto-under DIR  with --auto: only executables under DIR
                        (repeatable), such as the CI runners' caches
        --auto-kill     with --auto: go on to kill, but only a file that
                        --revoke-exec would accept as disposable (under a
                        temporary or cache directory)
        --metrics-file PATH  keep PATH current with Prometheus metrics
                        (node_exporter's textfile collector), written
                        atomically
        --metrics-every D  how often (default 15s; 5s to 1h)
    -h, --help          this text
`

// relativeTimeline returns a request's --timeline when it is relative.
func relativeTimeline(words []string) string {
	f, code := parseStopFlags(out{io.Discard, io.Discard}, words)
	if code >= 0 || f.timeline == "" || filepath.IsAbs(f.timeline) {
		return ""
	}
	return f.timeline
}
