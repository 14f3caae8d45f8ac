package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/pflag"

	"freeze/internal/guard"
	"freeze/internal/order"
	"freeze/internal/say"
)

type guardFlags struct {
	runDir       string
	autoN        int
	autoKill     bool
	autoOnCap    bool
	autoMode     string
	autoMethod   string
	notify       string
	autoUnder    []string
	metricsFile  string
	metricsEvery time.Duration
	health       string // ADDR for GET /healthz, "" for none
}

// runGuard is 'freeze guard': its flags, then the guard's whole life
// (guard.Run), and the words for what it could not arm with.
func runGuard(ctx context.Context, o out, args []string) int {
	f, code := parseGuardFlags(o, args)
	if code >= 0 {
		return code
	}
	err := guard.Run(ctx, guard.Options{RunDir: f.runDir, AutoN: f.autoN, AutoKill: f.autoKill, AutoUnder: f.autoUnder,
		AutoOnCap: f.autoOnCap, AutoMonitor: f.autoMode == "monitor", AutoMethod: f.autoMethod, Notify: f.notify,
		MetricsFile: f.metricsFile, MetricsEvery: f.metricsEvery, Health: f.health,
		Say: func(s string) { o.Sayf("guard: %s", s) },
		// Each request as freeze's command line would run it, in the
		// guard's process, with the spare gate it loaded ahead.
		Run: order.Asked})
	var oe *guard.OptionError
	switch {
	case err == nil:
		return exitZero
	case !errors.As(err, &oe):
		o.Errorf("guard: %v", err)
	case oe.Option == "--auto-on-cap":
		o.Errorf("guard: --auto-on-cap: %v", oe.Err)
		o.Hintf("run without --auto-on-cap, or on a host whose cgroups give the pids controller (cgroup v2 with pids enabled, or the v1 pids hierarchy)")
	case oe.Option == "--auto":
		o.Errorf("guard: --auto needs the gate's fork counter: %s", guard.ExplainAuto(oe.Err))
		o.Hintf("run without --auto: requests by the FIFO and the socket need no BPF")
	case oe.Option == "--metrics-file":
		o.Errorf("guard: --metrics-file: %v", oe.Err)
		o.Hintf("make the directory, or name a writable file in node_exporter's textfile directory")
		return exitUsage
	default:
		o.Errorf("guard: %s %s: %v", oe.Option, f.health, oe.Err)
		o.Hintf("choose a free port")
	}
	return exitRefused
}

// parseGuardFlags parses and checks the guard's flags; a code of -1 means
// go on.
func parseGuardFlags(o out, args []string) (guardFlags, int) {
	var f guardFlags
	fl := pflag.NewFlagSet("freeze guard", pflag.ContinueOnError)
	fl.SetOutput(io.Discard)
	fl.StringVar(&f.runDir, "run-dir", order.RunDir(), "")
	fl.IntVar(&f.autoN, "auto", 0, "")
	fl.BoolVar(&f.autoKill, "auto-kill", false, "")
	fl.BoolVar(&f.autoOnCap, "auto-on-cap", false, "")
	fl.StringVar(&f.autoMode, "auto-mode", "enforce", "")
	fl.StringVar(&f.autoMethod, "auto-method", "", "")
	fl.StringVar(&f.notify, "notify", "", "")
	fl.StringArrayVar(&f.autoUnder, "auto-under", nil, "")
	fl.StringVar(&f.metricsFile, "metrics-file", "", "")
	fl.DurationVar(&f.metricsEvery, "metrics-every", 15*time.Second, "")
	fl.StringVar(&f.health, "health", "", "")
	help := fl.BoolP("help", "h", false, "")
	if err := fl.Parse(args); err != nil {
		flagError(o, "guard", "", err)
		o.Hintf("see 'freeze guard --help'")
		return f, exitUsage
	}
	if *help {
		fmt.Fprint(o.Stdout, guardUsage)
		return f, exitZero
	}
	if fl.NArg() > 0 {
		o.Errorf("unexpected argument %q", fl.Arg(0))
		o.Hintf("freeze guard takes its requests from %s/%s and %s/%s, not from its command line", f.runDir, guard.AskName, f.runDir, guard.SocketName)
		return f, exitUsage
	}
	if f.runDir == "" {
		o.Errorf("--run-dir is empty")
		o.Hintf("name the guard's directory, for example --run-dir %s", order.DefaultRunDir)
		return f, exitUsage
	}
	return f, f.check(o)
}

