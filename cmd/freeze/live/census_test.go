package live

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"freeze/internal/containtest"
	"freeze/internal/testenv"
)

// census, as text, names a suspect by its full path (two files of one
// name read alike before: "runaway: 300 copies", "runaway: 51 copies"),
// says that a pids group sits at its cap, and names a port's owner or
// says truly why it cannot (#37).
func TestCensusSaysWhatItSees(t *testing.T) {
	testenv.RequireLive(t, "the chains are capped by pids cgroups")
	bin := buildFreeze(t)
	// Two files of one name: a suspect of 250 (a count census's rules
	// call a suspect by itself), and a small one at its cap of 20.
	big := containtest.Start(t, containtest.Spec{Shape: containtest.Tree, Name: "runaway", Cap: 250, HopCap: 1000000, Timeout: 120 * time.Second})
	small := containtest.Start(t, containtest.Spec{Shape: containtest.Tree, Name: "runaway", Cap: 20, HopCap: 1000000, Timeout: 120 * time.Second})
	if n := big.WaitPopulation(250, 60*time.Second); n < 250 {
		t.Fatalf("the big chain reached %d of 250", n)
	}
	if n := small.WaitPopulation(20, 60*time.Second); n < 20 {
		t.Fatalf("the small chain reached %d of 20", n)
	}
	out, err := exec.Command(bin, "census", "--sample", "1s", "--top", "50").Output()
	if err != nil {
		t.Fatalf("census: %v\n%s", err, out)
	}
	text := string(out)
	if !strings.Contains(text, "\n  "+big.Path+": ") {
		t.Errorf("the suspect is not named by its full path %s:\n%s", big.Path, text)
	}
	// Some pids group is at its cap (ours are; another test's may be the
	// one named): census says so, with the figures.
	if !regexp.MustCompile(`(?m)^pids cgroup \S+ is at its cap: (\d+) of pids.max (\d+)`).MatchString(text) {
		t.Errorf("census does not say that a pids group is at its cap:\n%s", text)
	}
	if strings.Contains(text, "owner unknown (another user's process, or not found in time)") {
		t.Errorf("census, as root, still blames another user for a port's owner:\n%s", text)
	}
}
