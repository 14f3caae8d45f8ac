package guard

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"freeze/internal/freeze"
	"freeze/internal/proc"
	"freeze/internal/safedir"
	"freeze/internal/say"
	"freeze/internal/stop"
	"freeze/internal/timeline"
)

// A FIFO request's run does not wait for its answer file: with every
// write of "received" and "running" held, the run starts all the same;
// once they are let go, the file says "done", and says it before the
// guard logs the request. Under a churning chain those two writes cost a
// run 60-170 ms of its start (their fsyncs, perf trace).
func TestAFIFORequestRunsWithoutWaitingForItsAnswerFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	ran := make(chan struct{}, 1)
	g, err := Arm(Config{RunDir: dir, Say: func(string) {}, Run: func(context.Context, say.Out, []string, *proc.File, func() *freeze.Spare) stop.Report {
		ran <- struct{}{}
		return stop.Report{Outcome: timeline.StepZero}
	}})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var once sync.Once
	let := func() { once.Do(func() { close(release) }) }
	g.acks.write = func(p string, b []byte) error {
		if !bytes.Contains(b, []byte(" done ")) {
			<-release
		}
		time.Sleep(20 * time.Millisecond) // a slow disk: a done line written late is missed below
		return safedir.WriteStatus(p, b, 0o600)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { g.Serve(ctx); close(served) }()
	t.Cleanup(func() {
		let()
		cancel()
		<-served
		g.Close()
	})

	f, err := os.OpenFile(filepath.Join(dir, AskName), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("--path /tmp/the-chain\n")
	f.Close()
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the run did not start in 10 s while its answer file's writes were held: the run waits for them")
	}
	let()
	waitLogged(t, dir, func(e logged) bool { return e.Event == "request" && e.request().Source == "fifo" })
	ack, _ := os.ReadFile(filepath.Join(dir, AckName))
	if !regexp.MustCompile(`^\d+ done exit 0 zero --path /tmp/the-chain\n$`).Match(ack) {
		t.Errorf("once the request is logged, %s is %q, want its done line", AckName, ack)
	}
}
