// Package metrics turns a census, and what a guard knows, into
// Prometheus metrics: the text exposition format that node_exporter's
// textfile collector reads, written by client_golang (no hand-written
// exposition). freeze census --format prometheus prints it; freeze guard
// --metrics-file keeps a file of it current.
//
// Cardinality is bounded: the per-executable series are the census's top
// rows only (--top, at most MaxTop), and the cgroup label is the one
// tightest pids cgroup.
package metrics

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"freeze/internal/census"
	"freeze/internal/safedir"
	"freeze/internal/version"
)

// MaxTop bounds the executables exported, whatever --top asks.
const MaxTop = 50

// Guard is what a guard adds to the census.
type Guard struct {
	Armed bool
	// Runs counts the guard's requests by outcome (zero, nothing-matched,
	// survivors, refused, usage...), from its log.
	Runs map[string]int
	// LastRun is when the last request ended; LastZero its time to zero
	// when it reached zero (else 0).
	LastRun  time.Time
	LastZero time.Duration
	// Forks and execs of a chain that the gate refused, over all runs.
	ForksRefused, ExecsRefused uint64
	// AutoDeclined counts chains --auto judged and would not act on.
	AutoDeclined int
	// WouldHold counts, in monitor mode, the holds each automatic
	// trigger (growth, cap) would have made.
	WouldHold map[string]int
	// AutoDisarmed: the disarmer stopped the automatic triggers.
	AutoDisarmed bool
}

// Registry builds the metrics of one census (and of a guard, if g is not
// nil) in a registry of their own.
func Registry(r *census.Report, g *Guard) *prometheus.Registry {
	m := maker{prometheus.NewRegistry()}
	m.host(r)
	m.rows(r)
	if g != nil {
		m.guard(g)
	}
	return m.reg
}

// maker registers metrics in one registry.
type maker struct{ reg *prometheus.Registry }

func (m maker) gauge(name, help string, v float64) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	g.Set(v)
	m.reg.MustRegister(g)
}

func (m maker) vec(name, help string, labels ...string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	m.reg.MustRegister(g)
	return g
}

func (m maker) counter(name, help string, v uint64) {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	c.Add(float64(v))
	m.reg.MustRegister(c)
}

// host is the machine's own: which freeze, the sample, cores, load,
// processes, tasks, pid_max and the tightest pids cgroup.
func (m maker) host(r *census.Report) {
	// Which freeze wrote these: an alert or a dashboard can tell the
	// hosts that still run an old one.
	bi := version.Get()
	m.vec("freeze_build_info", "1, labelled with the freeze that wrote these metrics.", "version", "commit", "goversion", "gate_object_sha256").
		WithLabelValues(label(bi.Version), label(bi.Commit), bi.Go, bi.GateHash).Set(1)
	m.gauge("freeze_census_sample_seconds", "How long the census watched the machine.", r.Sample)
	m.gauge("freeze_cores", "CPU cores.", float64(r.Cores))
	load := m.vec("freeze_load_per_core", "Load average divided by the cores.", "window")
	for i, w := range []string{"1m", "5m", "15m"} {
		load.WithLabelValues(w).Set(r.Load[i] / float64(max(r.Cores, 1)))
	}
	m.gauge("freeze_processes", "Live processes (no kernel threads, no zombies).", float64(r.Total))
	m.gauge("freeze_tasks", "Tasks, threads included: what counts against pid_max.", float64(r.Tasks))
	m.gauge("freeze_pid_max", "The kernel's pid_max.", float64(r.PidMax))
	if t := r.Tightest; t != nil {
		m.vec("freeze_pids_cgroup_current", "pids.current of the pids cgroup using the largest share of its pids.max.", "cgroup").
			WithLabelValues(label(t.Path)).Set(float64(t.Current))
		m.vec("freeze_pids_cgroup_max", "pids.max of the pids cgroup using the largest share of it.", "cgroup").
			WithLabelValues(label(t.Path)).Set(float64(t.Max))
	}
}

