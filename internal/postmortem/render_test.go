package postmortem

import (
	"bytes"
	"freeze/internal/timeline"
	"strings"
	"testing"
)

func TestRenderSaysWhereAPartialTimelineStops(t *testing.T) {
	in := `{"time":"2026-11-29T20:00:00Z","step":"start","elapsed_ms":0,"command":["freeze","--path","/x"],"msg":"freeze run started"}
{"time":"2026-11-29T20:00:00.5Z","step":"method","elapsed_ms":500,"stage":2,"method":"cgroup2","group":"/sys/fs/cgroup/g","why":"first method that works here","msg":"method cgroup2"}
{"time":"2026-11-29T20:00:01Z","step":"freeze-round","elapsed_ms":1000,"stage":2,"round":1,"moved":12,"msg":"round 1"}
`
	events, err := timeline.Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Render(&b, events, "markdown"); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"Command: `freeze --path /x`",
		"| wall time (UTC) | elapsed | step | what happened |",
		"Method: cgroup2 at /sys/fs/cgroup/g, because: first method that works here",
		"freeze-round: elapsed_ms", // never: fields only
	} {
		if want == "freeze-round: elapsed_ms" {
			if strings.Contains(out, want) {
				t.Fatalf("fixed keys leaked into the counts:\n%s", out)
			}
			continue
		}
		if !strings.Contains(out, want) {
			t.Fatalf("markdown lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "moved=12") || !strings.Contains(out, `stops early, after step "freeze-round"`) {
		t.Fatalf("markdown lacks the round counts or the early stop:\n%s", out)
	}
	if !strings.Contains(out, "Unknown: the timeline ends before an outcome.") {
		t.Fatalf("outcome of a partial timeline:\n%s", out)
	}
	if err := Render(&b, events, "yaml"); err == nil {
		t.Fatal("an unknown format rendered")
	}
}

// A finished run records its peak memory after the zero: the renderer
// must call it finished, with its outcome, not cut short.
func TestRenderFinishedRunWithEventsAfterTheEnd(t *testing.T) {
	in := `{"time":"2026-11-29T20:00:00Z","step":"start","elapsed_ms":0,"msg":"freeze run started"}
{"time":"2026-11-29T20:00:01.2Z","step":"zero","elapsed_ms":1200,"stage":4,"msg":"zero remain"}
{"time":"2026-11-29T20:00:01.3Z","step":"memory","elapsed_ms":1300,"stage":4,"msg":"peak 15 MiB"}
`
	events, err := timeline.Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Render(&b, events, "text"); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); strings.Contains(out, "stops early") || !strings.Contains(out, "Zero remain, confirmed 1.2s after the run's start.") {
		t.Fatalf("a finished run rendered as cut, or without its outcome:\n%s", out)
	}
}
