package timeline

import (
	"io"
	"testing"
)

// FuzzParse: a timeline is input an attacker may have written (restore
// reads it as root, --fleet reads what hosts sent). Parse must never
// panic, and what it returns must survive what readers do with it:
// summarising, finding revocations' fields, rendering.
//
//	go test ./internal/timeline -run '^$' -fuzz FuzzParse -fuzztime 30s
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		`{"time":"2026-12-01T10:00:00Z","elapsed_ms":0,"stage":0,"step":"start","msg":"x","command":["freeze","--path","/tmp/x"]}`,
		`{"time":"2026-12-01T10:00:00Z","elapsed_ms":1e308,"stage":-1,"step":"revoked","msg":"$(id)","path":"/tmp/x","mode":2559,"new_mode":511}`,
		`{"time":"2026-12-01T10:00:00Z","stage":2,"step":"gate-detached","forks_stopped":"many","execs_stopped":null}`,
		`{"time":"bad"}`,
		"{\"time\":\"2026-12-01T10:00:00Z\",\"step\":\"zero\",\"msg\":\"\xff\xfe\"}\n\n{",
		`[1,2,3]`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		events, _ := Parse(b)
		h := Summarize("", "f.jsonl", events)
		_ = h.Attention
		for _, format := range []string{"json", "markdown", "text"} {
			Render(io.Discard, events, format)
		}
	})
}
