// Package guard is freeze's armed responder: a process that is already
// running, lifted and locked in memory, when a chain starts, so that the
// stop order does not have to win a fork and an exec against the chain
// before it can begin. It takes requests, each the words of a freeze
// command line, from a FIFO (which a shell that cannot fork can still
// write with a builtin) and from a unix socket (which 'freeze --path'
// hands over to), runs them one after another, and logs each.
//
// A request's words go to the stop order's command line (internal/order),
// the same code a freeze command line runs, and from there to incident;
// the guard keeps the run armed between requests (stop.Armed: a
// spare gate loaded ahead, memory locked, the kernel's types read). Run
// is the guard's whole life, from arming to its last metrics.
package guard

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/autopilot"
	"freeze/internal/freeze"
	"freeze/internal/proc"
	"freeze/internal/safedir"
	"freeze/internal/say"
	"freeze/internal/stop"
	"freeze/internal/timeline"
)

// Names inside the run directory.
const (
	AskName = "ask" // the FIFO: one request per line
	// AckName is the FIFO's answer, one line a shell's builtins read
	// (read -r l < ack): the last request's state, "TIME received LINE",
	// then "TIME running LINE", then "TIME done exit N OUTCOME LINE"
	// (a state followed at once by the next may never show). A
	// FIFO's writer learns nothing else: a request lost between the
	// writer and the queue went unnoticed (#34).
	AckName    = "ack"
	SocketName = "guard.sock" // the socket 'freeze --path' hands over to
	LogName    = "guard.log"  // one JSON line per start, request and census
	// HeartbeatName holds the time (Unix seconds) the guard last said it
	// is alive, every HeartbeatEvery: a FIFO left by a guard killed
	// outright has a stale heartbeat, or none. Read with builtins only:
	//   read -r beat < /run/freeze/heartbeat; printf -v now '%(%s)T' -1; echo $((now - beat))
	HeartbeatName = "heartbeat"
	lockName      = "guard.lock" // one guard per run directory
	stateName     = "guard.state"
)

// queueLen bounds the requests waiting for the worker: beyond it a
// request is refused as busy, so a flood cannot grow the guard's memory.
const queueLen = 64

// ExitBusy is the exit code of a request the guard refused because its
// queue was full: nothing ran. It used to be 0, so a playbook counted a
// refused hand-over as a contained chain.
const ExitBusy = 5

// Asked is one request as the guard hands it to its Runner.
type Asked struct {
	Words  []string // freeze's command-line arguments
	Source string   // fifo, socket or auto
	// Judged, for an automatic request, is the identity of the file the
	// guard judged: the run must find that same file at the path its
	// words name, or refuse (its owner could have swapped the path since).
	Judged *proc.File
}

// Runner runs one request's words; what the run says goes to o. judged
// is the file an automatic request judged (the words must still name
// it), spare hands the run the gate the guard loaded ahead (nil for
// none). freeze's own is the stop order's, order.Asked, which
// cmd/freeze gives the guard; a test gives its own.
type Runner func(ctx context.Context, o say.Out, words []string, judged *proc.File, spare func() *freeze.Spare) stop.Report

// Config arms a guard.
type Config struct {
	RunDir string
	// Run runs each request (freeze's own: order.Asked, with the spare
	// gate the request carries).
	Run Runner
	// Armed hands each request the spare gate, and readies the next
	// after it.
	Armed *stop.Armed
	// CapAuto, if set, is --auto-on-cap: the cap's refusals pull the
	// hold. Monitor (--auto-mode monitor) makes every automatic trigger
	// say what it would hold, and hold nothing.
	CapAuto *autopilot.Cap
	Monitor bool
	// Notify, if set, is the webhook's URL (--notify): a JSON document
	// per automatic action or would-be action.
	Notify string
	// After, if set, is called when a request has run (the metrics'
	// census).
	After func()
	// Say prints a line of the guard's own (its stderr, the journal).
	Say func(string)
	// Auto, if set, is the automatic mode (--auto N): Serve watches with it.
	Auto *autopilot.Growth
}

// Guard is an armed guard.
type Guard struct {
	c        Config
	lock     *os.File
	fifo     *os.File
	ln       *net.UnixListener
	log      *os.File
	logMu    sync.Mutex
	queue    chan request
	acks     *acker
	uid      int
	stats    stats
	brake    brake
	hook     *webhook
	Unclean  bool         // the previous guard of this directory did not stop cleanly
	lastBeat atomic.Int64 // Unix nanoseconds of the last heartbeat
	// Starts and UncleanStarts count the ledger's entries, this one
	// included.
	Starts, UncleanStarts int
}

