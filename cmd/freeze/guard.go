package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"freeze/internal/guard"
	"freeze/internal/incident"
)

type guardFlags struct {
	runDir       string
	autoN        int
	autoKill     bool
	autoUnder    []string
	metricsFile  string
	metricsEvery time.Duration
	health       string // ADDR for GET /healthz, "" for none
}

// runGuard is 'freeze guard': arm, say so, then take requests until
// SIGTERM or SIGINT.
func runGuard(o out, args []string) int {
	f, code := parseGuardFlags(o, args)
	if code >= 0 {
		return code
	}
	say := func(s string) { o.sayf("guard: %s", s) }
	var auto *guard.Auto
	if f.autoN > 0 {
		var err error
		if auto, err = guard.StartAuto(f.autoN, f.autoKill, f.autoUnder); err != nil {
			o.errorf("guard: --auto needs the gate's fork counter: %s", guard.ExplainAuto(err))
			o.hintf("run without --auto: requests by the FIFO and the socket need no BPF")
			return exitRefused
		}
		defer auto.Close()
		say(fmt.Sprintf("auto: holding a chain of one executable over %d live processes that is its own ancestor %d deep and tries at least %d forks in %v%s",
			f.autoN, guard.AutoDepth, guard.AutoAttempts, guard.AutoEvery, map[bool]string{true: "; killing it where the file is disposable (--auto-kill)", false: ""}[f.autoKill]))
	}
	raised := incident.Prepare(o.incident())
	say("priority: " + strings.Join(raised, ", "))
	var (
		res *guard.Resident
		w   *guard.Watcher
	)
	g, err := guard.Arm(guard.Config{RunDir: f.runDir, Say: say, Auto: auto, Run: func(req guard.Asked, stdout, stderr io.Writer) guard.Result {
		r := guardRequest(out{stdout, stderr}, req, res)
		w.Poke()       // the metrics say what the run came to
		res.AfterRun() // a new spare and the collector, while idle
		return r
	}})
	if err != nil {
		o.errorf("guard: %v", err)
		return exitRefused
	}
	defer g.Close()
	res = guard.NewResident(say)
	defer res.Close()
	g.Record("armed", res.Armed())
	// The guard's run directory is where root's freeze runs keep their
	// state (runlock's directory, /run/freeze): it ends the runs whose
	// freeze was killed.
	w = guard.NewWatcher(g, f.metricsFile, f.metricsEvery, f.runDir, say)
	return serveGuard(o, g, w, f.health, say)
}

// serveGuard serves until SIGTERM or SIGINT, keeping the metrics file,
// and answers GET /healthz on health if it is set.
func serveGuard(o out, g *guard.Guard, w *guard.Watcher, health string, say func(string)) int {
	stop := make(chan struct{})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		s := <-sig
		say("stopping on " + s.String())
		close(stop)
	}()
	if w.File != "" {
		if err := w.Write(true); err != nil {
			o.errorf("guard: --metrics-file: %v", err)
			o.hintf("make the directory, or name a writable file in node_exporter's textfile directory")
			return exitUsage
		}
	}
	if health != "" {
		ln, err := net.Listen("tcp", healthAddr(health))
		if err != nil {
			o.errorf("guard: --health %s: %v", health, err)
			o.hintf("choose a free port")
			return exitRefused
		}
		srv := healthServer(g)
		go srv.Serve(limitListener(ln, healthConns))
		defer srv.Close()
	}
	w.Reap()
	done := make(chan struct{})
	go func() { w.Run(stop); close(done) }()
	fmt.Fprintln(o.stderr, "freeze: guard: armed")
	// Under a unit of Type=notify: ready only now, with the gate loaded
	// and the FIFO and the socket open; and the watchdog's pings.
	n := guard.NewNotifier()
	defer n.Close()
	n.Send("READY=1\nSTATUS=armed")
	go n.Watchdog(stop)
	g.Serve(stop)
	n.Send("STOPPING=1")
	<-done
	if w.File != "" {
		// Disarmed: say so, so an alert on freeze_guard_armed fires.
		w.Write(false)
	}
	return exitZero
}

// healthConns bounds the health port's open connections: each is a
// descriptor of the guard's, and 20,000 idle ones took it to its
// descriptor limit, where a request then ran without its run lock or its
// gate ("too many open files"). A probe needs one; a connection past the
// bound is closed as soon as it is accepted, so a flood neither holds
// the guard's descriptors nor queues the probe behind it.
const healthConns = 8

// healthServer is the health port's server, every phase of a connection
// bounded: a client that sends nothing, reads nothing, or keeps its
// connection open is cut off within seconds (a probe takes milliseconds).
func healthServer(g *guard.Guard) *http.Server {
	return &http.Server{Handler: healthHandler(g), ReadHeaderTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second,
		WriteTimeout: 2 * time.Second, IdleTimeout: 2 * time.Second, MaxHeaderBytes: 4 << 10}
}

