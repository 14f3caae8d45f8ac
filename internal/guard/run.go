package guard

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"freeze/internal/autopilot"
	"freeze/internal/interrupt"
	"freeze/internal/stop"
)

// Options are a guard's, as its command line gives them.
type Options struct {
	RunDir string
	// AutoN, if above 0, is the automatic mode (--auto N), with AutoKill
	// and AutoUnder. AutoOnCap is the cap's trigger (--auto-on-cap), with
	// the same; AutoMonitor makes both say what they would hold, and
	// hold nothing (--auto-mode monitor).
	AutoOnCap   bool
	AutoMonitor bool
	// Notify, if set, is the webhook's URL (--notify).
	Notify    string
	AutoN     int
	AutoKill  bool
	AutoUnder []string
	// AutoMethod, if set, is the method of both triggers' requests
	// (--auto-method).
	AutoMethod string
	// MetricsFile, if set, is kept current every MetricsEvery.
	MetricsFile  string
	MetricsEvery time.Duration
	// Health, if set, is the address of GET /healthz.
	Health string
	// Say prints a line of the guard's own (its stderr, the journal).
	Say func(string)
	// Run runs each request (see Config.Run).
	Run Runner
}

// OptionError is an option the guard could not start with: the words
// for it are the command's.
type OptionError struct {
	Option string // --auto, --metrics-file or --health
	Err    error
}

func (e *OptionError) Error() string { return e.Option + ": " + e.Err.Error() }
func (e *OptionError) Unwrap() error { return e.Err }

// Run is a guard's whole life: arm (the automatic mode, the lift, the
// run directory, the armed run), serve requests until ctx ends (the
// command's SIGTERM, SIGINT or SIGHUP) while keeping the metrics file
// and the health port, then disarm. An error is one it could not arm
// with (an *OptionError names the option).
func Run(ctx context.Context, opt Options) error {
	// The guard's own lines (its stderr: the journal) never hold a
	// request up: under a fork bomb journald is starved like everything
	// at ordinary priority, its stream fills, and a guard that waited to
	// say "request from" never ran the request (#34's unanswered one).
	out, flush := stop.Output{Note: opt.Say, Warn: opt.Say}.Detached()
	defer flush()
	opt.Say = out.Note
	var auto *autopilot.Growth
	if opt.AutoN > 0 {
		var err error
		if auto, err = autopilot.StartGrowth(opt.AutoN, opt.AutoKill, opt.AutoUnder); err != nil {
			return &OptionError{"--auto", err}
		}
		defer auto.Close()
		auto.Method = opt.AutoMethod
		opt.Say(fmt.Sprintf("auto: holding a chain of one executable over %d live processes that is its own ancestor %d deep and tries at least %d forks in %v%s; %s",
			opt.AutoN, autopilot.Depth, autopilot.Attempts, autopilot.Every, map[bool]string{true: "; killing it where the file is disposable (--auto-kill)", false: ""}[opt.AutoKill], auto.Scope()))
	}
	var capAuto *autopilot.Cap
	if opt.AutoOnCap {
		var err error
		if capAuto, err = autopilot.StartCap(opt.AutoKill, opt.AutoUnder); err != nil {
			return &OptionError{"--auto-on-cap", err}
		}
		defer capAuto.Close()
		capAuto.Method = opt.AutoMethod
		opt.Say(fmt.Sprintf("auto-on-cap: holding the chain of a pids group whose cap refuses a fork (%s): its executable with the most processes, when it is its own ancestor %d deep%s",
			capAuto.Reads(), autopilot.Depth, map[bool]string{true: "; killing it where the file is disposable (--auto-kill)", false: ""}[opt.AutoKill]))
	}
	if opt.AutoMonitor && (opt.AutoN > 0 || opt.AutoOnCap) {
		opt.Say("auto: monitor mode: each hold is said and counted (freeze_guard_auto_would_hold_total), and none is made")
	}
	raised := stop.Prepare(stop.Output{Warn: func(s string) { opt.Say("warning: " + s) }, Note: opt.Say})
	opt.Say("priority: " + strings.Join(raised, ", "))
	var w *Watcher
	c := Config{RunDir: opt.RunDir, Say: opt.Say, Run: opt.Run, Auto: auto, CapAuto: capAuto, Monitor: opt.AutoMonitor, Notify: opt.Notify, After: func() { w.Poke() }}
	g, err := Arm(c)
	if err != nil {
		return err
	}
	defer g.Close()
	armed := stop.Arm(opt.Say)
	defer armed.Close()
	g.c.Armed = armed
	g.Record("armed", &ArmedLine{Gate: armed.GateOK, GateWhy: armed.GateWhy, GateLoaded: armed.SpareLoaded(),
		Recorder: armed.Recording(), RecorderWhy: armed.RecorderWhy, PID: os.Getpid()})
	// The guard's run directory is where root's freeze runs keep their
	// state (runlock's directory, /run/freeze): it ends the runs whose
	// freeze was killed.
	w = NewWatcher(g, opt.MetricsFile, opt.MetricsEvery, opt.RunDir, opt.Say)
	return g.serveUntil(ctx, w, opt.Health)
}

// serveUntil serves until ctx ends, keeping the metrics file, and
// answers GET /healthz on health if it is set.
func (g *Guard) serveUntil(ctx context.Context, w *Watcher, health string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := ctx.Done()
	go func() {
		<-stop
		if c, ok := interrupt.Of(ctx); ok {
			g.c.Say("stopping on " + interrupt.Name(c.Signal))
		}
	}()
	if w.File != "" {
		if err := w.Write(true); err != nil {
			return &OptionError{"--metrics-file", err}
		}
	}
	if health != "" {
		ln, err := net.Listen("tcp", HealthAddr(health))
		if err != nil {
			return &OptionError{"--health", err}
		}
		srv := healthServer(g)
		go srv.Serve(limitListener(ln, healthConns))
		defer srv.Close()
	}
	w.Reaper.Tick()
	done := make(chan struct{})
	go func() { w.Run(stop); close(done) }()
	g.c.Say("armed")
	// Under a unit of Type=notify: ready only now, with the gate loaded
	// and the FIFO and the socket open; and the watchdog's pings.
	n := NewNotifier()
	defer n.Close()
	n.Send("READY=1\nSTATUS=armed")
	go n.Watchdog(stop)
	g.Serve(ctx)
	n.Send("STOPPING=1")
	<-done
	if w.File != "" {
		// Disarmed: say so, so an alert on freeze_guard_armed fires.
		w.Write(false)
	}
	return nil
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
func healthServer(g *Guard) *http.Server {
	return &http.Server{Handler: healthHandler(g), ReadHeaderTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second,
		WriteTimeout: 2 * time.Second, IdleTimeout: 2 * time.Second, MaxHeaderBytes: 4 << 10}
}

// HealthAddr is --health's address, on loopback when it names only a
// port (":9479" or "9479"): the port is for a local probe, and the
// guard's descriptors are not for the network to hold. An address
// given in full (the DaemonSet's pod IP) is taken as it is.
func HealthAddr(a string) string {
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
func healthHandler(g *Guard) http.Handler {
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