// rows are the census's top rows, one executable in one place each.
func (m maker) rows(r *census.Report) {
	procs := m.vec("freeze_exe_processes", "Live processes of one executable (the census's top rows).", "exe", "container_id", "pod_uid")
	orphans := m.vec("freeze_exe_orphans", "Of those, re-parented to PID 1 or a subreaper.", "exe", "container_id", "pod_uid")
	growth := m.vec("freeze_exe_growth_per_second", "Processes of one executable started minus ended, per second of the sample.", "exe", "container_id", "pod_uid")
	started := m.vec("freeze_exe_started_per_second", "Processes of one executable started per second of the sample (churn shows here while the count is flat).", "exe", "container_id", "pod_uid")
	suspect := m.vec("freeze_exe_suspect", "1 when the census calls the executable a suspect (many copies, orphans, growth or churn).", "exe", "container_id", "pod_uid")
	sample := max(r.Sample, 1e-3)
	for i, row := range r.Rows {
		if i == MaxTop {
			break
		}
		// Where it runs: the container's full id and the pod's uid, empty
		// on the host (Prometheus drops an empty label). Not
		// "container" and "pod", which Kubernetes scrapes use for names.
		l := []string{label(row.Exe), label(row.Container), label(row.Pod)}
		procs.WithLabelValues(l...).Set(float64(row.Count))
		orphans.WithLabelValues(l...).Set(float64(row.Orphaned))
		growth.WithLabelValues(l...).Set(float64(row.Appeared-row.Vanished) / sample)
		started.WithLabelValues(l...).Set(float64(row.Appeared) / sample)
		suspect.WithLabelValues(l...).Set(b2f(row.Suspect))
	}
}

// guard is the guard's own: armed, its runs, the last one, the gate's
// counts and what --auto declined.
func (m maker) guard(g *Guard) {
	m.gauge("freeze_guard_armed", "1 while a freeze guard is armed on this machine.", b2f(g.Armed))
	runs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "freeze_guard_runs_total", Help: "Requests the guard ran, by how they ended."}, []string{"outcome"})
	m.reg.MustRegister(runs)
	for outcome, n := range g.Runs {
		runs.WithLabelValues(outcome).Add(float64(n))
	}
	if !g.LastRun.IsZero() {
		m.gauge("freeze_last_run_timestamp_seconds", "When the guard's last request ended (Unix time).", float64(g.LastRun.UnixNano())/1e9)
		m.gauge("freeze_last_run_time_to_zero_seconds", "The last request's time to zero; 0 when it did not reach zero.", g.LastZero.Seconds())
	}
	m.counter("freeze_gate_forks_refused_total", "Fork and clone attempts of a chain that the BPF gate stopped, over the guard's runs.", g.ForksRefused)
	m.counter("freeze_gate_execs_refused_total", "Exec attempts of a chain that the BPF gate stopped, over the guard's runs.", g.ExecsRefused)
	m.gauge("freeze_guard_auto_disarmed", "1 while the guard's automatic triggers are disarmed (3 holds of distinct executables within 10 minutes): it answers requests and holds nothing unasked until auto-rearm is written into its FIFO.", b2f(g.AutoDisarmed))
	would := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "freeze_guard_auto_would_hold_total", Help: "Holds the guard's automatic triggers would have made in monitor mode (--auto-mode monitor), by trigger: growth (--auto N) or cap (--auto-on-cap)."}, []string{"trigger"})
	m.reg.MustRegister(would)
	for _, trigger := range []string{"growth", "cap"} {
		would.WithLabelValues(trigger).Add(float64(g.WouldHold[trigger]))
	}
	m.counter("freeze_guard_auto_declined_total", "Growing chains the guard's --auto judged and would not act on (a system daemon's or an interpreter's file, outside --auto-under, a file it could not pin): each needs an operator.", uint64(g.AutoDeclined))
}

// Write prints the metrics in the text exposition format.
func Write(w io.Writer, r *census.Report, g *Guard) error {
	mfs, err := Registry(r, g).Gather()
	if err != nil {
		return err
	}
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(w, mf); err != nil {
			return err
		}
	}
	return nil
}

// WriteFile replaces path with the metrics, atomically (a temporary file
// renamed over it), as the textfile collector needs: it must never read
// half a file. Not client_golang's WriteToTextfile: it chmods its
// temporary file by name before the rename, and the owner of the
// metrics directory swapped that file three times out of three, turning
// root's 0600 file 0644. safedir.WriteFile makes it O_EXCL|O_NOFOLLOW,
// fchmods the descriptor and renames within the directory's descriptor.
func WriteFile(path string, r *census.Report, g *Guard) error {
	mfs, err := Registry(r, g).Gather()
	if err != nil {
		return err
	}
	var b bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			return err
		}
	}
	return safedir.WriteFile(path, b.Bytes(), 0o644)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// label makes a value any user controls (an executable's path, a
// cgroup's) fit a Prometheus label, which must be UTF-8: client_golang
// panics on anything else, and a user who runs a few processes from a
// path that is not UTF-8 took census and the guard down with it. Each
// byte that is not UTF-8 is written as \xNN, so two such paths stay two
// labels.
func label(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			fmt.Fprintf(&b, `\x%02x`, s[i])
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}
