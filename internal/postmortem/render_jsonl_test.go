package postmortem

import (
	"bytes"
	"freeze/internal/timeline"
	"testing"
)

// jsonl gives back the file as it was read: a fleet's collection through
// a command that is freeze alone must lose nothing, and a number past
// 2^53 (an inode) must come back exact.
func TestRenderJSONLGivesBackTheFile(t *testing.T) {
	in := []byte(`{"time":"2026-12-02T04:00:00.000Z","elapsed_ms":0,"step":"start","command":["freeze","--path","/x"]}
{"time":"2026-12-02T04:00:00.100Z","elapsed_ms":100,"step":"match","stage":1,"msg":"3 live processes match","ino":18446744073709551557}
{"time":"2026-12-02T04:00:00.200Z","elapsed_ms":200,"step":"zero","stage":4}
`)
	events, err := timeline.Parse(in)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Render(&out, events, "jsonl"); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), in) {
		t.Errorf("jsonl:\n%s\nwant:\n%s", out.Bytes(), in)
	}
}
