package order

import (
	"bytes"
	"errors"
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

// A run that fails once its group is open leaves what it froze (or the
// gate stopped) as it is: the report says so, and how to finish or thaw.
// Before, it said only the error, and the chain sat frozen unexplained.
// A failure before anything froze says nothing of the kind.
func TestAFailedRunSaysWhatItLeftFrozen(t *testing.T) {
	tr := proctest.New(t)
	var said bytes.Buffer
	fail := errors.New("freeze /sys/fs/cgroup/x in place: write: no such device")
	Report(say.Out{Stdout: &said, Stderr: &said}, Flags{paths: []string{"/opt/x/chain"}},
		stop.Report{Outcome: timeline.StepFailed, Err: fail, Stop: stop.Outcome{Kind: stop.Failed, Matched: 5, Group: tr.NewGroup()}})
	out := said.String()
	for _, want := range []string{
		"no such device",
		"what this run froze or stopped before it failed stays so (fixture group)",
		"to finish the job: freeze --path /opt/x/chain",
		"to thaw instead:   nothing: a fixture",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("the failed run's report lacks %q:\n%s", want, out)
		}
	}
	said.Reset()
	Report(say.Out{Stdout: &said, Stderr: &said}, Flags{paths: []string{"/opt/x/chain"}},
		stop.Report{Outcome: timeline.StepFailed, Err: fail, Stop: stop.Outcome{Kind: stop.Failed}})
	if strings.Contains(said.String(), "to thaw") {
		t.Fatalf("with no group open the report says to thaw:\n%s", said.String())
	}
}
