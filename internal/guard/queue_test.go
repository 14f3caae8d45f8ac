package guard

import (
	"bufio"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"freeze/internal/freeze"
	"freeze/internal/proc"
	"freeze/internal/say"
	"freeze/internal/stop"
	"freeze/internal/timeline"
)

// A request the guard cannot queue is refused with ExitBusy, not 0: a
// caller (the CLI, Ansible) must not count a hand-over that ran nothing
// as a contained chain (#24, finding 9).
func TestBusyRefusalIsNotSuccess(t *testing.T) {
	g := &Guard{c: Config{Say: func(string) {}}, queue: make(chan request, 1)}
	g.enqueue(request{source: "socket", words: []string{"--path", "/x"}}) // fills the queue
	a, b, err := socketPair(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	done := make(chan struct{})
	g.enqueue(request{source: "socket", words: []string{"--path", "/y"}, conn: a, done: done})
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the refused request was never answered")
	}
	a.CloseWrite()
	var last string
	sc := bufio.NewScanner(b)
	for sc.Scan() {
		last = sc.Text()
	}
	if want := "exit 5"; last != want {
		t.Fatalf("the peer read %q last, want %q", last, want)
	}
}

func socketPair(dir string) (*net.UnixConn, *net.UnixConn, error) {
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: dir + "/s", Net: "unix"})
	if err != nil {
		return nil, nil, err
	}
	defer l.Close()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: dir + "/s", Net: "unix"})
	if err != nil {
		return nil, nil, err
	}
	s, err := l.AcceptUnix()
	return s, c, err
}

// guard.log is rotated past its size: the lines go on in a new file and
// the one before is kept as guard.log.1 (#24, finding 9: it grew for
// ever, and census read it whole).
func TestLogRotatesPastItsSize(t *testing.T) {
	dir := t.TempDir()
	log, err := os.OpenFile(filepath.Join(dir, LogName), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer func(n int64) { maxLogSize = n }(maxLogSize)
	maxLogSize = 4096
	g := &Guard{c: Config{RunDir: dir, Say: func(string) {}}, log: log}
	for i := 0; i < 200; i++ {
		g.Record("census", &CensusLine{Processes: i, PidSpace: strings.Repeat("x", 64)})
	}
	g.log.Close()
	cur, err := os.Stat(filepath.Join(dir, LogName))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, LogName+".1")); err != nil {
		t.Fatalf("no guard.log.1 after %d bytes of lines: %v", 200*90, err)
	}
	if cur.Size() > 4096+200 {
		t.Errorf("guard.log is %d bytes, past its bound of 4096 by more than a line", cur.Size())
	}
	b, _ := os.ReadFile(filepath.Join(dir, LogName))
	if !strings.Contains(string(b), `"processes":199`) {
		t.Errorf("the last line is not in the current log")
	}
}

// A guard killed with its FIFO in place leaves an operator's echo into
// it blocked; the next guard reuses that FIFO, so the blocked request is
// read and run (#24, finding 9: the next guard made a new FIFO, and the
// writer stayed blocked on the unlinked one for ever).
func TestARestartedGuardServesTheBlockedWriter(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	got := make(chan []string, 1)
	cfg := Config{RunDir: dir, Say: func(string) {}, Run: func(_ context.Context, o say.Out, words []string, _ *proc.File, _ func() *freeze.Spare) stop.Report {
		got <- words
		return stop.Report{Outcome: timeline.StepZero}
	}}
	g, err := Arm(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Killed: its descriptors go, nothing is cleaned up.
	g.fifo.Close()
	g.ln.Close()
	g.lock.Close()
	if g.log != nil {
		g.log.Close()
	}
	written := make(chan error, 1)
	go func() { // the operator: echo --path /tmp/x/tool > ask
		f, err := os.OpenFile(filepath.Join(dir, AskName), os.O_WRONLY, 0)
		if err == nil {
			_, err = f.WriteString("--path /tmp/x/tool\n")
			f.Close()
		}
		written <- err
	}()
	time.Sleep(100 * time.Millisecond) // the writer is blocked in open
	g2, err := Arm(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan struct{})
	// Serve returns once the request it handles has written its answer
	// (the ack file, the log); Close after that, or an answer written
	// late kept the run directory from being removed (seen once in CI).
	defer func() { stop(); <-served; g2.Close() }()
	go func() { g2.Serve(ctx); close(served) }()
	select {
	case words := <-got:
		if strings.Join(words, " ") != "--path /tmp/x/tool" {
			t.Fatalf("the restarted guard ran %q", words)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the blocked writer's request was not run by the restarted guard in 10s")
	}
	if err := <-written; err != nil {
		t.Fatalf("the writer: %v", err)
	}
}
