package postmortem

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"time"

	"freeze/internal/show"
	"freeze/internal/timeline"
)

// The picture's size, in SVG user units (pixels at 100%).
const (
	svgWidth  = 760
	svgHeight = 440
	svgLeft   = 70 // room for the y axis's numbers
	svgRight  = 20
	svgTop    = 130 // the title, the host, the version, the command and the outcome
	svgBottom = 64  // each bar's step and time
)

// SVG writes the picture of the chain over the run as one self-contained
// SVG file: a bar per step (the match, each freeze round's set, those
// alive at each kill round, zero), its count above it, its step and time
// since the run's start below. A browser or any SVG viewer shows it, and
// it attaches to a postmortem as a file.
//
// Every string a user controls (the command, the host) is written as
// escaped character data: a command line holding "</text><script>" is
// text in the picture, not markup.
func SVG(w io.Writer, events []timeline.Event) error {
	pts := Chart(events)
	if len(pts) == 0 {
		return fmt.Errorf("the timeline has no match, round or zero to draw: nothing ran past the start")
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		svgWidth, svgHeight, svgWidth, svgHeight)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", svgWidth, svgHeight)
	svgTitle(&b, events)
	most := 1
	for _, p := range pts {
		most = max(most, p.N)
	}
	svgAxes(&b, most)
	svgBars(&b, pts, most)
	b.WriteString("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

// svgTitle writes the picture's heading lines: what it shows, the host
// and start, the command as it pastes back, and the outcome.
func svgTitle(b *bytes.Buffer, events []timeline.Event) {
	lines := []string{"Processes of the chain at each step"}
	for _, e := range events {
		// The run's start, wherever it is: a drill records its set-up
		// before it.
		var start timeline.Start
		if e.Step != timeline.StepStart || e.Decode(&start) != nil {
			continue
		}
		lines = append(lines, fmt.Sprintf("%s, kernel %s, %s", show.Dash(start.Host), show.Dash(start.Kernel), e.Time.UTC().Format(time.RFC3339)),
			show.Dash(start.Version))
		if len(start.Command) > 0 {
			lines = append(lines, show.ShellJoin(start.Command))
		}
		break
	}
	lines = append(lines, outcome(events))
	for i, l := range lines {
		if i == 0 {
			fmt.Fprintf(b, `<text x="%d" y="22" font-size="16" font-weight="bold">%s</text>`+"\n", svgLeft, show.XML(l))
			continue
		}
		fmt.Fprintf(b, `<text x="%d" y="%d" font-size="11">%s</text>`+"\n", svgLeft, 26+i*16, show.XML(show.Clip(show.Term(l), 110)))
	}
}

// svgAxes writes the y axis with three gridlines (0, half, the most) and
// the x axis.
func svgAxes(b *bytes.Buffer, most int) {
	plotH := float64(svgHeight - svgTop - svgBottom)
	for _, v := range []int{0, most / 2, most} {
		y := float64(svgTop) + plotH - plotH*float64(v)/float64(most)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#dddddd"/>`+"\n", svgLeft, y, svgWidth-svgRight, y)
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end">%d</text>`+"\n", svgLeft-6, y+4, v)
	}
	fmt.Fprintf(b, `<text x="14" y="%d" transform="rotate(-90 14 %d)" text-anchor="middle">processes</text>`+"\n",
		svgTop+int(plotH)/2, svgTop+int(plotH)/2)
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333333"/>`+"\n", svgLeft, svgTop, svgLeft, svgHeight-svgBottom)
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333333"/>`+"\n", svgLeft, svgHeight-svgBottom, svgWidth-svgRight, svgHeight-svgBottom)
}

// svgBars writes one bar per point at its time, on a true time axis
// from the run's start to its last point, with ticks at 0, half and the
// end. Bars of steps that came within a few milliseconds of each other
// stand side by side at that time; a label is written where there is
// room for it, and every bar keeps its step, time and count in its
// tooltip. (The bars were spaced evenly over "time since the run's
// start": 105, 105, 408 and 411 ms sat as far apart as 0 and 105.)
// Freeze's steps are blue, kill rounds red, zero green.
func svgBars(b *bytes.Buffer, pts []ChartPoint, most int) {
	plotW := float64(svgWidth - svgLeft - svgRight)
	plotH := float64(svgHeight - svgTop - svgBottom)
	base := float64(svgHeight - svgBottom)
	last := 0.0
	for _, p := range pts {
		last = max(last, p.AtMS)
	}
	if last <= 0 {
		last = 1
	}
	const barW = 12.0
	// Room for a bar's width at the start, and for the last group's
	// label at the end (#52: the last bar sat on the right edge).
	inner := plotW - 2*barW - 40
	xOf := func(ms float64) float64 { return float64(svgLeft) + barW + inner*ms/last }
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333333"/>`+"\n", xOf(0), base, xOf(0), base+4)
	type drawn struct {
		p   ChartPoint
		mid float64
		h   float64
	}
	var bars []drawn
	prevX := -1e9
	for _, p := range pts {
		x := xOf(p.AtMS) - barW/2
		if x < prevX+barW { // the same moment as the last bar: beside it
			x = prevX + barW
		}
		prevX = x
		h := plotH * float64(p.N) / float64(most)
		fmt.Fprintf(b, `<rect class="bar" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s at %s: %d</title></rect>`+"\n",
			x, base-h, barW-1, h, barColor(p.Label), show.XML(p.Label), show.DurMS(p.AtMS), p.N)
		if p.Label == "zero" {
			// Zero has no height: a green mark on the axis says it.
			fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="4" fill="%s"/>`+"\n", x, base-4, barW-1, barColor(p.Label))
		}
		bars = append(bars, drawn{p, x + barW/2, h})
	}
	// One label for each group of bars too close to be told apart
	// (#52: "freeze 2" and "freeze 3" had none, and zero neither): its
	// steps ("freeze 1-3", "kill 1, zero"), the count of its tallest
	// bar above it, and the group's first time below.
	for i := 0; i < len(bars); {
		j := i + 1
		for j < len(bars) && bars[j].mid-bars[i].mid < 56 {
			j++
		}
		group := bars[i:j]
		top := group[0]
		for _, d := range group {
			if d.h > top.h {
				top = d
			}
		}
		mid := (group[0].mid + group[len(group)-1].mid) / 2
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="%s">%d</text>`+"\n", top.mid, base-top.h-5, barColor(top.p.Label), top.p.N)
		var labels []string
		for _, d := range group {
			labels = append(labels, d.p.Label)
		}
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", mid, base+18, show.XML(groupLabel(labels)))
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#666666">%s</text>`+"\n", mid, base+32, show.DurMS(group[0].p.AtMS))
		i = j
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end" fill="#666666">time since the run's start, to scale: 0 to %s</text>`+"\n", svgWidth-svgRight, svgHeight-2, show.DurMS(last))
}

// barColor is a step's color: freeze's steps blue, kill rounds red,
// zero green.
func barColor(label string) string {
	switch {
	case strings.HasPrefix(label, "kill"):
		return "#c0504d"
	case label == "zero":
		return "#3a8a3a"
	}
	return "#4878a8"
}

// groupLabel names a group of steps: "freeze 1-3" for a run of one
// kind's rounds, else the steps joined ("kill 1, zero").
func groupLabel(labels []string) string {
	if len(labels) == 1 {
		return labels[0]
	}
	kind, first, _ := strings.Cut(labels[0], " ")
	lastKind, lastN, _ := strings.Cut(labels[len(labels)-1], " ")
	same := first != "" && kind == lastKind
	for _, l := range labels {
		if k, _, _ := strings.Cut(l, " "); k != kind {
			same = false
		}
	}
	if same {
		return kind + " " + first + "-" + lastN
	}
	return strings.Join(labels, ", ")
}
