package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"

	"freeze/internal/freeze"
	"freeze/internal/guard"
	"freeze/internal/incident"
	"freeze/internal/match"
	"freeze/internal/timeline"
)

// What a run's end says: the outcome in the timeline's words, what to do
// next, and the exit code. One table (timeline.ExitCode) gives the code.

type summary struct {
	Outcome   string          `json:"outcome"`
	Matched   int             `json:"matched"`
	Method    string          `json:"method,omitempty"`
	Group     string          `json:"group,omitempty"`
	Survivors []survivorJSON  `json:"survivors,omitempty"`
	Zombies   []zombieJSON    `json:"zombies,omitempty"`
	Timeline  string          `json:"timeline,omitempty"`
	Elapsed   float64         `json:"elapsed_ms"`
	Support   json.RawMessage `json:"support,omitempty"`
	Error     string          `json:"error,omitempty"`
}

type survivorJSON struct {
	PID   int    `json:"pid"`
	State string `json:"state"`
	Wchan string `json:"wchan,omitempty"`
}

type zombieJSON struct {
	PID    int `json:"pid"`
	Parent int `json:"parent"`
}

// outcomeOf names an early exit code (a request that never ran) for the
// guard's log.
func outcomeOf(code int) string {
	if code == exitRefused {
		return string(timeline.StepRefused)
	}
	return "usage"
}

// incident is where a run's words go while it runs.
func (o out) incident() incident.Output {
	return incident.Output{
		Progress: o.progress,
		Warn:     func(s string) { o.warnf("%s", s) },
		Note:     func(s string) { o.sayf("%s", s) },
	}
}

// report prints the end of a run and returns it for a guard's log.
func report(o out, f stopFlags, rep incident.Report) guard.Result {
	res := rep.Stop
	s := summary{Outcome: string(rep.Outcome), Matched: res.Matched, Timeline: rep.Timeline, Elapsed: rep.ElapsedMS}
	if g := res.Group; g != nil {
		s.Method, s.Group = string(g.Method()), g.Where()
	}
	if rep.Err != nil {
		s.Error = rep.Err.Error()
	}
	switch rep.Outcome {
	case timeline.StepZero:
		o.sayf("zero remain (%d matched)", res.Matched)
		o.sayf("next: fix the source (which spawn leaked, and is a process cap really installed?): %s runbook prevention", self())
	case timeline.StepNothingMatched:
		o.sayf("nothing matched: no live process runs %s", strings.Join(targetArgs(f), " "))
	case timeline.StepDryRun:
		s.Support, _ = json.Marshal(res.Support)
		reportDryRun(o, rep)
	case timeline.StepHold:
		o.sayf("holding %s frozen in %s", match.Count(res.Matched, "process", "processes"), res.Group.Where())
		o.sayf("to finish the job: freeze %s", strings.Join(finishArgs(f, res.Group), " "))
		o.sayf("to thaw instead:   %s", res.Group.ThawHint())
	case timeline.StepInterrupted:
		reportInterrupted(o, f, rep)
	case timeline.StepSurvivors:
		s.Survivors = reportSurvivors(o, rep)
	case timeline.StepRefused:
		reportRefused(o, rep)
	default:
		o.errorf("%v", rep.Err)
		if errors.Is(rep.Err, freeze.ErrNoCgroup) {
			o.hintf("try --method sigstop, which needs no cgroup")
		}
	}
	reportAfter(o, rep)
	for _, z := range res.Zombies {
		s.Zombies = append(s.Zombies, zombieJSON{z.PID, z.PPID})
	}
	if f.jsonOut {
		b, _ := json.MarshalIndent(s, "", "  ")
		fmt.Fprintln(o.stdout, string(b))
	}
	h := rep.Summary
	return guard.Result{Code: rep.Code, Outcome: s.Outcome, Timeline: s.Timeline, ZeroMS: h.ZeroMS, GateForks: h.GateForks, GateExecs: h.GateExecs}
}