type request struct {
	source string // "fifo" or "socket"
	uid    int    // the socket peer's; -1 for the FIFO (root's, mode 0600)
	pid    int
	line   string // as received, for the log (capped)
	words  []string
	judged *proc.File    // an automatic request's judged file
	err    error         // a request refused before it could run
	conn   *net.UnixConn // socket requests: where the output goes
	done   chan struct{}
	answer *answer // filled in before done closes, if set
}

// Arm makes the run directory (root's, mode 0700), takes its lock (one
// guard per directory), reads and writes the ledger, and opens the FIFO
// and the socket. Nothing is read until Serve.
func Arm(c Config) (*Guard, error) {
	g := &Guard{c: c, queue: make(chan request, queueLen), uid: os.Geteuid(), acks: newAcker(c.RunDir)}
	if err := os.MkdirAll(c.RunDir, 0o700); err != nil {
		return nil, fmt.Errorf("run directory: %w", err)
	}
	if err := checkDir(c.RunDir); err != nil {
		return nil, err
	}
	lock, err := safedir.Open(filepath.Join(c.RunDir, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		b, _ := os.ReadFile(lock.Name())
		lock.Close()
		return nil, fmt.Errorf("another guard holds %s (%s): stop it first", c.RunDir, strings.TrimSpace(string(b)))
	}
	lock.Truncate(0)
	fmt.Fprintf(lock, "pid %d\n", os.Getpid())
	g.lock = lock
	g.log, err = safedir.Open(filepath.Join(c.RunDir, LogName), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		// The guard still guards; it says it cannot keep its record.
		c.Say(fmt.Sprintf("warning: cannot write %s: %v; requests are not logged", LogName, err))
		g.log = nil
	}
	g.ledger()
	ask := filepath.Join(c.RunDir, AskName)
	if g.fifo, err = openFIFO(ask); err != nil {
		g.Close()
		return nil, err
	}
	sock := filepath.Join(c.RunDir, SocketName)
	os.Remove(sock)
	if g.ln, err = net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"}); err != nil {
		g.Close()
		return nil, fmt.Errorf("socket %s: %w", sock, err)
	}
	g.ln.SetUnlinkOnClose(true)
	os.Chmod(sock, 0o600)
	return g, nil
}

// openFIFO opens the guard's FIFO, reusing the one a guard that was
// killed left behind when it checks out (a FIFO of the guard's uid that
// no one else may open): an operator's echo into it, blocked since the
// old guard died, is then read by this one, where a new FIFO would leave
// that writer blocked on the unlinked one for ever (#24, finding 9).
// Anything else at the name is replaced. Opened for reading and writing,
// the FIFO never reads end-of-file when a writer closes, and the open
// does not wait for one.
func openFIFO(ask string) (*os.File, error) {
	// O_RDWR on a FIFO does not block (fifo(7)); Stat, not Fd, keeps
	// the file in the poller, so Close still ends a pending read.
	if f, err := safedir.OpenFIFO(ask, os.O_RDWR); err == nil {
		return f, nil
	}
	os.Remove(ask)
	if err := unix.Mkfifo(ask, 0o600); err != nil {
		return nil, fmt.Errorf("FIFO %s: %w", ask, err)
	}
	return safedir.OpenFIFO(ask, os.O_RDWR)
}

// checkDir refuses a run directory that others could write into, or
// could before the guard started (the third audit's S2: one made 0777
// was chmodded to 0700, and the links planted in it while it was open
// survived, so the ack's temporary file truncated a root 0600 file and
// guard.log was appended to another): the FIFO and the socket are the
// guard's door. One only others can read is made 0700, on its
// descriptor (a path chmodded by name can be swapped first).
func checkDir(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("run directory %s is not a directory (%v): remove it or choose another --run-dir", dir, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s belongs to uid %d, not to the guard's uid %d: remove it or choose another --run-dir", dir, st.Uid, os.Geteuid())
	}
	if st.Mode&0o022 != 0 {
		return fmt.Errorf("%s could be written by group or others (mode %#o): what they planted there (a link at the log, the ack, the lock) would take the guard's writes; remove it (and what is in it) and arm again, or choose another --run-dir", dir, st.Mode&0o7777)
	}
	if st.Mode&0o077 != 0 {
		return unix.Fchmod(fd, 0o700)
	}
	return nil
}

