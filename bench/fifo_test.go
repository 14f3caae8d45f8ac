package bench

import (
	"flag"

	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"freeze/internal/containtest"
	"freeze/internal/guard"
	"freeze/internal/priority"
	"freeze/internal/testenv"
)

var fifoReps = flag.Int("fifo", 0, "ask an armed guard through its FIFO, from a lifted shell, this many times, each beside a churning chain of orphans capped at 3,000 (root, minutes)")

// TestGuardAnswersEveryFIFORequest repeats the request that once went
// unanswered (#34): a churn of orphans at 3,000 (load near 1,000), an
// armed guard, and a lifted shell that writes 'echo "--path X" > ask'.
// Each repetition waits for the guard's answer in its ack file (received,
// then done) and fails if none names the request within 60 s. On demand:
//
//	go test ./bench -run GuardAnswersEveryFIFORequest -v -timeout 60m -args -fifo 20
func TestGuardAnswersEveryFIFORequest(t *testing.T) {
	if *fifoReps == 0 {
		t.Skip("on demand: -args -fifo N")
	}
	testenv.RequireLive(t, "the guard and the chains' pids cgroups")
	bin := containtest.GoBinary(t, "../cmd/freeze", "freeze", "FREEZE_TEST_BIN")
	// Measure, do not compete: the benchmark's own polling runs lifted,
	// so what it times is the asker and the guard, not its own turn
	// behind the churn (the chains start at ordinary priority).
	priority.Raise()
	startGuardFor(t, 90*time.Minute, bin, nil)
	ack := filepath.Join(guardDir, guard.AckName)
	var received, done []time.Duration
	lost := 0
	for i := 1; i <= *fifoReps; i++ {
		// The asker is set up before the churn grows (Held): the time
		// runs from its release, not from the harness's copy and fork
		// beside 3,000 (the first 20 of this bench timed those: 0.04 to
		// 30 s to the guard's receipt).
		dir := t.TempDir()
		path := filepath.Join(dir, "chain")
		line := "--path '" + path + "' --timeline " + filepath.Join(dir, "t.jsonl")
		asker := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Lifted: true, Held: true, Cap: 20, HopCap: 1, Timeout: 5 * time.Minute,
			Command: []string{"/bin/sh", "-c", `echo "$1" > "$2"`, "sh", line, filepath.Join(guardDir, guard.AskName)}})
		c := containtest.Start(t, containtest.Spec{Shape: containtest.Churn, Dir: dir, Cap: 3000, HopCap: 1000000, Timeout: 5 * time.Minute, Interval: 20 * time.Millisecond})
		if c.Path != path {
			t.Fatalf("the chain runs %s, the request names %s", c.Path, path)
		}
		if n := c.WaitPopulation(2500, 120*time.Second); n < 2500 {
			t.Fatalf("rep %d: the churn reached %d of 2,500", i, n)
		}
		t0 := time.Now()
		asker.Release()
		var got, fin time.Duration
		for end := time.Now().Add(60 * time.Second); time.Now().Before(end) && fin == 0; time.Sleep(5 * time.Millisecond) {
			b, _ := os.ReadFile(ack)
			s := string(b)
			if !strings.Contains(s, c.Path) {
				continue
			}
			if got == 0 {
				got = time.Since(t0)
			}
			if strings.Contains(s, " done exit ") || strings.Contains(s, " refused exit ") {
				fin = time.Since(t0)
				if !strings.Contains(s, " done exit 0 zero ") {
					t.Errorf("rep %d: %s", i, s)
				}
			}
		}
		asker.Exit(30 * time.Second)
		if fin == 0 {
			lost++
			t.Errorf("rep %d: no answer naming the request within 60 s (received after %v); ack: %q", i, got, readFile(ack))
		} else {
			received, done = append(received, got), append(done, fin)
		}
		c.Kill()
		t.Logf("rep %d: received after %v, done after %v", i, got, fin)
	}
	t.Logf("%d of %d answered; received: median %v, max %v; done: median %v, max %v", len(done), *fifoReps, medianD(received), maxOf(received), medianD(done), maxOf(done))
	if lost > 0 {
		t.Errorf("%d request(s) went unanswered", lost)
	}
}

func readFile(p string) string { b, _ := os.ReadFile(p); return string(b) }

func maxOf(d []time.Duration) time.Duration {
	var m time.Duration
	for _, x := range d {
		m = max(m, x)
	}
	return m
}
