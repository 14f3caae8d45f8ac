package live

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"freeze/internal/containtest"
	"freeze/internal/testenv"
	"freeze/internal/timeline"
)

// parseExposition parses the text format with Prometheus' own parser.
func parseExposition(t *testing.T, b []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("Prometheus' text parser refuses the exposition: %v\n%s", err, b)
	}
	return mfs
}

// value is the value of the series of family name with label = want, and
// whether there is one.
func value(mfs map[string]*dto.MetricFamily, name, label, want string) (float64, bool) {
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
	for _, m := range mf.Metric {
		match := label == ""
		for _, l := range m.Label {
			if l.GetName() == label && l.GetValue() == want {
				match = true
			}
		}
		if !match {
			continue
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		}
	}
	return 0, false
}

// freeze census --format prometheus, against a real capped chain: the
// exposition parses with Prometheus' own text parser, and the chain's
// executable is there with its process count.
func TestCensusPrometheusSeesAChain(t *testing.T) {
	testenv.RequireLive(t, "the chain's pids cgroup")
	bin := buildFreeze(t)
	c := treeAtCap(t, 150, 50*time.Millisecond)
	out, err := exec.Command(bin, "census", "--format", "prometheus", "--sample", "300ms", "--top", "50", "--run-dir", filepath.Join(t.TempDir(), "none")).Output()
	if err != nil {
		t.Fatalf("census: %v", err)
	}
	mfs := parseExposition(t, out)
	// At its cap, a tree neither grows nor shrinks: the count is exact.
	if v, ok := value(mfs, "freeze_exe_processes", "exe", c.Path); !ok || v != 150 {
		t.Fatalf("freeze_exe_processes{exe=%q} = %v (present %v), want 150:\n%s", c.Path, v, ok, out)
	}
	if v, ok := value(mfs, "freeze_exe_started_per_second", "exe", c.Path); !ok || v != 0 {
		t.Errorf("a chain at its cap started %v processes a second", v)
	}
	if v, _ := value(mfs, "freeze_processes", "", ""); v < 150 {
		t.Errorf("freeze_processes %v, below the chain's own 150", v)
	}
	// The chain's own cgroup is full, so the tightest is at least as
	// full.
	cur, ok1 := value(mfs, "freeze_pids_cgroup_current", "", "")
	max, ok2 := value(mfs, "freeze_pids_cgroup_max", "", "")
	if !ok1 || !ok2 || cur < max {
		t.Errorf("tightest pids cgroup %v of %v (present %v %v); the chain's own is full", cur, max, ok1, ok2)
	}
	if v, ok := value(mfs, "freeze_guard_armed", "", ""); !ok || v != 0 {
		t.Errorf("freeze_guard_armed %v (present %v) with no guard", v, ok)
	}
	if tool, err := exec.LookPath("promtool"); err == nil {
		cmd := exec.Command(tool, "check", "metrics")
		cmd.Stdin = bytes.NewReader(out)
		if o, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics: %v\n%s", err, o)
		}
	}
	if err := exec.Command(bin, "census", "--format", "prometheus", "--top", "51").Run(); err == nil {
		t.Error("--top 51 accepted for metrics: the cardinality bound is 50")
	}
}