// Close stops listening, marks a clean stop in the ledger, and releases
// the directory. Call it once Serve has returned: a request Serve is
// handling writes its answer (the ack file, the log) until then.
func (g *Guard) Close() error {
	if g.ln != nil {
		g.ln.Close()
	}
	if g.fifo != nil {
		g.fifo.Close()
		os.Remove(g.fifo.Name())
	}
	g.acks.wait()
	os.Remove(filepath.Join(g.c.RunDir, HeartbeatName))
	if g.lock != nil {
		safedir.WriteFile(filepath.Join(g.c.RunDir, stateName), []byte(fmt.Sprintf("stopped %d\n", os.Getpid())), 0o600)
		g.record("stop", &LifeLine{PID: os.Getpid()})
		g.lock.Close()
	}
	if g.log != nil {
		g.log.Close()
	}
	return nil
}

// Serve reads requests until ctx ends, running them one after another,
// each with ctx: its end (the guard's SIGTERM) ends a run between two
// steps.
func (g *Guard) Serve(ctx context.Context) {
	stop := ctx.Done()
	if g.c.Notify != "" {
		g.hook = startWebhook(ctx, g.c.Notify, g.c.Say)
	}
	go g.readFIFO()
	go g.accept()
	// The heartbeat and the automatic mode end with stop, and Serve waits
	// for them: a heartbeat still being written after Serve returned was
	// renamed into place after Close removed it (seen as a run directory
	// that would not empty in a test under load).
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() { defer wg.Done(); g.heartbeat(stop) }()
	if g.c.Auto != nil {
		wg.Add(1)
		go func() { defer wg.Done(); g.watch(g.c.Auto, stop) }()
	}
	if g.c.CapAuto != nil {
		wg.Add(1)
		go func() { defer wg.Done(); g.watchCap(g.c.CapAuto, stop) }()
	}
	for {
		select {
		case <-stop:
			return
		case r := <-g.queue:
			g.handle(ctx, r)
		}
	}
}

// HeartbeatEvery is how often the guard writes its heartbeat.
const HeartbeatEvery = 5 * time.Second

// heartbeat writes the time to HeartbeatName now and every
// HeartbeatEvery until stop, whole (written, then renamed).
func (g *Guard) heartbeat(stop <-chan struct{}) {
	g.beat()
	every(HeartbeatEvery, stop, g.beat)
}

// beat writes the heartbeat: the time on its first line (read -r beat <
// heartbeat reads it alone), and a disarmed guard's why on a second.
func (g *Guard) beat() {
	g.lastBeat.Store(time.Now().UnixNano())
	s := strconv.FormatInt(time.Now().Unix(), 10) + "\n"
	if ok, why := g.brake.armed(); !ok {
		s += "auto: disarmed: " + why + "\n"
	}
	// Not made durable: a heartbeat means nothing once the guard is
	// gone, and an fsync every 5 s would wait on the disk, during an
	// incident too.
	safedir.WriteStatus(filepath.Join(g.c.RunDir, HeartbeatName), []byte(s), 0o600)
}

// Alive reports whether the guard's heartbeat is younger than three of
// its periods: what a liveness probe asks.
func (g *Guard) Alive() bool {
	last := g.lastBeat.Load()
	return last != 0 && time.Since(time.Unix(0, last)) < 3*HeartbeatEvery
}

// enqueue queues r, or refuses it when the queue is full.
func (g *Guard) enqueue(r request) {
	select {
	case g.queue <- r:
	default:
		r.err = errors.New("the guard is busy: too many requests waiting; nothing was run: run freeze --path ... yourself, or ask again")
		g.refuse(r, ExitBusy)
	}
}

func (g *Guard) readFIFO() {
	br := bufio.NewReaderSize(g.fifo, 4096)
	for {
		line, err := readLine(br)
		if errors.Is(err, os.ErrClosed) || errors.Is(err, io.EOF) {
			return
		}
		r := request{source: "fifo", uid: -1, line: capped(line)}
		if err == nil {
			r.words, err = Split(line)
		}
		if err != nil {
			r.err = err
			g.refuse(r, 2)
			continue
		}
		if len(r.words) == 0 {
			continue
		}
		g.acks.post("received", r.line)
		g.enqueue(r)
	}
}

