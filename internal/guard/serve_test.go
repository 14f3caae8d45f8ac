package guard

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"freeze/internal/freeze"
	"freeze/internal/proc"
	"freeze/internal/say"
	"freeze/internal/stop"
	"freeze/internal/timeline"
)

// armed is a guard in a run directory of the test's own, serving with a
// Runner that records what it was handed and answers with a fixed
// result: the FIFO, the socket and the queue, without a run behind them.
type armed struct {
	g     *Guard
	dir   string
	mu    sync.Mutex
	asked [][]string
}

func arm(t *testing.T) *armed {
	t.Helper()
	return armWith(t, func(stdout, stderr io.Writer) {})
}

// armWith is arm with more output from each run: print writes it.
func armWith(t *testing.T, print func(stdout, stderr io.Writer)) *armed {
	t.Helper()
	a := &armed{dir: filepath.Join(t.TempDir(), "run")}
	g, err := Arm(Config{RunDir: a.dir, Say: func(string) {}, Run: func(_ context.Context, o say.Out, words []string, _ *proc.File, _ func() *freeze.Spare) stop.Report {
		stdout, stderr := o.Stdout, o.Stderr
		a.mu.Lock()
		a.asked = append(a.asked, words)
		a.mu.Unlock()
		fmt.Fprintf(stderr, "freeze: ran %d words\n", len(words))
		print(stdout, stderr)
		fmt.Fprintln(stdout, `{"outcome": "zero"}`)
		return stop.Report{Outcome: timeline.StepZero, Timeline: "/tmp/t.jsonl", Summary: timeline.HostRun{GateForks: 42}}
	}})
	if err != nil {
		t.Fatal(err)
	}
	a.g = g
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { g.Serve(ctx); close(done) }()
	t.Cleanup(func() {
		// Serve first: a request it is handling writes its answer (the
		// ack file, the log) until it returns, and Close after that.
		stop()
		<-done
		g.Close()
	})
	return a
}

func (a *armed) ran(words []string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.ContainsFunc(a.asked, func(w []string) bool { return slices.Equal(w, words) })
}

// A request over the socket reaches the runner as its words, its output
// comes back to the asker on the right stream, and its exit code with it;
// guard.log has the request with the result's counts.
func TestSocketRequestRunsAndAnswers(t *testing.T) {
	a := arm(t) // the socket takes root and the guard's own user: this test's
	words := []string{"--path", "/tmp/a tool", "--arg", ":(){ :|:& };:"}
	var stdout, stderr bytes.Buffer
	code, err := Ask(a.dir, words, &stdout, &stderr)
	if err != nil || code != 0 {
		t.Fatalf("Ask: exit %d, %v; stderr %q", code, err, stderr.String())
	}
	if !a.ran(words) {
		t.Fatalf("the runner was handed %q, want %q", a.asked, words)
	}
	if !strings.Contains(stdout.String(), `"outcome": "zero"`) || !strings.Contains(stderr.String(), "freeze: ran 4 words") {
		t.Errorf("stdout %q, stderr %q: each stream should come back on its own", stdout.String(), stderr.String())
	}
	e := waitLogged(t, a.dir, func(e logged) bool {
		return e.Event == "request" && e.request().Source == "socket"
	}).request()
	if e.Exit != 0 || e.Outcome != "zero" || e.GateForks != 42 {
		t.Errorf("guard.log: %v", e)
	}
}