func reportDryRun(o out, rep incident.Report) {
	res := rep.Stop
	for _, sp := range res.Support {
		if sp.OK {
			o.sayf("dry run: an incident here would use --method %s; nothing was changed", sp.Method)
			break
		}
	}
	for _, r := range res.WouldRevoke {
		o.sayf("dry run: would revoke exec on %s (mode %#o -> %#o)", r.Path, r.Mode, r.NewMode)
	}
	for _, err := range res.Refusals {
		o.sayf("dry run: the guard would refuse --revoke-exec: %v", err)
	}
}

// reportInterrupted says where the run stopped, what holds the chain
// now, and the two ways on.
func reportInterrupted(o out, f stopFlags, rep incident.Report) {
	res := rep.Stop
	stage := max(res.Stage, timeline.StageMatch)
	where := fmt.Sprintf("interrupted by %s in step %d/4 (%s)", rep.Signal, stage, stage)
	g := res.Group
	again := "freeze " + strings.Join(finishArgs(f, g), " ")
	switch {
	case g == nil || !g.Freezes():
		o.sayf("%s: nothing was frozen", where)
		o.sayf("to run it again: %s", again)
		return
	case !g.Holds():
		o.sayf("%s: what was stopped stays stopped (%s)", where, g.Where())
		o.sayf("to finish the job: %s", again)
	case res.Stage == timeline.StageKill:
		o.sayf("%s: the kill had begun; what is left stays frozen in %s", where, g.Where())
		o.sayf("to finish the job: %s   (it reuses %s)", again, g.Where())
	default:
		o.sayf("%s: the chain stays frozen in %s", where, g.Where())
		o.sayf("to finish the job: %s   (it reuses %s)", again, g.Where())
	}
	o.sayf("to thaw instead:   %s", g.ThawHint())
}

func reportSurvivors(o out, rep incident.Report) []survivorJSON {
	survivors := rep.Stop.Survivors
	var js []survivorJSON
	verb := "survive"
	if len(survivors) == 1 {
		verb = "survives"
	}
	o.errorf("%s %s", match.Count(len(survivors), "process", "processes"), verb)
	for i, sv := range survivors {
		js = append(js, survivorJSON{sv.PID, string(sv.State), sv.Wchan})
		if i == 20 {
			o.sayf("  ... and %d more", len(survivors)-20)
			continue
		}
		if i > 20 {
			continue
		}
		line := fmt.Sprintf("  pid %d state %c (%s)", sv.PID, sv.State, sv.Reason)
		if sv.Wchan != "" {
			line += " asleep in " + sv.Wchan + ": uninterruptible, it dies when that call returns"
		}
		o.sayf("%s", line)
	}
	o.hintf("run the same command again; processes in state D die when their I/O returns")
	return js
}

// reportRefused words each refusal: before the run (hidepid, the run
// lock) or in it (the revoke guard, processes that cannot be inspected).
func reportRefused(o out, rep incident.Report) {
	var (
		guardErr *freeze.GuardError
		hide     *incident.HidePIDError
		locked   *incident.LockedError
	)
	switch {
	case errors.As(rep.Err, &hide):
		o.errorf("refused: %v", hide)
		o.hintf("run freeze as root (sudo freeze ...); or add --force to act only on the processes you can see; nothing was changed")
	case errors.As(rep.Err, &locked):
		o.errorf("refused: another freeze run is working on this chain: %s", locked.Holder)
		o.hintf("let it finish; if it is stuck, 'kill -INT %d' ends it in a recorded state, then run this again (a lock whose run died is taken over by the next run: %s)", locked.Holder.PID, locked.Path)
	case errors.As(rep.Err, &guardErr):
		o.errorf("refused --revoke-exec: %s %s", guardErr.Path, guardErr.Rule)
		o.hintf("%s; nothing was changed", guardErr.Hint)
	case len(rep.Stop.Hidden) > 0:
		res := rep.Stop
		o.errorf("refused: %d processes named %q belong to other users and cannot be inspected without root (reading /proc/PID/exe: permission denied), so freeze cannot tell whether they run the target, nor stop them", len(res.Hidden), res.Hidden[0].Comm)
		sayHidden(o, res.Hidden)
		o.hintf("run freeze as root (sudo freeze ...); or add --force to act only on your own processes; nothing was changed")
	default:
		o.errorf("refused: %v", rep.Err)
	}
}

