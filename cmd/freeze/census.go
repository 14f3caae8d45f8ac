package main

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"freeze/internal/census"
	"freeze/internal/match"
	"freeze/internal/proc"
)

const censusUsage = `Usage:
    freeze census [--sample DURATION] [--top N] [--json]

Finds what is holding the machine, read-only: the load against the cores,
the pid space and memory, the executables with the most processes over a
short sample (count, orphans, CPU, growth, age, process groups,
sessions), the suspects with their reasons, the ports held open and by
whom, and the exact freeze command for the top suspect.

Options:
        --sample DURATION   how long to watch (default 1s)
        --top N             rows to show (default 10)
        --json              the report as JSON on stdout
`

func runCensus(o out, args []string) int {
	fl := pflag.NewFlagSet("freeze census", pflag.ContinueOnError)
	fl.SetOutput(io.Discard)
	sample := fl.Duration("sample", time.Second, "")
	top := fl.Int("top", 10, "")
	asJSON := fl.Bool("json", false, "")
	help := fl.BoolP("help", "h", false, "")
	if err := fl.Parse(args); err != nil {
		o.errorf("census: %v", err)
		o.hintf("freeze census [--sample 1s] [--top 10] [--json]")
		return exitUsage
	}
	if *help {
		fmt.Fprint(o.stdout, censusUsage)
		return exitZero
	}
	if *sample <= 0 || *sample > time.Minute {
		o.errorf("census: --sample %v: choose between 1ms and 1m", *sample)
		return exitUsage
	}
	if *top < 1 {
		o.errorf("census: --top %d: need at least 1", *top)
		return exitUsage
	}
	r, err := census.Take(proc.Default, *sample, *top)
	if err != nil {
		o.errorf("census: %v", err)
		return exitSurvivors
	}
	if *asJSON {
		b, _ := json.MarshalIndent(r, "", "  ")
		fmt.Fprintln(o.stdout, string(b))
		return exitZero
	}
	w := o.stdout
	fmt.Fprintln(w, r.Verdict)
	fmt.Fprintln(w, r.PidLine)
	if r.MemLine != "" {
		fmt.Fprintln(w, r.MemLine)
	}
	fmt.Fprintf(w, "\n%d processes; top %d executables over %.1f s:\n", r.Total, len(r.Rows), r.Sample)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "count\torphans\tcpu%\t+new\t-gone\toldest\tpgrps\tsessions\t\texecutable")
	for _, row := range r.Rows {
		fmt.Fprintf(tw, "%d\t%d\t%.0f\t%d\t%d\t%s\t%d\t%d\t\t%s\n", row.Count, row.Orphaned, row.CPUPercent, row.Appeared, row.Vanished,
			age(row.OldestAgeS), row.Groups, row.Sessions, match.OneLine(row.Exe))
	}
	tw.Flush()
	suspects := 0
	for _, row := range r.Rows {
		if row.Suspect {
			if suspects == 0 {
				fmt.Fprintln(w, "\nsuspects:")
			}
			suspects++
			fmt.Fprintf(w, "  %s: %s\n", match.OneLine(filepath.Base(row.Exe)), row.Reasons)
		}
	}
	if suspects == 0 {
		fmt.Fprintln(w, "\nno suspect: no executable has many copies, orphans, growth or churn")
	}
	if len(r.Ports) > 0 {
		fmt.Fprintln(w, "\nports held open:")
		for _, p := range r.Ports {
			owner := "owner unknown (another user's process, or not found in time)"
			if p.PID != 0 {
				owner = fmt.Sprintf("pid %d %s", p.PID, match.OneLine(p.Exe))
			}
			fmt.Fprintf(w, "  %-5s %s:%d  %s\n", p.Proto, p.Addr, p.Port, owner)
		}
	}
	for _, n := range r.Notes {
		o.warnf("census: %s", n)
	}
	if r.Command != "" {
		fmt.Fprintf(w, "\nto stop the top suspect:\n  %s\n", r.Command)
	}
	return exitZero
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
