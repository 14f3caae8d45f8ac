package postmortem

import (
	"bytes"
	"freeze/internal/timeline"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The picture's bars stand at their times, and its header's time is the
// zero bar's (#37: bars at 105, 105, 408 and 411 ms were evenly spaced
// under "time since the run's start", and a drill's header said
// "confirmed 413ms" over a bar "zero 411ms").
func TestSVGBarsOnATrueTimeAxis(t *testing.T) {
	in := `{"time":"2026-12-01T10:00:00.000Z","elapsed_ms":0,"step":"drill","msg":"set-up"}
{"time":"2026-12-01T10:00:00.002Z","elapsed_ms":2,"step":"start"}
{"time":"2026-12-01T10:00:00.107Z","elapsed_ms":107,"step":"match","matched":300}
{"time":"2026-12-01T10:00:00.107Z","elapsed_ms":107,"step":"freeze-round","round":1,"matched":300}
{"time":"2026-12-01T10:00:00.410Z","elapsed_ms":410,"step":"kill-round","round":1,"live":300}
{"time":"2026-12-01T10:00:00.413Z","elapsed_ms":413,"step":"zero"}
`
	events, err := timeline.Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := SVG(&b, events); err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	if !strings.Contains(svg, "confirmed 411ms after the run") {
		t.Errorf("the header's time is not the zero bar's (411ms):\n%s", svg)
	}
	var xs []float64
	for _, m := range regexp.MustCompile(`<rect class="bar" x="([0-9.]+)"`).FindAllStringSubmatch(svg, -1) {
		x, _ := strconv.ParseFloat(m[1], 64)
		xs = append(xs, x)
	}
	if len(xs) != 4 {
		t.Fatalf("%d bars, want 4:\n%s", len(xs), svg)
	}
	// match and freeze 1 came at one moment: side by side. kill 1 came
	// 303 ms later and zero 3 ms after it: far, then near.
	near, far, end := xs[1]-xs[0], xs[2]-xs[1], xs[3]-xs[2]
	if far < 10*near || far < 10*end {
		t.Errorf("bars not to scale: gaps %.1f (same moment), %.1f (303 ms), %.1f (3 ms)", near, far, end)
	}
}

// #52: the picture as an operator attaches it. Bars too close to be told
// apart share one label ("freeze 1-3"; "kill 1, zero": zero had neither
// bar nor label), zero has a mark, the last bar stands clear of the
// right edge, and the time axis has no second row of ticks (which read
// as typos under the steps' own times).
func TestSVGLabelsEveryStepAndKeepsClearOfTheEdge(t *testing.T) {
	in := `{"time":"2026-12-01T10:00:00.000Z","elapsed_ms":0,"step":"start"}
{"time":"2026-12-01T10:00:00.074Z","elapsed_ms":74,"step":"match","matched":319}
{"time":"2026-12-01T10:00:00.318Z","elapsed_ms":318,"step":"freeze-round","round":1,"matched":319}
{"time":"2026-12-01T10:00:00.320Z","elapsed_ms":320,"step":"freeze-round","round":2,"matched":334}
{"time":"2026-12-01T10:00:00.322Z","elapsed_ms":322,"step":"freeze-round","round":3,"matched":334}
{"time":"2026-12-01T10:00:00.759Z","elapsed_ms":759,"step":"kill-round","round":1,"live":334}
{"time":"2026-12-01T10:00:00.762Z","elapsed_ms":762,"step":"zero"}
`
	events, err := timeline.Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := SVG(&b, events); err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	for _, want := range []string{">match<", ">freeze 1-3<", ">kill 1, zero<", `fill="#3a8a3a"/>`, "to scale: 0 to 762ms"} {
		if !strings.Contains(svg, want) {
			t.Errorf("the picture has no %q:\n%s", want, svg)
		}
	}
	if n := strings.Count(svg, ">381ms<"); n != 0 {
		t.Errorf("a tick at half the run (381ms) is written as a second row of times")
	}
	var right float64
	for _, m := range regexp.MustCompile(`<rect class="bar" x="([0-9.]+)" y="[0-9.]+" width="([0-9.]+)"`).FindAllStringSubmatch(svg, -1) {
		x, _ := strconv.ParseFloat(m[1], 64)
		w, _ := strconv.ParseFloat(m[2], 64)
		right = max(right, x+w)
	}
	if edge := float64(svgWidth - svgRight); right > edge-20 {
		t.Errorf("the last bar ends at %.1f, within 20 of the plot's right edge (%.0f)", right, edge)
	}
}
