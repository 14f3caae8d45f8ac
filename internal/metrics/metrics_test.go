package metrics

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"freeze/internal/census"
)

// The exposition of a census with more rows than MaxTop keeps MaxTop
// executables (bounded cardinality), parses with Prometheus' text parser,
// and carries the guard's counts; the file is written whole.
func TestWriteBoundsAndParses(t *testing.T) {
	r := &census.Report{Cores: 2, Load: [3]float64{4, 2, 1}, Sample: 0.5, Total: 900, Tasks: 1000, PidMax: 32768,
		Tightest: &census.PidsCgroup{Path: "/sys/fs/cgroup/pids/ci", Current: 290, Max: 300}}
	for i := 0; i < MaxTop+20; i++ {
		r.Rows = append(r.Rows, census.Row{Exe: fmt.Sprintf("/tmp/t/exe-%03d", i), Count: 100 - i, Appeared: 10, Vanished: 5, Orphaned: 1, Suspect: i == 0})
	}
	g := &Guard{Armed: true, Runs: map[string]int{"zero": 3, "survivors": 1}, LastRun: time.Unix(1700000000, 0), LastZero: 250 * time.Millisecond, ForksRefused: 42}
	var b bytes.Buffer
	if err := Write(&b, r, g); err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if n := len(mfs["freeze_exe_processes"].GetMetric()); n != MaxTop {
		t.Errorf("%d executables exported, want %d", n, MaxTop)
	}
	one := func(name string) float64 {
		m := mfs[name].GetMetric()
		if len(m) != 1 {
			t.Fatalf("%s: %d series", name, len(m))
		}
		if m[0].Gauge != nil {
			return m[0].Gauge.GetValue()
		}
		return m[0].Counter.GetValue()
	}
	for name, want := range map[string]float64{
		"freeze_tasks": 1000, "freeze_pid_max": 32768, "freeze_pids_cgroup_current": 290, "freeze_pids_cgroup_max": 300,
		"freeze_guard_armed": 1, "freeze_last_run_time_to_zero_seconds": 0.25, "freeze_gate_forks_refused_total": 42,
	} {
		if got := one(name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	// Which freeze wrote them, one series of 1.
	if bi := mfs["freeze_build_info"].GetMetric(); len(bi) != 1 || bi[0].Gauge.GetValue() != 1 || len(bi[0].GetLabel()) != 4 {
		t.Errorf("freeze_build_info: %v", bi)
	}
	if n := len(mfs["freeze_guard_runs_total"].GetMetric()); n != 2 {
		t.Errorf("runs by outcome: %d series, want 2", n)
	}
	// Growth is per second of the sample: (10 - 5) / 0.5.
	for _, m := range mfs["freeze_exe_growth_per_second"].GetMetric() {
		if m.Gauge.GetValue() != 10 {
			t.Fatalf("growth %v, want 10", m.Gauge.GetValue())
		}
	}

	path := filepath.Join(t.TempDir(), "freeze.prom")
	if err := WriteFile(path, r, nil); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if !bytes.Contains(got, []byte("freeze_processes 900")) || bytes.Contains(got, []byte("freeze_guard_armed")) {
		t.Errorf("the file without a guard:\n%s", got)
	}
	if m, _ := filepath.Glob(path + "?*"); len(m) > 0 {
		t.Errorf("left beside the file: %v", m)
	}
}

// A path that is not UTF-8 (any user can run a copy from one) is written
// with its bad bytes escaped: the exposition neither panics nor merges
// two such paths, and parses (#24, finding 6: census --format prometheus
// and guard --metrics-file exited 2 there, and the guard never armed).
func TestNonUTF8PathsDoNotPanic(t *testing.T) {
	r := &census.Report{Cores: 2, Sample: 1, Tightest: &census.PidsCgroup{Path: "/sys/fs/cgroup/pids/\xffu", Current: 1, Max: 2}}
	for _, exe := range []string{"/tmp/\xff\xfe/run", "/tmp/\xfe\xff/run", "/tmp/ok/run"} {
		r.Rows = append(r.Rows, census.Row{Exe: exe, Count: 3, Suspect: true})
	}
	var b bytes.Buffer
	if err := Write(&b, r, &Guard{Armed: true}); err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	seen := map[string]bool{}
	for _, m := range mfs["freeze_exe_processes"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "exe" {
				seen[l.GetValue()] = true
			}
		}
	}
	for _, want := range []string{`/tmp/\xff\xfe/run`, `/tmp/\xfe\xff/run`, "/tmp/ok/run"} {
		if !seen[want] {
			t.Errorf("no series for %q: %v", want, seen)
		}
	}
}

// The metrics directory's owner swaps every new file in it for a symlink
// to a root file of mode 0600, as fast as it can, while the metrics are
// written 300 times (the audit's move against WriteToTextfile, which
// chmods its temporary file by name: three swaps in three made root's
// file 0644). The root file keeps its mode and content, and the metrics
// file is whole.
func TestWriteFileSurvivesASwappedTemporaryFile(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "textfile")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(base, "shadow")
	if err := os.WriteFile(victim, []byte("root only\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "freeze.prom")
	stop := make(chan struct{})
	swaps := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				if e.Name() == "freeze.prom" || e.Type()&os.ModeSymlink != 0 {
					continue
				}
				p := filepath.Join(dir, e.Name())
				if os.Rename(p, p+".moved") == nil && os.Symlink(victim, p) == nil {
					swaps++
				}
			}
		}
	}()
	r := &census.Report{Cores: 2, Sample: 1}
	for i := 0; i < 300; i++ {
		WriteFile(path, r, nil)
	}
	close(stop)
	<-done
	st, err := os.Stat(victim)
	b, _ := os.ReadFile(victim)
	if err != nil || st.Mode().Perm() != 0o600 || string(b) != "root only\n" {
		t.Fatalf("after %d swaps the root file is mode %v, reads %q", swaps, st.Mode().Perm(), b)
	}
	if err := WriteFile(path, r, nil); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); !strings.Contains(string(b), "freeze_") {
		t.Fatalf("the metrics file is not whole:\n%s", b)
	}
	t.Logf("%d swaps", swaps)
}
