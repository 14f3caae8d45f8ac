package main

import (
	"bytes"
	"strings"
	"testing"
)

// A request's relative --timeline is refused by the guard, which cannot
// know the asker's directory (#24, finding 9: it was written in the
// guard's own). The CLI resolves it before handing over.
func TestRelativeTimelineOfARequest(t *testing.T) {
	for words, relative := range map[string]bool{
		"--path /tmp/x/tool --timeline t.jsonl":         true,
		"--path /tmp/x/tool -t sub/t.jsonl":             true,
		"--path /tmp/x/tool --timeline /var/tmp/t.json": false,
		"--path /tmp/x/tool":                            false,
	} {
		var stderr bytes.Buffer
		// /tmp/x/tool does not exist: a request that passes the check
		// is refused next, as a usage error, before anything runs.
		res := guardRequest(out{&stderr, &stderr}, strings.Fields(words), nil)
		said := strings.Contains(stderr.String(), "is relative: the guard does not know your directory")
		if res.Code != exitUsage || said != relative {
			t.Errorf("%q: exit %d, refused as relative %v, want exit 2 and %v; said:\n%s", words, res.Code, said, relative, stderr.String())
		}
	}
}
