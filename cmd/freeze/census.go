package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"freeze/internal/census"
	"freeze/internal/guard"
	"freeze/internal/metrics"
	"freeze/internal/order"
	"freeze/internal/say"
	"freeze/internal/show"
)

const censusUsage = `Usage:
    freeze census [--sample DURATION] [--top N] [--format text|json|prometheus]

Finds what is holding the machine, read-only: the load against the cores,
the pid space and memory, the executables with the most processes over a
short sample (count, orphans, CPU, growth, age, process groups,
sessions), the suspects with their reasons, the ports held open and by
whom, and the exact freeze command for the top suspect.

Options:
        --sample DURATION   how long to watch (default 1s)
        --top N             rows to show (default 10)
        --format FORMAT     text (default), json, or prometheus: the text
                            exposition format for node_exporter's textfile
                            collector (freeze census --format prometheus >
                            DIR/freeze.prom.$$ && mv DIR/freeze.prom.$$
                            DIR/freeze.prom), with the guard's own metrics
                            read from --run-dir; 'freeze guard
                            --metrics-file' keeps such a file current
        --json              the same as --format json
        --run-dir DIR       the guard's directory, for its metrics
                            (default /run/freeze, or $FREEZE_RUN_DIR)
    -h, --help              this text

Metrics (prometheus): freeze_processes, freeze_tasks, freeze_pid_max,
freeze_pids_cgroup_current and _max (the pids cgroup nearest its limit),
freeze_load_per_core, per row of the top rows (labels exe, and
container_id and pod_uid for a row in a container):
freeze_exe_processes, _orphans, _growth_per_second, _started_per_second,
_suspect; and freeze_guard_armed, freeze_guard_runs_total by outcome,
freeze_last_run_time_to_zero_seconds, freeze_gate_forks_refused_total.
`

func runCensus(o out, args []string) int {
	fl := pflag.NewFlagSet("freeze census", pflag.ContinueOnError)
	fl.SetOutput(io.Discard)
	sample := fl.Duration("sample", time.Second, "")
	top := fl.Int("top", 10, "")
	ff := say.AddFormat(fl, "census: ", "text", "json", "prometheus")
	runDir := fl.String("run-dir", order.RunDir(), "")
	help := fl.BoolP("help", "h", false, "")
	if err := fl.Parse(args); err != nil {
		flagError(o, "census", "census: ", err)
		o.Hintf("freeze census [--sample 1s] [--top 10] [--format text|json|prometheus]")
		return exitUsage
	}
	format, ok := ff.Resolve(o)
	if !ok {
		return exitUsage
	}
	if *help {
		fmt.Fprint(o.Stdout, censusUsage)
		return exitZero
	}
	if *sample <= 0 || *sample > time.Minute {
		o.Errorf("census: --sample %v: choose between 1ms and 1m", *sample)
		return exitUsage
	}
	if *top < 1 {
		o.Errorf("census: --top %d: need at least 1", *top)
		return exitUsage
	}
	if format == "prometheus" && *top > metrics.MaxTop {
		o.Errorf("census: --top %d: at most %d executables are exported as metrics", *top, metrics.MaxTop)
		o.Hintf("keep the number of series small: the default, 10, is enough to see a chain coming")
		return exitUsage
	}
	r, err := census.Here(*sample, *top)
	if err != nil {
		o.Errorf("census: %v", err)
		return exitSurvivors
	}
	if format == "prometheus" {
		st, err := guard.ReadStats(*runDir)
		if err != nil {
			o.Warnf("census: the guard's log in %s: %v; its metrics may be incomplete", *runDir, err)
		}
		if err := metrics.Write(o.Stdout, r, st.Metrics()); err != nil {
			o.Errorf("census: %v", err)
			return exitSurvivors
		}
		return exitZero
	}
	if format == "json" {
		b, _ := json.MarshalIndent(r, "", "  ")
		fmt.Fprintln(o.Stdout, string(b))
		return exitZero
	}
	printCensus(o, r)
	return exitZero
}

// where says, after a row's executable, the container and pod its
// processes run in; nothing on the host. The place comes from cgroup
// paths the container's owner may name: printed on one line.
func where(row census.Row) string {
	if p := row.Place(); !p.Host() {
		return "  in " + show.Term(p.String())
	}
	return ""
}

