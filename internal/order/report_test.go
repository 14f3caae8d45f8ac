package order

import (
	"bytes"
	"strings"
	"testing"

	"freeze/internal/proctest"
	"freeze/internal/say"
	"freeze/internal/stop"
	"freeze/internal/timeline"
)

// A hold whose set left processes stopped outside the group (their moves
// failed) says so, and its thaw continues them: thawing the group alone
// would leave them stopped for good.
func TestAHoldSaysToContinueWhatItStoppedOutside(t *testing.T) {
	g := proctest.New(t).NewGroup()
	var said bytes.Buffer
	Report(say.Out{Stdout: &said, Stderr: &said}, Flags{paths: []string{"/opt/x/chain"}},
		stop.Report{Outcome: timeline.StepHold, Stop: stop.Outcome{Kind: stop.Held, Matched: 5, Group: g, StoppedOutside: []int{4101, 4102}}})
	out := said.String()
	if !strings.Contains(out, "stopped by SIGSTOP outside fixture group, their moves having failed: 4101 4102") ||
		!strings.Contains(out, "to thaw instead:   nothing: a fixture; then kill -CONT 4101 4102") {
		t.Fatalf("the hold does not name what it stopped outside, or its thaw leaves them stopped:\n%s", out)
	}
	said.Reset()
	Report(say.Out{Stdout: &said, Stderr: &said}, Flags{paths: []string{"/opt/x/chain"}},
		stop.Report{Outcome: timeline.StepHold, Stop: stop.Outcome{Kind: stop.Held, Matched: 5, Group: g}})
	if strings.Contains(said.String(), "kill -CONT") {
		t.Fatalf("a hold with nothing outside asks for a kill -CONT:\n%s", said.String())
	}
}