// freeze guard --metrics-file keeps the file current: armed, then after a
// request the run's outcome and time to zero, and armed 0 once stopped;
// freeze census --run-dir says the same from the guard's lock and log.
func TestGuardMetricsFile(t *testing.T) {
	testenv.RequireLive(t, "the guard's run directory and the chain's pids cgroup")
	bin := buildFreeze(t)
	dir := filepath.Join(t.TempDir(), "run")
	file := filepath.Join(t.TempDir(), "freeze.prom")
	g := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 200, HopCap: 1, Timeout: 300 * time.Second,
		Command: []string{bin, "guard", "--run-dir", dir, "--metrics-file", file, "--metrics-every", "5s"}})
	waitFor(t, g, "freeze: guard: armed", 30*time.Second)
	read := func() map[string]*dto.MetricFamily {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		return parseExposition(t, b)
	}
	if v, _ := value(read(), "freeze_guard_armed", "", ""); v != 1 {
		t.Fatalf("freeze_guard_armed %v once armed", v)
	}

	// Spinning: each process at the cap retries its fork every 1 ms, so
	// the gate usually stops some before zero. Not always: beside a CPU
	// hog, a lifted freeze killed the whole chain before any of it ran
	// again (seen once in five runs), and a count of 0 is then true. So
	// up to three chains, one after another, until a run counts a stop;
	// the counters are the sum of the runs.
	var forks uint64
	var tl string
	runs := 0
	for try := 1; ; try++ {
		runs = try
		c := treeAtCap(t, 100, time.Millisecond)
		tl = filepath.Join(t.TempDir(), "t.jsonl")
		ask(t, dir, "--path '"+c.Path+"' --timeline '"+tl+"'\n")
		end := time.Now().Add(60 * time.Second)
		for {
			mfs := read()
			zero, _ := value(mfs, "freeze_guard_runs_total", "outcome", "zero")
			ttz, _ := value(mfs, "freeze_last_run_time_to_zero_seconds", "", "")
			if zero == float64(try) && ttz > 0 {
				if ttz > 60 {
					t.Errorf("time to zero %v s", ttz)
				}
				break
			}
			if time.Now().After(end) {
				b, _ := os.ReadFile(file)
				t.Fatalf("the metrics file never said run %d reached zero:\n%s\nguard:\n%s", try, b, g.Stderr())
			}
			time.Sleep(100 * time.Millisecond)
		}
		if left := c.Survivors(); len(left) > 0 {
			t.Fatalf("%d of the chain alive after zero", len(left))
		}
		n, gated := gateCounts(t, dir, tl)
		forks += n
		if !gated || n > 0 {
			break
		}
		if try == 3 {
			t.Fatalf("three gated runs each count 0 forks stopped of a chain that retries a fork every 1 ms")
		}
		t.Logf("run %d: the gate counted no fork (the chain did not run again before the kill): another chain", try)
	}
	if got, _ := value(read(), "freeze_gate_forks_refused_total", "", ""); uint64(got) != forks {
		t.Errorf("freeze_gate_forks_refused_total %v; the runs' timelines say %d", got, forks)
	}
	// The command line's census reads the same from the guard's lock and
	// log.
	out, err := exec.Command(bin, "census", "--format", "prometheus", "--sample", "10ms", "--run-dir", dir).Output()
	if err != nil {
		t.Fatal(err)
	}
	mfs := parseExposition(t, out)
	armed, _ := value(mfs, "freeze_guard_armed", "", "")
	zero, _ := value(mfs, "freeze_guard_runs_total", "outcome", "zero")
	if armed != 1 || zero != float64(runs) {
		t.Errorf("census --run-dir with the guard armed: armed %v, runs to zero %v; want 1 and %d", armed, zero, runs)
	}
	if err := syscall.Kill(g.Leader, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if ws, ok := g.Exit(30 * time.Second); !ok || ws.ExitStatus() != 0 {
		t.Fatalf("the guard did not stop cleanly on SIGTERM: %v %v\n%s", ws, ok, g.Stderr())
	}
	if v, ok := value(read(), "freeze_guard_armed", "", ""); !ok || v != 0 {
		t.Fatalf("freeze_guard_armed %v (present %v) after the guard stopped", v, ok)
	}
	// Written by rename: no temporary file left beside it.
	if m, _ := filepath.Glob(file + "?*"); len(m) > 0 {
		t.Errorf("left beside the metrics file: %v", m)
	}
	if strings.Contains(g.Stderr(), "warning: metrics file") {
		t.Errorf("the guard warned about its metrics file:\n%s", g.Stderr())
	}
}

// gateCounts checks that a gated request's count of forks stopped reaches
// the guard's log as the run's timeline has it, and returns it, and
// whether the run was gated. The caller requires a run that counts more
// than 0: 0 everywhere is the old bug, where the log read an in-memory
// count as the wrong type and wrote 0.
func gateCounts(t *testing.T, dir, tl string) (uint64, bool) {
	t.Helper()
	events, err := timeline.ReadFile(tl)
	if err != nil {
		t.Fatal(err)
	}
	h := timeline.Summarize("", tl, events)
	if h.Method != "bpf" {
		t.Logf("the run used %s, not the gate: no gate counts to check", h.Method)
		return 0, false
	}
	e := waitLog(t, dir, 10*time.Second, func(e logLine) bool { return e.Event == "request" && e.request().Timeline == tl }).request()
	if e.GateForks != h.GateForks {
		t.Errorf("guard.log says gate_forks %v; the run's timeline says %d", e.GateForks, h.GateForks)
	}
	return h.GateForks, true
}
