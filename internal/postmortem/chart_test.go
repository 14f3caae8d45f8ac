package postmortem

import (
	"bytes"
	"freeze/internal/timeline"
	"strings"
	"testing"
)

// The picture: a point per step with a count, a mermaid chart of those
// counts, and a text bar each, the longest the largest count.
func TestChartOfARun(t *testing.T) {
	events, err := timeline.Parse([]byte(`{"time":"2026-12-01T10:00:00Z","elapsed_ms":0,"step":"start","msg":"start"}
{"time":"2026-12-01T10:00:00.01Z","elapsed_ms":10,"step":"match","stage":1,"msg":"m","matched":300}
{"time":"2026-12-01T10:00:00.02Z","elapsed_ms":20,"step":"freeze-round","stage":2,"msg":"f1","round":1,"matched":340}
{"time":"2026-12-01T10:00:00.03Z","elapsed_ms":30,"step":"freeze-round","stage":2,"msg":"f2","round":2,"matched":343}
{"time":"2026-12-01T10:00:00.13Z","elapsed_ms":130,"step":"kill-round","stage":3,"msg":"k1","round":1,"live":343}
{"time":"2026-12-01T10:00:00.14Z","elapsed_ms":140,"step":"zero","stage":4,"msg":"zero remain"}
`))
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, p := range Chart(events) {
		got = append(got, p.N)
	}
	if want := []int{300, 340, 343, 343, 0}; len(got) != len(want) || got[0] != 300 || got[2] != 343 || got[4] != 0 {
		t.Fatalf("points %v, want %v", got, want)
	}
	var b bytes.Buffer
	if err := Render(&b, events, "markdown"); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"```mermaid\nxychart-beta\n", `x-axis ["match 10ms", "freeze 1 20ms", "freeze 2 30ms", "kill 1 130ms", "zero 140ms"]`,
		"y-axis \"processes\" 0 --> 343\n", "    bar [300, 340, 343, 343, 0]\n",
		"kill 1         130ms     343 " + strings.Repeat("#", chartWidth) + "\n", "zero           140ms       0 \n"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
}