// readLine reads one line; a line longer than MaxLine is read to its end
// and refused whole, so the next line starts clean.
func readLine(br *bufio.Reader) (string, error) {
	var b []byte
	long := false
	for {
		frag, err := br.ReadSlice('\n')
		if !long {
			b = append(b, frag...)
			if len(b) > MaxLine {
				long, b = true, b[:64]
			}
		}
		switch {
		case err == nil:
			if long {
				return string(b), ErrLong
			}
			return strings.TrimSuffix(string(b), "\n"), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return "", err
		}
	}
}

func capped(s string) string {
	if len(s) > 512 {
		return s[:512] + "..."
	}
	return s
}

func (g *Guard) accept() {
	for {
		conn, err := g.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		go g.takeConn(conn)
	}
}

// takeConn reads one request from a socket peer, after checking who it
// is: root, or the guard's own user. Anyone else is refused and logged.
func (g *Guard) takeConn(conn *net.UnixConn) {
	r := request{source: "socket", uid: -1, conn: conn, done: make(chan struct{})}
	defer func() { conn.Close() }()
	cred, err := peer(conn)
	if err != nil {
		r.err = fmt.Errorf("cannot read the peer's credentials: %w", err)
		g.refuse(r, 3)
		return
	}
	r.uid, r.pid = int(cred.Uid), int(cred.Pid)
	if r.uid != 0 && r.uid != g.uid {
		r.err = fmt.Errorf("uid %d may not ask this guard: only root or uid %d", r.uid, g.uid)
		g.refuse(r, 3)
		return
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var msg struct {
		Args []string `json:"args"`
	}
	if err := json.NewDecoder(io.LimitReader(conn, MaxLine)).Decode(&msg); err != nil {
		r.err = fmt.Errorf("unreadable request: %w", err)
		g.refuse(r, 2)
		return
	}
	conn.SetReadDeadline(time.Time{})
	r.words, r.line = msg.Args, capped(strings.Join(msg.Args, " "))
	g.enqueue(r)
	<-r.done
}

func peer(conn *net.UnixConn) (*unix.Ucred, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	err = raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err != nil {
		return nil, err
	}
	return cred, cerr
}

// handle runs one request and logs it.
func (g *Guard) handle(ctx context.Context, r request) {
	if r.done != nil {
		defer close(r.done)
	}
	stdout, stderr := io.Writer(prefixed{g.c.Say}), io.Writer(prefixed{g.c.Say})
	var ow, ew *lineWriter
	var pc *peerConn
	if r.conn != nil {
		pc = &peerConn{c: r.conn}
		ow, ew = &lineWriter{w: pc, tag: "1 "}, &lineWriter{w: pc, tag: "2 "}
		stdout, stderr = ow, ew
	}
	g.c.Say(fmt.Sprintf("request from %s (uid %d): %s", r.source, r.uid, r.line))
	if r.source == "fifo" {
		g.acks.post("running", r.line)
	}
	t0 := time.Now()
	if len(r.words) == 1 && r.words[0] == RearmWord && r.source == "fifo" {
		g.rearm(r)
		return
	}
	res := g.run(ctx, Asked{Words: r.words, Source: r.source, Judged: r.judged}, stdout, stderr)
	if r.source == "fifo" {
		g.acks.now(fmt.Sprintf("done exit %d %s", res.Code(), res.Outcome), r.line)
	}
	if r.conn != nil {
		ow.Flush()
		ew.Flush()
		fmt.Fprintf(pc, "exit %d\n", res.Code())
	}
	g.record("request", &RequestLine{Source: r.source, UID: r.uid, PID: r.pid, Request: r.words,
		Exit: res.Code(), Outcome: string(res.Outcome), Timeline: res.Timeline, TookMS: float64(time.Since(t0).Microseconds()) / 1000,
		ZeroMS: res.Summary.ZeroMS, GateForks: res.Summary.GateForks, GateExecs: res.Summary.GateExecs})
	g.stats.add(string(res.Outcome), res.Summary, time.Now())
	g.c.Say(fmt.Sprintf("request done: exit %d (%s)", res.Code(), res.Outcome))
	if r.answer != nil {
		*r.answer = answer{outcome: string(res.Outcome), timeline: res.Timeline, exit: res.Code()}
	}
}

// rearm is the FIFO's auto-rearm: the automatic triggers act again.
func (g *Guard) rearm(r request) {
	state := "armed already"
	if g.brake.rearm() {
		state = "re-armed"
		g.beat()
		g.c.Say("auto: re-armed by " + RearmWord + " (the FIFO)")
	}
	g.acks.now("done exit 0 "+state, r.line)
	g.record("request", &RequestLine{Source: r.source, UID: r.uid, Request: r.words, Outcome: state})
}

// run runs one request through the Runner, handing it the spare gate;
// then the guard readies itself for the next.
func (g *Guard) run(ctx context.Context, req Asked, stdout, stderr io.Writer) stop.Report {
	if g.c.Run == nil {
		return stop.Report{Outcome: timeline.StepFailed, Err: errors.New("this guard was armed with no runner")}
	}
	var spare func() *freeze.Spare
	if g.c.Armed != nil {
		spare = g.c.Armed.Take
	}
	rep := g.c.Run(ctx, say.Out{Stdout: stdout, Stderr: stderr}, req.Words, req.Judged, spare)
	if g.c.After != nil {
		g.c.After()
	}
	if g.c.Armed != nil {
		g.c.Armed.AfterRun() // a new spare and the collector, while idle
	}
	return rep
}

// refuse logs a request that was not run, and tells a socket peer.
func (g *Guard) refuse(r request, code int) {
	if r.conn != nil {
		fmt.Fprintf(&peerConn{c: r.conn}, "2 freeze: error: guard: %v\nexit %d\n", r.err, code)
	}
	if r.done != nil {
		close(r.done)
	}
	g.c.Say(fmt.Sprintf("refused a request from %s (uid %d): %v", r.source, r.uid, r.err))
	if r.source == "fifo" {
		g.acks.now(fmt.Sprintf("refused exit %d", code), r.line)
	}
	g.record("refused", &RefusedLine{Source: r.source, UID: r.uid, PID: r.pid, Text: r.line, Error: r.err.Error(), Exit: code})
}

// maxLogSize bounds guard.log: past it the log is renamed guard.log.1
// (replacing the one before) and a new one started, so that a guard
// armed for months, writing a census line a minute, does not fill its
// disk, and census, which reads the log whole, reads a bounded file.
var maxLogSize int64 = 16 << 20

// rotate starts a new log past maxLogSize. Called with logMu held.
func (g *Guard) rotate() {
	st, err := g.log.Stat()
	if err != nil || st.Size() < maxLogSize {
		return
	}
	path := filepath.Join(g.c.RunDir, LogName)
	if err := os.Rename(path, path+".1"); err != nil {
		return
	}
	f, err := safedir.Open(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return // keep writing to the renamed file rather than lose lines
	}
	g.log.Close()
	g.log = f
}

// Record appends a line of the command's own to the log: the armed
// line, the watcher's census and reaped runs.
func (g *Guard) Record(event string, v liner) { g.record(event, v) }

// peerWrite bounds one write to a socket peer: a peer that stops reading
// (the first audit: no write deadline) must not hold the run that prints
// to it, which is the stop order itself.
const peerWrite = 2 * time.Second

// peerConn writes to a socket peer, each write within peerWrite; once one
// does not finish in time the peer is dropped and the rest of the run's
// output goes only to the guard's log and stderr.
type peerConn struct {
	mu   sync.Mutex
	c    *net.UnixConn
	gone bool
}

func (p *peerConn) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone {
		return len(b), nil
	}
	p.c.SetWriteDeadline(time.Now().Add(peerWrite))
	if _, err := p.c.Write(b); err != nil {
		p.gone = true
	}
	return len(b), nil
}

// lineWriter sends what a run prints to a socket peer, one tagged line at
// a time ("1 " stdout, "2 " stderr).
type lineWriter struct {
	w   io.Writer
	tag string
	buf []byte
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	for {
		i := strings.IndexByte(string(l.buf), '\n')
		if i < 0 {
			break
		}
		io.WriteString(l.w, l.tag+string(l.buf[:i+1]))
		l.buf = l.buf[i+1:]
	}
	return len(p), nil
}

func (l *lineWriter) Flush() {
	if len(l.buf) > 0 {
		io.WriteString(l.w, l.tag+string(l.buf)+"\n")
		l.buf = nil
	}
}

// prefixed prints a run's lines through Say (the guard's stderr).
type prefixed struct{ say func(string) }

func (p prefixed) Write(b []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		p.say("  " + line)
	}
	return len(b), nil
}
