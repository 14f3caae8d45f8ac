package timeline

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

func TestRecordWritesLinesAndReadsBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.jsonl")
	var seen []string
	r, err := New(path, func(e Event) { seen = append(seen, string(e.Step)) })
	if err != nil {
		t.Fatal(err)
	}
	r.Record(0, "start", "started", F{"command": []string{"freeze", "--path", "/x"}})
	r.Record(2, "method", "m", F{"method": "cgroup2", "group": "/g", "why": "first"})
	r.Record(4, "zero", "zero remain", nil)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	events, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 3 || events[1].Fields["method"] != "cgroup2" || events[1].Stage != 2 || strings.Join(seen, ",") != "start,method,zero" {
		t.Fatalf("events %+v, seen %v", events, seen)
	}
	// Elapsed is measured from the recorder's start: the gap between two
	// events' elapsed times is the gap between their wall times.
	for _, e := range events[1:] {
		gap := float64(e.Time.Sub(events[0].Time).Microseconds()) / 1000
		if d := e.ElapsedMS - events[0].ElapsedMS - gap; d > 0.01 || d < -0.01 {
			t.Fatalf("event %q: elapsed %.3f ms after the first, but its time is %.3f ms after", e.Step, e.ElapsedMS-events[0].ElapsedMS, gap)
		}
	}
}

func TestParseErrorsNameTheLine(t *testing.T) {
	tests := []struct {
		name, in, want string
		keep           int
	}{
		{"not json", `{"time":"2026-11-29T20:00:00Z","step":"start","elapsed_ms":0}` + "\nnot json\n", "line 2: not a timeline event", 1},
		{"truncated last line", `{"time":"2026-11-29T20:00:00Z","step":"start","elapsed_ms":0}` + "\n" + `{"time":"2026-11-29T20:00:01Z","st`, "line 2", 1},
		{"no time", `{"step":"start"}`, `line 1: bad or missing "time"`, 0},
		{"no step", `{"time":"2026-11-29T20:00:00Z"}`, `line 1: missing "step"`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			events, err := Parse([]byte(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want %q", err, tt.want)
			}
			if len(events) != tt.keep {
				t.Fatalf("kept %d events before the error, want %d", len(events), tt.keep)
			}
		})
	}
}

func TestRenderSaysWhereAPartialTimelineStops(t *testing.T) {
	in := `{"time":"2026-11-29T20:00:00Z","step":"start","elapsed_ms":0,"command":["freeze","--path","/x"],"msg":"freeze run started"}
{"time":"2026-11-29T20:00:00.5Z","step":"method","elapsed_ms":500,"stage":2,"method":"cgroup2","group":"/sys/fs/cgroup/g","why":"first method that works here","msg":"method cgroup2"}
{"time":"2026-11-29T20:00:01Z","step":"freeze-round","elapsed_ms":1000,"stage":2,"round":1,"moved":12,"msg":"round 1"}
`
	events, err := Parse([]byte(in))
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

func TestUnwritableTimelineStaysInMemory(t *testing.T) {
	r, err := New("/proc/version/t.jsonl", nil)
	if err == nil {
		t.Fatal("no error for an unwritable location")
	}
	r.Record(0, "start", "s", nil)
	if len(r.Events()) != 1 || r.Path() != "" || r.Close() != nil {
		t.Fatal("the in-memory recorder did not keep the event")
	}
}

// A finished run records its peak memory after the zero: the renderer
// must call it finished, with its outcome, not cut short.
func TestRenderFinishedRunWithEventsAfterTheEnd(t *testing.T) {
	in := `{"time":"2026-11-29T20:00:00Z","step":"start","elapsed_ms":0,"msg":"freeze run started"}
{"time":"2026-11-29T20:00:01.2Z","step":"zero","elapsed_ms":1200,"stage":4,"msg":"zero remain"}
{"time":"2026-11-29T20:00:01.3Z","step":"memory","elapsed_ms":1300,"stage":4,"msg":"peak 15 MiB"}
`
	events, err := Parse([]byte(in))
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
