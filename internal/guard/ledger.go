package guard

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"freeze/internal/safedir"
)

// ledger reads how the previous guard of this directory ended and
// records this start: guard.state says "running PID" from arming until a
// clean stop writes "stopped PID", so a guard killed with kill -9 (or
// lost with its machine) leaves "running", and the next start says
// unclean=1. The lock taken before makes this safe against a second
// guard; a state file that cannot be parsed counts as unclean, and one
// that cannot be written is said and does not stop the guard.
func (g *Guard) ledger() {
	path := filepath.Join(g.c.RunDir, stateName)
	prev := "none"
	b, err := os.ReadFile(path)
	switch {
	case os.IsNotExist(err):
	case err != nil:
		prev, g.Unclean = "unreadable: "+err.Error(), true
	default:
		f := strings.Fields(string(b))
		switch {
		case len(f) == 2 && f[0] == "stopped":
			prev = "stopped cleanly (pid " + f[1] + ")"
		case len(f) == 2 && f[0] == "running":
			prev, g.Unclean = "did not stop cleanly (pid "+f[1]+")", true
		default:
			prev, g.Unclean = fmt.Sprintf("state file corrupt (%.40q)", string(b)), true
		}
	}
	if err := safedir.WriteFile(path, []byte(fmt.Sprintf("running %d\n", os.Getpid())), 0o600); err != nil {
		g.c.Say(fmt.Sprintf("warning: cannot write %s: %v; the next start cannot tell whether this one ended cleanly", path, err))
	}
	unclean := 0
	if g.Unclean {
		unclean = 1
	}
	g.c.Say(fmt.Sprintf("start: unclean=%d (the previous guard: %s)", unclean, prev))
	g.record("start", &LifeLine{PID: os.Getpid(), Unclean: unclean, Previous: prev})
}
