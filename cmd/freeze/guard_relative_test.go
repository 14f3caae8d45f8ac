package main

import (
	"strings"
	"testing"
)

// A request's relative --timeline is refused by the guard, which cannot
// know the asker's directory (#24, finding 9: it was written in the
// guard's own). The CLI resolves it before handing over.
func TestRelativeTimelineOfARequest(t *testing.T) {
	for words, want := range map[string]string{
		"--path /tmp/x/tool --timeline t.jsonl":         "t.jsonl",
		"--path /tmp/x/tool -t sub/t.jsonl":             "sub/t.jsonl",
		"--path /tmp/x/tool --timeline /var/tmp/t.json": "",
		"--path /tmp/x/tool":                            "",
	} {
		if got := relativeTimeline(strings.Fields(words)); got != want {
			t.Errorf("%q: %q, want %q", words, got, want)
		}
	}
}
