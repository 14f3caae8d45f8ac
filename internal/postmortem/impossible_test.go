package postmortem

import (
	"bytes"
	"freeze/internal/timeline"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// negativeRun is the third audit's S5: a timeline whose freeze round
// counts -5 processes. Its text and markdown renders panicked
// (strings.Repeat with a negative count), and --fleet with it among
// other hosts' files stopped the whole table.
const negativeRun = `{"time":"2026-12-01T10:00:00Z","elapsed_ms":0,"step":"start","host":"bad.example"}
{"time":"2026-12-01T10:00:00.1Z","elapsed_ms":100,"step":"match","matched":300}
{"time":"2026-12-01T10:00:00.2Z","elapsed_ms":200,"step":"freeze-round","round":1,"matched":-5}
{"time":"2026-12-01T10:00:00.3Z","elapsed_ms":300,"step":"zero"}
`

// Impossible numbers are a parse error that names the line; the events
// before it render.
func TestParseRejectsImpossibleNumbers(t *testing.T) {
	for name, line := range map[string]string{
		"negative count":     `{"time":"2026-12-01T10:00:00Z","step":"freeze-round","matched":-5}`,
		"negative elapsed":   `{"time":"2026-12-01T10:00:00Z","step":"zero","elapsed_ms":-1}`,
		"overflowing count":  `{"time":"2026-12-01T10:00:00Z","step":"kill-round","live":1e300}`,
		"negative in a list": `{"time":"2026-12-01T10:00:00Z","step":"survivors","survivors":[41,-42]}`,
		"negative stage":     `{"time":"2026-12-01T10:00:00Z","step":"zero","stage":-1}`,
	} {
		first := `{"time":"2026-12-01T10:00:00Z","elapsed_ms":0,"step":"start"}`
		events, err := timeline.Parse([]byte(first + "\n" + line + "\n"))
		if err == nil || !strings.Contains(err.Error(), "line 2") {
			t.Errorf("%s: Parse = %v, want an error naming line 2", name, err)
		}
		if len(events) != 1 {
			t.Errorf("%s: %d events before the bad line, want 1", name, len(events))
		}
	}
	// What may be negative is read: an exit status of a signalled process.
	if _, err := timeline.Parse([]byte(`{"time":"2026-12-01T10:00:00Z","step":"run-exit","status":-1}`)); err != nil {
		t.Errorf("a status of -1: %v", err)
	}
}

// The negative run renders in every format, and a fleet holding it
// renders every host's row.
func TestANegativeCountStopsNoRender(t *testing.T) {
	events, err := timeline.Parse([]byte(negativeRun))
	if err == nil {
		t.Fatal("the negative count parsed")
	}
	for _, format := range []string{"text", "markdown", "svg", "json"} {
		if err := Render(&bytes.Buffer{}, events, format); err != nil {
			t.Errorf("render %s: %v", format, err)
		}
	}
	dir := fleetFixture(t)
	os.MkdirAll(filepath.Join(dir, "bad"), 0o755)
	if err := os.WriteFile(filepath.Join(dir, "bad", "freeze-x.jsonl"), []byte(negativeRun), 0o644); err != nil {
		t.Fatal(err)
	}
	runs, err := LoadFleet([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	var md bytes.Buffer
	if err := RenderFleet(&md, runs, "markdown"); err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"web-1", "web-2", "db-1", "bad"} {
		if !strings.Contains(md.String(), host) {
			t.Errorf("the fleet's table has no row for %s:\n%s", host, md.String())
		}
	}
	if !strings.Contains(md.String(), "never negative") {
		t.Errorf("the fleet does not say what is wrong with the bad host's file:\n%s", md.String())
	}
}
