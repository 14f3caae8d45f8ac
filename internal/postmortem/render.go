package postmortem

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"freeze/internal/show"
	"freeze/internal/timeline"
)

// ReadFile reads one run's timeline for Render: the events before a line
// it cannot read come back with the error (timeline.ReadFile).
func ReadFile(path string) ([]timeline.Event, error) { return timeline.ReadFile(path) }

// Render writes events in format ("markdown", "text" or "json") as a
// section to paste into a postmortem. A timeline with no step that ends a
// run (zero, survivors, hold, nothing matched, dry run, interrupted, a
// refusal, a failure) is said to stop early, with its last step; events recorded
// after the end (freeze's peak memory) do not make a finished run look
// cut.
func Render(w io.Writer, events []timeline.Event, format string) error {
	return render(w, events, format, 2)
}

// render is Render with the title at heading level (2 alone, 3 inside a
// fleet postmortem's host section), and the sections one below it.
func render(w io.Writer, events []timeline.Event, format string, level int) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(events)
	case "jsonl":
		// The file itself, line by line as it was read (checked): what a
		// fleet postmortem collects from a node whose image has no cat
		// or tar (the DaemonSet's, FROM scratch).
		for _, e := range events {
			line, err := e.Line()
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintf(w, "%s\n", line); err != nil {
				return err
			}
		}
		return nil
	case "svg":
		return SVG(w, events)
	case "markdown", "text":
	default:
		return fmt.Errorf("unknown format %q: use markdown, text, svg, json or jsonl", format)
	}
	if len(events) == 0 {
		return fmt.Errorf("the timeline has no events")
	}
	r := renderer{w: w, md: format == "markdown", level: level}
	r.header(events)
	r.steps(events)
	r.rounds(events)
	r.chart(events)
	if last := events[len(events)-1]; !ended(events) {
		fmt.Fprintf(w, "\nThis timeline stops early, after step %q at %s: freeze was killed, or is still going.\n", last.Step, last.Time.UTC().Format("15:04:05.000"))
	}
	return nil
}

// renderer writes one timeline as markdown or as plain text.
type renderer struct {
	w     io.Writer
	md    bool
	level int // the title's heading level
}

// heading writes a section's heading.
func (r renderer) heading(s string) {
	if r.md {
		fmt.Fprintf(r.w, "\n%s %s\n\n", strings.Repeat("#", r.level+1), s)
	} else {
		fmt.Fprintf(r.w, "\n%s\n%s\n", s, strings.Repeat("-", len(s)))
	}
}

// text is s made safe for the format: escaped for markdown, one line for
// text.
func (r renderer) text(s string) string {
	if r.md {
		return show.Markdown(s)
	}
	return show.Term(s)
}

// header writes the title, the command, the outcome and the method.
func (r renderer) header(events []timeline.Event) {
	first := events[0]
	title := "freeze timeline, " + first.Time.UTC().Format(time.RFC3339)
	if r.md {
		fmt.Fprintf(r.w, "%s %s\n", strings.Repeat("#", r.level), title)
	} else {
		fmt.Fprintf(r.w, "%s\n", title)
	}
	var start timeline.Start
	if first.Step == timeline.StepRunStart {
		// A freeze run's record: its command, its host.
		var rs timeline.RunStart
		if first.Decode(&rs) == nil {
			start.Command = append([]string{"freeze", "run", "--"}, rs.Command...)
			start.HostInfo, start.Version = rs.HostInfo, rs.Version
		}
	}
	if (first.Step == timeline.StepStart || first.Step == timeline.StepRunStart) && (first.Step == timeline.StepRunStart || first.Decode(&start) == nil) && len(start.Command) > 0 {
		// Quoted, so that it pastes back as the same words: a bash
		// bomb's --arg ':(){ :|:& };:' is one word.
		line := show.ShellJoin(start.Command)
		if r.md {
			fmt.Fprintf(r.w, "\nCommand: %s\n", show.MarkdownCode(line))
		} else {
			fmt.Fprintf(r.w, "\nCommand: %s\n", show.Term(line))
		}
		if start.Host != "" || start.Version != "" {
			fmt.Fprintf(r.w, "\n%s\n", r.text(fmt.Sprintf("Host: %s, kernel %s; %s", show.Dash(start.Host), show.Dash(start.Kernel), start.Version)))
		}
	}
	r.heading("Outcome")
	fmt.Fprintln(r.w, r.text(outcome(events)))
	for _, e := range events {
		var m timeline.MethodChosen
		if e.Step == timeline.StepMethod {
			e.Decode(&m)
			fmt.Fprintf(r.w, "\n%s\n", r.text(fmt.Sprintf("Method: %s at %s, because: %s", m.Method, m.Group, m.Why)))
		}
	}
}

