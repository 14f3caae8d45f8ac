package postmortem

import (
	"fmt"
	"strings"

	"freeze/internal/show"
	"freeze/internal/timeline"
)

// A ChartPoint is the chain's size at one step of a run: the match, the
// set after each freeze round, those alive at each kill round, zero.
type ChartPoint struct {
	Label string  // "match", "freeze 1", "kill 2", "zero"
	AtMS  float64 // since the start
	N     int
}

// Chart reads a run's points off its record, in order, timed from the
// run's own start (a drill records its set-up before it).
func Chart(events []timeline.Event) []ChartPoint {
	var out []ChartPoint
	start := 0.0
	exitMS := -1.0
	for _, e := range events {
		if e.Step == timeline.StepStart || e.Step == timeline.StepRunStart {
			start = e.ElapsedMS
		}
		e.ElapsedMS -= start
		switch e.Step {
		// A freeze run's: the command's tree at its peak, what outlived
		// it, and zero.
		case timeline.StepRunExit:
			exitMS = e.ElapsedMS
		case timeline.StepRunEnd:
			var end timeline.RunEnd
			if e.Decode(&end) == nil {
				at := max(exitMS, 0)
				if end.Peak > 0 {
					out = append(out, ChartPoint{"peak", at, end.Peak})
				}
				out = append(out, ChartPoint{"left over", at, end.Leftovers})
				if end.Zero {
					out = append(out, ChartPoint{"zero", e.ElapsedMS, 0})
				}
			}
		case timeline.StepMatch:
			var m timeline.Matched
			if e.Decode(&m) == nil {
				out = append(out, ChartPoint{"match", e.ElapsedMS, m.Matched})
			}
		case timeline.StepFreezeRound:
			var f timeline.FreezeRound
			if e.Decode(&f) == nil {
				out = append(out, ChartPoint{fmt.Sprintf("freeze %d", f.Round), e.ElapsedMS, f.Matched})
			}
		case timeline.StepKillRound:
			var k timeline.KillRound
			if e.Decode(&k) == nil {
				out = append(out, ChartPoint{fmt.Sprintf("kill %d", k.Round), e.ElapsedMS, k.Live})
			}
		case timeline.StepZero:
			out = append(out, ChartPoint{"zero", e.ElapsedMS, 0})
		}
	}
	return out
}

// chartWidth is the longest bar of the text chart, in characters.
const chartWidth = 40

// chart writes the picture of the chain over the run: a mermaid
// xychart (which code hosts and wikis render) in markdown, and a bar
// per step in both formats.
func (r renderer) chart(events []timeline.Event) {
	pts := Chart(events)
	if len(pts) < 2 {
		return
	}
	most := 1
	for _, p := range pts {
		most = max(most, p.N)
	}
	r.heading("The chain over the run")
	if r.md {
		var labels, values []string
		for _, p := range pts {
			labels = append(labels, fmt.Sprintf("%q", p.Label+" "+show.DurMS(p.AtMS)))
			values = append(values, fmt.Sprint(p.N))
		}
		fmt.Fprintf(r.w, "```mermaid\nxychart-beta\n    title \"Processes of the chain at each step\"\n    x-axis [%s]\n    y-axis \"processes\" 0 --> %d\n    bar [%s]\n    line [%s]\n```\n\n",
			strings.Join(labels, ", "), most, strings.Join(values, ", "), strings.Join(values, ", "))
		fmt.Fprintln(r.w, "```")
	}
	for _, p := range pts {
		bar := strings.Repeat("#", (p.N*chartWidth+most-1)/most)
		fmt.Fprintf(r.w, "%-10s %9s %7d %s\n", p.Label, show.DurMS(p.AtMS), p.N, bar)
	}
	if r.md {
		fmt.Fprintln(r.w, "```")
	}
}