// printCensus prints a census as text: the verdict, the table, the
// suspects, the ports held open, and the command for the top suspect.
func printCensus(o out, r *census.Report) {
	w := o.Stdout
	fmt.Fprintln(w, show.Term(r.Verdict))
	fmt.Fprintln(w, show.Term(r.PidLine))
	if r.MemLine != "" {
		fmt.Fprintln(w, r.MemLine)
	}
	if t := r.Tightest; t != nil && t.Max > 0 && t.Current >= t.Max {
		fmt.Fprintf(w, "pids cgroup %s is at its cap: %d of pids.max %d -- every fork in it fails%s\n", show.Term(t.Path), t.Current, t.Max, holds(t))
	} else if t != nil && t.Ratio >= 0.9 {
		fmt.Fprintf(w, "pids cgroup %s is near its cap: %d of pids.max %d%s\n", show.Term(t.Path), t.Current, t.Max, holds(t))
	}
	fmt.Fprintf(w, "\n%d processes; top %d executables over %s:\n", r.Total, len(r.Rows), show.Dur(time.Duration(r.Sample*float64(time.Second))))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "count\torphans\tcpu%\t+new\t-gone\toldest\tpgrps\tsessions\t\texecutable")
	for _, row := range r.Rows {
		fmt.Fprintf(tw, "%d\t%d\t%.0f\t%d\t%d\t%s\t%d\t%d\t\t%s\n", row.Count, row.Orphaned, row.CPUPercent, row.Appeared, row.Vanished,
			age(row.OldestAgeS), row.Groups, row.Sessions, show.Term(row.Exe+where(row)))
	}
	tw.Flush()
	suspects := 0
	for _, row := range r.Rows {
		if row.Suspect {
			if suspects == 0 {
				fmt.Fprintln(w, "\nsuspects:")
			}
			suspects++
			// The full path: two files of one name were two suspects
			// that read alike ("runaway: 300 copies", "runaway: 51").
			atCap := ""
			if row.InTightest {
				atCap = "; in the pids cgroup at its cap"
			}
			fmt.Fprintf(w, "  %s%s: %s%s; processes of %s\n", show.Term(row.Exe), show.Term(where(row)), show.Term(row.Reasons), atCap, show.Term(show.Dash(row.Owners)))
			if row.Command != "" {
				fmt.Fprintf(w, "    stop it: %s\n", row.Command)
			}
		}
	}
	if suspects == 0 {
		fmt.Fprintln(w, "\nno suspect: no executable has many copies, orphans, growth or churn")
	}
	if len(r.Ports) > 0 {
		fmt.Fprintln(w, "\nports held open:")
		for _, p := range r.Ports {
			owner := "owner not found in time"
			switch {
			case p.Unread != "":
				owner = "owner unknown: " + p.Unread
			case os.Geteuid() != 0:
				owner = "owner unknown: another user's process (run census as root)"
			}
			if p.PID != 0 {
				owner = fmt.Sprintf("pid %d %s", p.PID, show.Term(p.Exe))
			}
			fmt.Fprintf(w, "  %-5s %s:%d  %s\n", p.Proto, p.Addr, p.Port, owner)
		}
	}
	for _, n := range r.Notes {
		o.Warnf("census: %s", n)
	}
	if r.Command != "" {
		which := "the top suspect"
		for _, row := range r.Rows {
			if row.Command == r.Command && row.InTightest {
				which = "the suspect in the pids cgroup at its cap"
			}
		}
		fmt.Fprintf(w, "\nto stop %s:\n  %s\n", which, r.Command)
	}
}

func age(s float64) string {
	switch {
	case s >= 3600:
		return fmt.Sprintf("%.1fh", s/3600)
	case s >= 60:
		return fmt.Sprintf("%.0fm", s/60)
	}
	return fmt.Sprintf("%.0fs", s)
}

// holds says which of the census's rows sit in a capped group.
func holds(t *census.PidsCgroup) string {
	if len(t.Holds) == 0 {
		return "; what runs there is below"
	}
	return "; in it: " + show.Term(strings.Join(t.Holds, ", "))
}