// steps writes one line per event.
func (r renderer) steps(events []timeline.Event) {
	r.heading("Steps")
	if r.md {
		fmt.Fprintln(r.w, "| wall time (UTC) | elapsed | step | what happened |")
		fmt.Fprintln(r.w, "| --- | ---: | --- | --- |")
	}
	for _, e := range events {
		ts := e.Time.UTC().Format("15:04:05.000")
		el := show.DurMS(e.ElapsedMS)
		if r.md {
			fmt.Fprintf(r.w, "| %s | %s | %s | %s |\n", ts, el, show.Markdown(string(e.Step)), show.Markdown(e.Msg))
		} else {
			fmt.Fprintf(r.w, "%s  %10s  %-14s %s\n", ts, el, show.Term(string(e.Step)), show.Term(e.Msg))
		}
	}
}

// rounds writes each freeze and kill round's counts.
func (r renderer) rounds(events []timeline.Event) {
	r.heading("Counts per round")
	for _, e := range events {
		if e.Step != timeline.StepFreezeRound && e.Step != timeline.StepKillRound {
			continue
		}
		keys := make([]string, 0, len(e.Fields))
		for k := range e.Fields {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var kv []string
		for _, k := range keys {
			kv = append(kv, fmt.Sprintf("%s=%v", k, e.Fields[k]))
		}
		prefix := "- "
		if !r.md {
			prefix = "  "
		}
		fmt.Fprintf(r.w, "%s%s: %s\n", prefix, e.Step, strings.Join(kv, " "))
	}
}

// ended reports whether any event ends the run.
func ended(events []timeline.Event) bool {
	for _, e := range events {
		if e.Step.Ends() {
			return true
		}
	}
	return false
}

// runOutcome says how a freeze run ended: its exit code and why, what
// outlived the command, the cap, and zero.
func runOutcome(e timeline.RunEnd) string {
	out := fmt.Sprintf("freeze run exited %d: %s.", e.Exit, e.Why)
	if e.Leftovers > 0 {
		out += fmt.Sprintf(" %d process(es) outlived the command and were killed.", e.Leftovers)
	}
	if e.Refused > 0 {
		out += fmt.Sprintf(" The cap of %d tasks refused %d fork(s) (peak %d).", e.Max, e.Refused, e.Peak)
	} else if e.Peak > 0 {
		out += fmt.Sprintf(" Peak %d tasks of the cap of %d.", e.Peak, e.Max)
	}
	if e.Zero {
		out += fmt.Sprintf(" Zero confirmed %s after the start.", show.DurMS(e.TookMS))
	} else {
		out += " The teardown could not confirm zero."
	}
	return out
}

// runStartMS is when the run itself started in its file (a drill
// records its set-up before it): the one origin of the picture's times
// and of the outcome's.
func runStartMS(events []timeline.Event) float64 {
	for _, e := range events {
		if e.Step == timeline.StepStart || e.Step == timeline.StepRunStart {
			return e.ElapsedMS
		}
	}
	return 0
}

func outcome(events []timeline.Event) string {
	for i := len(events) - 1; i >= 0; i-- {
		e := events[i]
		switch e.Step {
		case timeline.StepRunEnd:
			var end timeline.RunEnd
			e.Decode(&end)
			return runOutcome(end)
		case timeline.StepZero:
			// From the run's start, as the picture's bars are: a drill's
			// header said "confirmed 413ms" over a bar "zero 411ms".
			return fmt.Sprintf("Zero remain, confirmed %s after the run's start.", show.DurMS(e.ElapsedMS-runStartMS(events)))
		case timeline.StepSurvivors:
			return "Survivors remained: " + e.Msg
		case timeline.StepHold:
			return "Held frozen for inspection: " + e.Msg
		case timeline.StepNothingMatched:
			return "Nothing matched."
		case timeline.StepDryRun:
			return "Dry run: nothing was changed."
		case timeline.StepMethodFailed:
			return "No freeze method could be used: " + e.Msg
		case timeline.StepInterrupted:
			return "Interrupted: " + e.Msg
		case timeline.StepRefused:
			return "Refused: " + e.Msg
		case timeline.StepFailed:
			return "Failed: " + e.Msg
		case timeline.StepDrillEnd:
			return "Drill: " + e.Msg
		}
	}
	return "Unknown: the timeline ends before an outcome."
}