// reportAfter says what every outcome may leave: revoked files, hidden
// processes left alone, zombies, and where the timeline is.
func reportAfter(o out, rep incident.Report) {
	res, path := rep.Stop, rep.Timeline
	if len(res.Revoked) > 0 {
		o.sayf("exec stays revoked on %d file(s): the binary is the bug, so nothing can start it again until it is fixed", len(res.Revoked))
		if path != "" {
			o.sayf("to put the modes back: %s restore --timeline %s", self(), match.ShellQuote(path))
		} else {
			for _, r := range res.Revoked {
				o.sayf("to put the mode back: chmod %o %s", r.Mode, match.ShellQuote(r.Path))
			}
		}
	}
	if len(res.Hidden) > 0 && rep.Code != exitRefused {
		o.warnf("%d processes named %q of other users could not be inspected (permission denied without root) and were left alone:", len(res.Hidden), res.Hidden[0].Comm)
		sayHidden(o, res.Hidden)
	}
	if n := len(res.Zombies); n > 0 {
		z := res.Zombies[0]
		o.sayf("%d zombies of the chain are waiting for their parent to reap them (first: pid %d, parent %d); they hold pids but run nothing", n, z.PID, z.PPID)
		// What comes next, and who acts (a bare count left the operator
		// asking; they cleared 3 s later).
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", z.PPID))
		parent := fmt.Sprintf("pid %d (%s)", z.PPID, strings.TrimSpace(string(comm)))
		if z.PPID == 1 {
			o.sayf("next: nothing to do if they clear within seconds: PID 1 reaps them; where PID 1 does not reap, they stay until reboot and hold only pids. freeze never signals PID 1")
		} else {
			o.sayf("next: nothing to do if they clear within seconds: their parent, %s, reaps them when it next waits; freeze leaves a parent outside the chain alone. If they stay, look at it: ps -o pid,stat,wchan,cmd -p %d", parent, z.PPID)
		}
	}
	if path != "" {
		o.sayf("timeline: %s (render it with: %s timeline %s)", path, self(), match.ShellQuote(path))
	}
}

// sayHidden lists processes that could not be inspected, with their owner.
func sayHidden(o out, hidden []match.Hidden) {
	for i, h := range hidden {
		if i == 10 {
			o.sayf("  ... and %d more", len(hidden)-10)
			break
		}
		name := "?"
		if u, err := user.LookupId(strconv.Itoa(h.UID)); err == nil {
			name = u.Username
		}
		o.sayf("  pid %d, uid %d (%s)", h.PID, h.UID, name)
	}
}

// finishArgs are the words of the command that finishes a run that left
// its chain in g: its targets, and --method cgroup1 where g is a v1
// freezer group. A task frozen there acts on SIGKILL only once thawed,
// and only the cgroup1 method thaws after its kills: the finishing
// command printed after '--method cgroup1 --hold' used to take the gate
// (auto), whose kills waited on the frozen tasks, and left survivors.
func finishArgs(f stopFlags, g freeze.Group) []string {
	a := targetArgs(f)
	if g != nil && g.Method() == freeze.Cgroup1 {
		a = append(a, "--method", "cgroup1")
	}
	return a
}

func targetArgs(f stopFlags) []string {
	var a []string
	for _, p := range f.paths {
		a = append(a, "--path", match.ShellQuote(p))
	}
	for _, d := range f.under {
		a = append(a, "--under", match.ShellQuote(d))
	}
	for _, x := range f.args {
		a = append(a, "--arg", match.ShellQuote(x))
	}
	return a
}
