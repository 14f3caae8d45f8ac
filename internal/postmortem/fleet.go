package postmortem

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"freeze/internal/container"
	"freeze/internal/show"
	"freeze/internal/timeline"
)

// LoadFleet reads timelines from files and directories: a directory is
// walked for *.jsonl files, and a file found in a subdirectory of it is
// named after that subdirectory (its first level: the host it was
// collected from). Unreadable files become rows that say so, so one bad
// file never hides the other hosts. The rows are sorted by host, then
// start time.
func LoadFleet(paths []string) ([]timeline.HostRun, error) {
	var f fleet
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			f.add("", p)
			continue
		}
		if err := f.walk(p); err != nil {
			return nil, err
		}
	}
	runs := f.runs
	if len(runs) == 0 {
		return nil, fmt.Errorf("no timeline (*.jsonl) found in %s", strings.Join(paths, ", "))
	}
	sort.SliceStable(runs, func(i, j int) bool {
		if runs[i].Host != runs[j].Host {
			return runs[i].Host < runs[j].Host
		}
		return runs[i].Started < runs[j].Started
	})
	return runs, nil
}

// fleet is the runs LoadFleet has read so far.
type fleet struct{ runs []timeline.HostRun }

// add reads one timeline, of host ("" for the hostname it recorded).
func (f *fleet) add(host, file string) {
	events, err := timeline.ReadFile(file)
	if err != nil && len(events) == 0 {
		f.runs = append(f.runs, timeline.HostRun{Host: host, File: file, Outcome: "unreadable", Exit: -1,
			Error: err.Error(), Attention: "the timeline cannot be read: " + err.Error()})
		if host == "" {
			f.runs[len(f.runs)-1].Host = strings.TrimSuffix(filepath.Base(file), ".jsonl")
		}
		return
	}
	h := timeline.Summarize(host, file, events)
	if err != nil {
		// A damaged line (cut off, or an impossible number) ends what
		// can be read: the row says so, with the run up to it.
		h.Error = err.Error()
		damaged := "the timeline is damaged, read up to its error (" + err.Error() + ")"
		if h.Attention != "" {
			damaged += "; " + h.Attention
		}
		h.Attention = damaged
	}
	f.runs = append(f.runs, h)
}

