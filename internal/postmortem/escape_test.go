package postmortem

import (
	"bytes"
	"freeze/internal/timeline"
	"strings"
	"testing"
	"time"
)

// A timeline whose strings an attacker chose (the chain's path, its
// host name) renders as text: no terminal control sequence reaches the
// operator's terminal, and in markdown no table cell, code span, link or
// HTML tag is opened or closed by them (#24, finding 2; on b1884f8 the
// text format printed them raw and markdown escaped only |).
func TestRenderKeepsAttackerStringsText(t *testing.T) {
	evil := "/tmp/x/\x1b]0;owned\x07tool`|<img src=x onerror=alert(1)>[a](http://e)\nnext"
	events := []timeline.Event{
		{Time: time.Unix(1700000000, 0), Step: timeline.StepStart, Msg: "freeze run started on " + evil, Fields: map[string]any{"command": []any{"freeze", "--path", evil}}},
		{Time: time.Unix(1700000001, 0), Step: timeline.StepZero, Msg: "zero remain: " + evil},
	}
	var text, md bytes.Buffer
	if err := Render(&text, events, "text"); err != nil {
		t.Fatal(err)
	}
	if err := Render(&md, events, "markdown"); err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"text": text.String(), "markdown": md.String()} {
		if strings.ContainsAny(out, "\x1b\x07") {
			t.Errorf("%s: a control character reaches the output:\n%q", name, out)
		}
		if strings.Contains(out, "\nnext") {
			t.Errorf("%s: a newline in a path starts a line of its own", name)
		}
	}
	for _, line := range strings.Split(md.String(), "\n") {
		switch {
		case strings.HasPrefix(line, "| "):
			if strings.Count(strings.ReplaceAll(line, `\|`, ""), "|") != 5 {
				t.Errorf("a table row with other than 4 cells: %s", line)
			}
			plain := strings.NewReplacer("\\`", "", `\]`, "", `\[`, "").Replace(line)
			for _, bad := range []string{"<img", "](", "`", "["} {
				if strings.Contains(plain, bad) {
					t.Errorf("a table row holds %q unescaped: %s", bad, line)
				}
			}
		case strings.HasPrefix(line, "Command: "):
			// Inside a code span markdown shows < and [ as they are; the
			// span's fence must be longer than the path's backticks.
			if !strings.HasPrefix(line, "Command: `` ") || !strings.HasSuffix(line, " ``") {
				t.Errorf("the command's code span can be closed from inside: %s", line)
			}
		}
	}
}

// A $(...) or a backquote in a recorded string is written as a JSON
// escape: the line reads back the same, and a shell that sources it runs
// nothing (#24, finding 2).
func TestRecordsAreShellInert(t *testing.T) {
	e := timeline.Event{Time: time.Unix(1700000000, 0), Step: timeline.StepStart, Msg: "path /tmp/$(touch /tmp/owned)/`id`"}
	b, err := e.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.ContainsAny(b, "$`") {
		t.Fatalf("the record holds $ or a backquote: %s", b)
	}
	events, err := timeline.Parse(b)
	if err != nil || len(events) != 1 || events[0].Msg != e.Msg {
		t.Fatalf("read back %+v (%v), want the message %q", events, err, e.Msg)
	}
}

// The Outcome line carries a user's string where the run ended with one
// (refused, survivors, held, interrupted): the second audit's directory
// named with a terminal escape and a markdown row was printed raw there,
// and in the fleet table's Outcome and Method cells.
func TestOutcomeLineAndFleetCellsAreEscaped(t *testing.T) {
	evil := "/tmp/\x1b]0;owned\x07d\n| forged | row |"
	events := []timeline.Event{
		{Time: time.Unix(1700000000, 0), Step: timeline.StepStart, Msg: "freeze started"},
		{Time: time.Unix(1700000001, 0), Step: timeline.StepRefused, Msg: "refused " + evil},
	}
	for _, format := range []string{"text", "markdown"} {
		var out bytes.Buffer
		if err := Render(&out, events, format); err != nil {
			t.Fatal(err)
		}
		if strings.ContainsAny(out.String(), "\x1b\x07") || strings.Contains(out.String(), "\n| forged") {
			t.Errorf("%s: the Outcome line is raw:\n%q", format, out.String())
		}
	}
	var md bytes.Buffer
	runs := []timeline.HostRun{{Host: "h", Outcome: "zero" + evil, Method: "bpf" + evil, Exit: 0, Where: []timeline.Where{{Runtime: "podman" + evil, Container: "abc" + evil}}}}
	RenderFleet(&md, runs, "markdown")
	for _, line := range strings.Split(md.String(), "\n") {
		if strings.HasPrefix(line, "| h ") && strings.Count(strings.ReplaceAll(line, `\|`, ""), "|") != 12 {
			t.Errorf("a fleet row with a forged cell: %s", line)
		}
	}
	if strings.ContainsAny(md.String(), "\x1b\x07") {
		t.Errorf("the fleet table holds a control character:\n%q", md.String())
	}
}
