package contain

import "fmt"

// freeze run's own exit codes, apart from freeze's (0-5), from a
// command's ordinary ones, and from 128+N (killed by signal N); 124 is
// timeout(1)'s.
const (
	ExitNotZero   = 121 // the teardown could not confirm the group empty
	ExitLeftovers = 122 // processes outlived the command
	ExitCapHit    = 123 // the cap refused a fork
	ExitTimedOut  = 124 // --timeout fired
)

// verdict is freeze run's exit code and its reason, strongest first.
func (c Config) verdict(rep Report) (int, string) {
	switch {
	case !rep.Zero:
		return ExitNotZero, fmt.Sprintf("the teardown could not confirm zero: %v", rep.TeardownErr)
	case rep.TimedOut:
		return ExitTimedOut, fmt.Sprintf("the command timed out after %v (SIGTERM, then %v of grace); its tree was torn down", c.Timeout, c.KillAfter)
	case rep.CapHit():
		return ExitCapHit, fmt.Sprintf("the cap of %d tasks refused %d fork(s)", c.MaxProcs, rep.Refused)
	case len(rep.Leftovers) > 0 && c.FailLeftovers:
		return ExitLeftovers, fmt.Sprintf("%d process(es) outlived the command", len(rep.Leftovers))
	case rep.Status < 0:
		return ExitNotZero, "the command did not exit after " + rep.Signaled
	}
	if rep.NotStarted != "" {
		return rep.Status, fmt.Sprintf("the command did not start: %s", rep.NotStarted)
	}
	return rep.Status, fmt.Sprintf("the command's own status, %d", rep.Status)
}