// A line written into the FIFO is split as a shell would and run; a line
// that cannot be split is refused whole and logged, and runs nothing.
func TestFIFORequestsAreSplitOrRefused(t *testing.T) {
	a := arm(t)
	words := []string{"--path", "/tmp/it's here"}
	res, err := AskFIFO(a.dir, words, 10*time.Second)
	if err != nil || res.Code() != 0 || res.Outcome != "zero" {
		t.Fatalf("AskFIFO: %+v, %v", res, err)
	}
	if !a.ran(words) {
		t.Fatalf("the runner was handed %q, want %q", a.asked, words)
	}
	f, err := os.OpenFile(filepath.Join(a.dir, AskName), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("--path '/tmp/unterminated\n")
	f.Close()
	e := waitLogged(t, a.dir, func(e logged) bool {
		return e.Event == "refused" && e.refused().Source == "fifo"
	}).refused()
	if e.Exit != 2 || !strings.Contains(e.Error, "unterminated quote") {
		t.Errorf("the refusal logged: %v", e)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.asked) != 1 {
		t.Errorf("the runner ran %d requests, want the one that split: %q", len(a.asked), a.asked)
	}
}

// logged is one guard.log line as the tests read it: its Line, then the
// type its event is written as.
type logged struct {
	Line
	raw []byte
}

func (l logged) request() (r RequestLine) { json.Unmarshal(l.raw, &r); return r }
func (l logged) refused() (r RefusedLine) { json.Unmarshal(l.raw, &r); return r }
func (l logged) auto() (r AutoLine)       { json.Unmarshal(l.raw, &r); return r }
func (l logged) String() string           { return string(l.raw) }

// waitLogged waits for a guard.log line for which ok is true.
func waitLogged(t *testing.T, dir string, ok func(logged) bool) logged {
	t.Helper()
	return waitLoggedWithin(t, dir, 10*time.Second, ok)
}

func waitLoggedWithin(t *testing.T, dir string, within time.Duration, ok func(logged) bool) logged {
	t.Helper()
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		for _, e := range readLog(t, dir) {
			if ok(e) {
				return e
			}
		}
	}
	t.Fatalf("no such line in guard.log: %v", readLog(t, dir))
	return logged{}
}

func readLog(t *testing.T, dir string) []logged {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, LogName))
	if err != nil {
		return nil
	}
	var out []logged
	for _, line := range strings.Split(string(b), "\n") {
		l := logged{raw: []byte(line)}
		if json.Unmarshal(l.raw, &l.Line) == nil {
			out = append(out, l)
		}
	}
	return out
}

// A serving guard keeps a heartbeat (the time, in Unix seconds) that the
// runbook reads with builtins; a guard that stops cleanly removes it.
func TestHeartbeat(t *testing.T) {
	a := arm(t)
	path := filepath.Join(a.dir, HeartbeatName)
	var beat int64
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(path); err == nil {
			fmt.Sscan(string(b), &beat)
			break
		}
	}
	if now := time.Now().Unix(); beat < now-2 || beat > now {
		t.Fatalf("heartbeat %d, now %d", beat, now)
	}
	a.g.Close()
	if _, err := os.Stat(path); err == nil {
		t.Errorf("the heartbeat outlived a clean stop")
	}
}

// A socket peer that asks and then never reads (the first audit: no
// write deadline): the run prints far more than the socket buffers hold,
// and still ends, and is logged; the peer is dropped, not waited for.
func TestASocketPeerThatDoesNotReadHoldsNoRun(t *testing.T) {
	a := armWith(t, func(stdout, _ io.Writer) {
		line := strings.Repeat("x", 1000) + "\n"
		for i := 0; i < 2000; i++ { // 2 MB: ten times a socket's buffer
			io.WriteString(stdout, line)
		}
	})
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: filepath.Join(a.dir, SocketName), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(`{"args": ["--path", "/tmp/never-read"]}` + "\n")); err != nil {
		t.Fatal(err)
	}
	// Never read. The request must be logged done: one write's deadline
	// (2 s) and the rest of the output, not forever. 60 s: a bound for a
	// loaded machine (beside a CPU hog and other packages' chains it took
	// up to 26 s to write 8 MB line by line), not a speed.
	e := waitLoggedWithin(t, a.dir, 60*time.Second, func(e logged) bool {
		return e.Event == "request" && e.request().Source == "socket"
	}).request()
	if e.Exit != 0 {
		t.Errorf("guard.log: %v", e)
	}
}