// healthAddr is --health's address, on loopback when it names only a
// port (":9479" or "9479"): the port is for a local probe, and the
// guard's descriptors are not for the network to hold. An address
// given in full (the DaemonSet's pod IP) is taken as it is.
func healthAddr(a string) string {
	if !strings.Contains(a, ":") {
		return "127.0.0.1:" + a
	}
	if strings.HasPrefix(a, ":") {
		return "127.0.0.1" + a
	}
	return a
}

// limitListener keeps at most n connections open at once (as
// golang.org/x/net/netutil's LimitListener, which this module does not
// otherwise need, but shedding rather than waiting): a connection past
// the bound is closed at once.
func limitListener(l net.Listener, n int) net.Listener {
	return &limited{Listener: l, slots: make(chan struct{}, n)}
}

type limited struct {
	net.Listener
	slots chan struct{}
}

func (l *limited) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &slotConn{Conn: c, free: func() { <-l.slots }}, nil
		default:
			c.Close()
		}
	}
}

type slotConn struct {
	net.Conn
	once sync.Once
	free func()
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.free)
	return err
}

// healthHandler answers a liveness probe that does not exec (Kubernetes'
// httpGet): 200 "armed" while the guard's heartbeat is fresh, else 503.
func healthHandler(g *guard.Guard) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(rw http.ResponseWriter, _ *http.Request) {
		if !g.Alive() {
			http.Error(rw, "the guard's heartbeat is stale", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(rw, "armed")
	})
	return mux
}

// parseGuardFlags parses and checks the guard's flags; a code of -1 means
// go on.
func parseGuardFlags(o out, args []string) (guardFlags, int) {
	var f guardFlags
	fl := pflag.NewFlagSet("freeze guard", pflag.ContinueOnError)
	fl.SetOutput(io.Discard)
	fl.StringVar(&f.runDir, "run-dir", guard.DefaultRunDir, "")
	fl.IntVar(&f.autoN, "auto", 0, "")
	fl.BoolVar(&f.autoKill, "auto-kill", false, "")
	fl.StringArrayVar(&f.autoUnder, "auto-under", nil, "")
	fl.StringVar(&f.metricsFile, "metrics-file", "", "")
	fl.DurationVar(&f.metricsEvery, "metrics-every", 15*time.Second, "")
	fl.StringVar(&f.health, "health", "", "")
	help := fl.BoolP("help", "h", false, "")
	if err := fl.Parse(args); err != nil {
		o.flagError("", err)
		o.hintf("see 'freeze guard --help'")
		return f, exitUsage
	}
	if *help {
		fmt.Fprint(o.stdout, guardUsage)
		return f, exitZero
	}
	if fl.NArg() > 0 {
		o.errorf("unexpected argument %q", fl.Arg(0))
		o.hintf("freeze guard takes its requests from %s/%s and %s/%s, not from its command line", f.runDir, guard.AskName, f.runDir, guard.SocketName)
		return f, exitUsage
	}
	if f.runDir == "" {
		o.errorf("--run-dir is empty")
		o.hintf("name the guard's directory, for example --run-dir %s", guard.DefaultRunDir)
		return f, exitUsage
	}
	for _, d := range f.autoUnder {
		if !filepath.IsAbs(d) {
			o.errorf("--auto-under %q is not absolute", d)
			o.hintf("give the full path of the directory, for example --auto-under %s", mustAbs(d))
			return f, exitUsage
		}
	}
	if f.health != "" {
		if _, _, err := net.SplitHostPort(f.health); err != nil {
			o.errorf("--health %q: %v", f.health, err)
			o.hintf("give a host and a port, for example --health 0.0.0.0:9479 (a Kubernetes liveness probe) or --health 127.0.0.1:9479")
			return f, exitUsage
		}
	}
	switch {
	case f.metricsFile != "" && !filepath.IsAbs(f.metricsFile):
		o.errorf("--metrics-file %q is not absolute", f.metricsFile)
		o.hintf("give the full path in node_exporter's textfile directory, for example --metrics-file /var/lib/node_exporter/textfile_collector/freeze.prom")
	case f.metricsEvery < 5*time.Second || f.metricsEvery > time.Hour:
		o.errorf("--metrics-every %v: choose between 5s and 1h", f.metricsEvery)
	case f.autoN < 0:
		o.errorf("--auto %d: give the number of live processes of one executable above which a growing chain is held, such as 300", f.autoN)
	case f.autoKill && f.autoN == 0:
		o.errorf("--auto-kill goes with --auto N: it says what an automatic hold may go on to do")
		o.hintf("add --auto 300 (for example), or drop --auto-kill")
	default:
		return f, -1
	}
	return f, exitUsage
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
        --health ADDR   answer GET /healthz on ADDR (host:port, or a
                        port alone for 127.0.0.1): 200 while the
                        guard's heartbeat is fresh, for a liveness probe
                        that does not exec (Kubernetes); at most 8
                        connections at once (more are closed at once),
                        each cut off after 2s
    -h, --help          this text
`