// walk reads a directory of one subdirectory per host.
func (f *fleet) walk(p string) error {
	return filepath.WalkDir(p, func(file string, d fs.DirEntry, err error) error {
		if err != nil && file != p {
			// One host's directory that cannot be read is a row of its
			// own, not the end of the fleet's report (#24, finding 10).
			rel, _ := filepath.Rel(p, file)
			host, _, _ := strings.Cut(rel, string(filepath.Separator))
			f.runs = append(f.runs, timeline.HostRun{Host: host, File: file, Outcome: "unreadable", Exit: -1,
				Error: err.Error(), Attention: "cannot be read: " + err.Error()})
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(file, ".jsonl") {
			return nil
		}
		rel, _ := filepath.Rel(p, file)
		host := ""
		if i := strings.IndexByte(rel, filepath.Separator); i > 0 {
			host = rel[:i]
		}
		f.add(host, file)
		return nil
	})
}

// FleetSummary is the fleet postmortem as data (--format json).
type FleetSummary struct {
	Hosts     int                `json:"hosts"`
	Runs      []timeline.HostRun `json:"runs"`
	Outcomes  map[string]int     `json:"outcomes"`
	Attention []string           `json:"attention"` // hosts that need an operator
}

// Fleet sums up runs.
func Fleet(runs []timeline.HostRun) FleetSummary {
	s := FleetSummary{Runs: runs, Outcomes: map[string]int{}, Attention: []string{}}
	hosts := map[string]bool{}
	for _, r := range runs {
		hosts[r.Host] = true
		s.Outcomes[r.Outcome]++
		if r.Attention != "" && (len(s.Attention) == 0 || s.Attention[len(s.Attention)-1] != r.Host) {
			s.Attention = append(s.Attention, r.Host)
		}
	}
	s.Hosts = len(hosts)
	return s
}

// zeroBars writes one bar per run that reached zero, as long as its time
// to zero against the slowest: which hosts took the longest.
func zeroBars(w io.Writer, runs []timeline.HostRun) {
	slowest := 0.0
	for _, r := range runs {
		if r.Outcome == string(timeline.StepZero) {
			slowest = max(slowest, r.ZeroMS)
		}
	}
	if slowest <= 0 {
		return
	}
	fmt.Fprintln(w, "\n## Time to zero, by host\n\n```")
	for _, r := range runs {
		if r.Outcome != string(timeline.StepZero) {
			continue
		}
		n := int(r.ZeroMS/slowest*chartWidth + 0.5)
		fmt.Fprintf(w, "%-20s %9s %s\n", show.Term(r.Host), show.DurMS(r.ZeroMS), strings.Repeat("#", max(n, 1)))
	}
	fmt.Fprintln(w, "```")
}

// RenderFleet writes the fleet postmortem: a table with one row per run
// (per host, unless a host ran more than once), the hosts that need
// attention, then each run's own timeline. format is markdown or json.
func RenderFleet(w io.Writer, runs []timeline.HostRun, format string) error {
	s := Fleet(runs)
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	case "markdown":
	default:
		return fmt.Errorf("unknown format %q for a fleet: use markdown or json", format)
	}
	var counts []string
	for k, n := range s.Outcomes {
		counts = append(counts, fmt.Sprintf("%s %d", show.Markdown(k), n))
	}
	sort.Strings(counts)
	fmt.Fprintf(w, "# freeze fleet postmortem: %d hosts, %d runs\n\n", s.Hosts, len(runs))
	fmt.Fprintf(w, "Outcomes: %s.\n\n", strings.Join(counts, ", "))
	fmt.Fprintln(w, "| host | outcome | method | matched | in | time to zero | survivors | exit | hostname | kernel | started (UTC) |")
	fmt.Fprintln(w, "| --- | --- | --- | ---: | --- | ---: | ---: | ---: | --- | --- | --- |")
	for _, r := range runs {
		zero, exit := "-", "-"
		if r.Outcome == string(timeline.StepZero) {
			zero = show.DurMS(r.ZeroMS)
		}
		if r.Exit >= 0 {
			exit = fmt.Sprint(r.Exit)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %d | %s | %s | %d | %s | %s | %s | %s |\n", cell(r.Host), cell(r.Outcome), cell(show.Dash(r.Method)), r.Matched, cell(whereCell(r.Where)), zero,
			r.Survivors, exit, cell(show.Dash(r.Hostname)), cell(show.Dash(r.Kernel)), show.Dash(r.Started))
	}
	zeroBars(w, runs)
	fmt.Fprintln(w, "\n## Hosts that need attention")
	fmt.Fprintln(w)
	n := 0
	for _, r := range runs {
		if r.Attention != "" {
			n++
			fmt.Fprintf(w, "- **%s**: %s (%s)\n", cell(r.Host), show.Markdown(r.Attention), show.MarkdownCode(r.File))
		}
	}
	if n == 0 {
		fmt.Fprintln(w, "None: every host reached zero, found nothing to match, or only looked (dry run).")
	}
	for _, r := range runs {
		fmt.Fprintf(w, "\n## %s: %s\n\nFile: %s\n", cell(r.Host), cell(r.Outcome), show.MarkdownCode(r.File))
		if r.MachineID != "" {
			fmt.Fprintf(w, "\nMachine id: %s\n", show.MarkdownCode(r.MachineID))
		}
		fmt.Fprintln(w)
		if len(r.Events) == 0 {
			fmt.Fprintf(w, "\n%s\n", show.Markdown(r.Error))
			continue
		}
		if err := render(w, r.Events, "markdown", 3); err != nil {
			fmt.Fprintf(w, "\n%v\n", err)
		}
	}
	return nil
}

// cell keeps a value from breaking a markdown table row.
func cell(s string) string { return show.Markdown(s) }

// whereCell names the containers and pods of a run ("host" for none).
func whereCell(ws []timeline.Where) string {
	var parts []string
	for _, w := range ws {
		parts = append(parts, container.Place{Runtime: w.Runtime, ID: w.Container, Pod: w.Pod}.String())
	}
	if len(parts) == 0 {
		return "host"
	}
	return strings.Join(parts, "; ")
}
