package postmortem

import (
	"freeze/internal/timeline"
	"io"
	"testing"
)

// FuzzParse: a timeline is input an attacker may have written (restore
// reads it as root, --fleet reads what hosts sent). Parse must never
// panic, and what it returns must survive what readers do with it:
// summarising, finding revocations' fields, rendering.
//
//	go test ./internal/postmortem -run '^$' -fuzz FuzzParse -fuzztime 30s
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		`{"time":"2026-12-01T10:00:00Z","elapsed_ms":0,"stage":0,"step":"start","msg":"x","command":["freeze","--path","/tmp/x"]}`,
		`{"time":"2026-12-01T10:00:00Z","elapsed_ms":1e308,"stage":-1,"step":"revoked","msg":"$(id)","path":"/tmp/x","mode":2559,"new_mode":511}`,
		`{"time":"2026-12-01T10:00:00Z","stage":2,"step":"gate-detached","forks_stopped":"many","execs_stopped":null}`,
		`{"time":"bad"}`,
		"{\"time\":\"2026-12-01T10:00:00Z\",\"step\":\"zero\",\"msg\":\"\xff\xfe\"}\n\n{",
		`[1,2,3]`,
		// The third audit's S5: a negative count panicked the renders.
		negativeRun,
		`{"time":"2026-12-01T10:00:00Z","step":"kill-round","round":1,"live":1e300}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		events, _ := timeline.Parse(b)
		h := timeline.Summarize("", "f.jsonl", events)
		_ = h.Attention
		for _, format := range []string{"json", "markdown", "text"} {
			Render(io.Discard, events, format)
		}
	})
}

// FuzzFleet: --fleet reads what every host sent; one host's file must
// never stop the table of the others. The fleet's rows and renders must
// survive anything Parse returns.
//
//	go test ./internal/postmortem -run '^$' -fuzz FuzzFleet -fuzztime 30s
func FuzzFleet(f *testing.F) {
	f.Add([]byte(negativeRun))
	f.Add([]byte(`{"time":"2026-12-01T10:00:00Z","elapsed_ms":0,"step":"start","host":"h"}` + "\n" + `{"time":"2026-12-01T10:00:01Z","elapsed_ms":1000,"step":"survivors","survivors":[1,2]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		events, _ := timeline.Parse(b)
		runs := []timeline.HostRun{timeline.Summarize("a", "a.jsonl", events), timeline.Summarize("", "b.jsonl", events)}
		for _, format := range []string{"markdown", "json"} {
			if err := RenderFleet(io.Discard, runs, format); err != nil {
				t.Fatal(err)
			}
		}
	})
}