// check says what is wrong with the flags, if anything: the usage exit
// code, else -1.
func (f guardFlags) check(o out) int {
	for _, d := range f.autoUnder {
		if !filepath.IsAbs(d) {
			o.Errorf("--auto-under %q is not absolute", d)
			o.Hintf("give the full path of the directory, for example --auto-under %s", say.MustAbs(d))
			return exitUsage
		}
	}
	if f.health != "" {
		if _, _, err := net.SplitHostPort(f.health); err != nil {
			o.Errorf("--health %q: %v", f.health, err)
			o.Hintf("give a host and a port, for example --health 0.0.0.0:9479 (a Kubernetes liveness probe) or --health 127.0.0.1:9479")
			return exitUsage
		}
	}
	switch {
	case f.metricsFile != "" && !filepath.IsAbs(f.metricsFile):
		o.Errorf("--metrics-file %q is not absolute", f.metricsFile)
		o.Hintf("give the full path in node_exporter's textfile directory, for example --metrics-file /var/lib/node_exporter/textfile_collector/freeze.prom")
	case f.metricsEvery < 5*time.Second || f.metricsEvery > time.Hour:
		o.Errorf("--metrics-every %v: choose between 5s and 1h", f.metricsEvery)
	case f.autoN < 0:
		o.Errorf("--auto %d: give the number of live processes of one executable above which a growing chain is held, such as 300", f.autoN)
	case f.autoKill && f.autoN == 0 && !f.autoOnCap:
		o.Errorf("--auto-kill goes with --auto N or --auto-on-cap: it says what an automatic hold may go on to do")
		o.Hintf("add --auto 300 (for example) or --auto-on-cap, or drop --auto-kill")
	case f.notify != "" && !webhookURL(f.notify):
		o.Errorf("--notify %q: give an http:// or https:// URL, such as http://127.0.0.1:2801/freeze (falcosidekick's, or a receiver of your own)", f.notify)
	case f.autoMode != "enforce" && f.autoMode != "monitor":
		o.Errorf("--auto-mode %q: use enforce (hold, the default) or monitor (say and count what would be held, hold nothing)", f.autoMode)
	case f.autoMethod != "" && !slices.Contains([]string{"auto", "bpf", "cgroup2", "cgroup1", "sigstop"}, f.autoMethod):
		o.Errorf("--auto-method %q: use auto (the default), bpf, cgroup2, cgroup1 or sigstop: the --method of each automatic request", f.autoMethod)
	case f.autoMethod != "" && f.autoN == 0 && !f.autoOnCap:
		o.Errorf("--auto-method goes with --auto N or --auto-on-cap: it is the method of their requests")
		o.Hintf("add --auto-on-cap (for example), or drop --auto-method")
	case f.autoMode == "monitor" && f.autoN == 0 && !f.autoOnCap:
		o.Errorf("--auto-mode monitor goes with --auto N or --auto-on-cap: it says how an automatic trigger acts")
		o.Hintf("add --auto-on-cap (for example), or drop --auto-mode")
	default:
		return -1
	}
	return exitUsage
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

DIR (default /run/freeze, or $FREEZE_RUN_DIR) is made the guard's own,
mode 0700; the socket takes root and the guard's own user only
(SO_PEERCRED). Requests run one after another, each with its own
timeline; DIR/guard.log has one JSON line per start (unclean=1 after a
guard that did not stop cleanly), request, refusal, and a census line a
minute.

Metrics: with --metrics-file PATH the guard takes a census every
--metrics-every (default 15s) and after each request, and writes it to
PATH in Prometheus' text format, as 'freeze census --format prometheus'
prints it, with its own: freeze_guard_armed (0 written when it stops),
freeze_guard_runs_total by outcome, freeze_last_run_time_to_zero_seconds
and freeze_gate_forks_refused_total. Point node_exporter's textfile
collector at PATH's directory; deploy/prometheus/freeze.rules.yml has
the alerts.

Runs left behind: a 'freeze run' that was itself killed (SIGKILL, the
OOM killer) leaves its group and a state file in DIR/runs. The guard
ends such runs, as 'freeze run --reap' would, when it arms and with each
census, and logs a "reaped" line for each.

Automatic mode (opt-in): with --auto N the guard holds a chain nobody
asked it to, when one executable (one file) has more than N live
processes, is its own ancestor three deep (a process of it whose parent
and grandparent run it too), and tries at least 20 forks in 20 ms
(counted in the kernel, refused or not). Holding is 'freeze --hold': growth
frozen, nothing killed, reversible. A server's pool (master and workers:
two deep), a recursive build (deep, but small) and a loop that runs a
tool many times (one at a time) are left alone. Never acted on: the
guard's own executable, PID 1's, daemons, shells and interpreters.

