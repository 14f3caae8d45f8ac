package timeline

import (
	"bytes"
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
	events, err := Parse([]byte(in))
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
