package timeline

import (
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