The cap's lever (opt-in): with --auto-on-cap the guard reads every pids
group's refusals (pids.events, every 100ms; no BPF needed). When a
group's cap (a unit's TasksMax, a container's --pids-limit, a pod's
limit, freeze run's --max-procs) refuses a fork, it holds the group's
chain: its executable with the most processes in the group, when it is
its own ancestor three deep, with the same refusals as --auto. The log's
auto-cap line names the limit that was hit (the group, pids.max, the
unit, container or pod, the refusals before and after). A group that
holds PID 1, the guard or an ancestor of it is never acted on; a chain
that refills its cap is held once.

The disarmer: after 3 automatic holds of distinct executables within 10
minutes the guard stops acting unasked (a pattern of the machine's own
work, more likely than three runaway chains): it says so on stderr, in
its log (auto-disarmed), its metrics (freeze_guard_auto_disarmed) and
the heartbeat's second line, and goes on answering requests. Re-arm it
with: echo auto-rearm > DIR/ask (or restart it).

The webhook: --notify URL POSTs one JSON document per automatic action
or would-be action (hold, would-hold, disarmed): the host, the chain,
its container or pod, the limit, the command, the outcome and the
timeline. Off the request path: a hanging receiver never delays a hold.

Monitor mode: --auto-mode monitor makes --auto and --auto-on-cap say
(and count, freeze_guard_auto_would_hold_total) the command each would
run, and run none: watch a week, then enforce.

Options:
        --run-dir DIR   where the FIFO, socket, log and ledger live
                        (default /run/freeze, or $FREEZE_RUN_DIR)
        --auto N        hold, unasked, a growing chain of over N processes
        --auto-on-cap   hold, unasked, the chain of a group whose process
                        cap refuses a fork
        --auto-mode M   enforce (default: hold) or monitor (say and count
                        what would be held, hold nothing)
        --auto-method M  the --method of each automatic request: auto
                        (the default), bpf, cgroup2, cgroup1 or sigstop;
                        cgroup2 holds a capped chain without the gate
        --notify URL    POST a JSON document per automatic action
        --auto-under DIR  with --auto or --auto-on-cap: only executables
                        under DIR (repeatable), such as the CI runners'
                        caches
        --auto-kill     with --auto: go on to kill, but only a file that
                        --revoke-exec would accept as disposable (under a
                        temporary or cache directory)
        --metrics-file PATH  keep PATH current with Prometheus metrics
                        (node_exporter's textfile collector), written
                        atomically
        --metrics-every D  how often (default 15s; 5s to 1h)
        --health ADDR   answer GET /healthz on ADDR (host:port, or a
                        port alone for 127.0.0.1): 200 while the
                        guard's heartbeat is fresh, for a liveness probe
                        that does not exec (Kubernetes); at most 8
                        connections at once (more are closed at once),
                        each cut off after 2s
    -h, --help          this text
`

// webhookURL reports whether s is an http or https URL with a host.
func webhookURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}
