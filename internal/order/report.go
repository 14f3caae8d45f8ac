package order

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"

	"freeze/internal/freeze"
	"freeze/internal/match"
	"freeze/internal/say"
	"freeze/internal/show"
	"freeze/internal/stop"
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

// outcomeOf names an early exit code (a request that never ran).
func outcomeOf(code int) timeline.Step {
	switch code {
	case timeline.ExitZero:
		return timeline.StepHelp
	case timeline.ExitRefused:
		return timeline.StepRefused
	}
	return timeline.StepUsage
}

// Report says how a run ended: on stderr in words, and with --json its
// summary on stdout.
func Report(o say.Out, f Flags, rep stop.Report) {
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
		o.Sayf("zero remain (%d matched)", res.Matched)
		o.Sayf("next: fix the source (which spawn leaked, and is a process cap really installed?): %s runbook prevention", say.Self())
	case timeline.StepNothingMatched:
		o.Sayf("nothing matched: no live process runs %s", strings.Join(targetArgs(f), " "))
	case timeline.StepDryRun:
		s.Support, _ = json.Marshal(res.Support)
		reportDryRun(o, rep)
	case timeline.StepHold:
		o.Sayf("holding %s frozen in %s", show.Count(res.Matched, "process", "processes"), res.Group.Where())
		o.Sayf("to finish the job: freeze %s", strings.Join(finishArgs(f, res.Group), " "))
		thaw := res.Group.ThawHint()
		if len(res.StoppedOutside) > 0 {
			pids := joinPIDs(res.StoppedOutside)
			o.Sayf("of them stopped by SIGSTOP outside %s, their moves having failed: %s", res.Group.Where(), pids)
			thaw += "; then kill -CONT " + pids
		}
		o.Sayf("to thaw instead:   %s", thaw)
	case timeline.StepInterrupted:
		reportInterrupted(o, f, rep)
	case timeline.StepSurvivors:
		s.Survivors = reportSurvivors(o, rep)
	case timeline.StepRefused:
		reportRefused(o, rep)
	default:
		o.Errorf("%v", rep.Err)
		if errors.Is(rep.Err, freeze.ErrNoCgroup) {
			o.Hintf("try --method sigstop, which needs no cgroup")
		}
		reportLeftFrozen(o, f, res.Group)
	}
	reportAfter(o, rep)
	for _, z := range res.Zombies {
		s.Zombies = append(s.Zombies, zombieJSON{z.PID, z.PPID})
	}
	if f.jsonOut {
		b, _ := json.MarshalIndent(s, "", "  ")
		fmt.Fprintln(o.Stdout, string(b))
	}
}

func reportDryRun(o say.Out, rep stop.Report) {
	res := rep.Stop
	for _, sp := range res.Support {
		if sp.OK {
			o.Sayf("dry run: an incident here would use --method %s; nothing was changed", sp.Method)
			break
		}
	}
	for _, r := range res.WouldRevoke {
		o.Sayf("dry run: would revoke exec on %s (mode %#o -> %#o)", r.Path, r.Mode, r.NewMode)
	}
	for _, err := range res.Refusals {
		o.Sayf("dry run: the guard would refuse --revoke-exec: %v", err)
	}
}

// reportLeftFrozen says, after a run that failed once its group was
// open, that what it froze or stopped stays so (nothing undoes it: a
// chain frozen is safer than one let go), and the two ways on. Nothing
// when nothing was frozen.
func reportLeftFrozen(o say.Out, f Flags, g freeze.Group) {
	if g == nil || !g.Freezes() {
		return
	}
	thaw := g.ThawHint()
	if thaw == freeze.NothingToThaw {
		return
	}
	o.Sayf("what this run froze or stopped before it failed stays so (%s)", g.Where())
	o.Sayf("to finish the job: freeze %s   (once the error above is dealt with)", strings.Join(finishArgs(f, g), " "))
	o.Sayf("to thaw instead:   %s", thaw)
}

// reportInterrupted says where the run stopped, what holds the chain
// now, and the two ways on.
func reportInterrupted(o say.Out, f Flags, rep stop.Report) {
	res := rep.Stop
	stage := max(res.Stage, timeline.StageMatch)
	where := fmt.Sprintf("interrupted by %s in step %d/4 (%s)", rep.Signal, stage, stage)
	g := res.Group
	again := "freeze " + strings.Join(finishArgs(f, g), " ")
	switch {
	case g == nil || !g.Freezes():
		o.Sayf("%s: nothing was frozen", where)
		o.Sayf("to run it again: %s", again)
		return
	case !g.Holds():
		o.Sayf("%s: what was stopped stays stopped (%s)", where, g.Where())
		o.Sayf("to finish the job: %s", again)
	case res.Stage == timeline.StageKill:
		o.Sayf("%s: the kill had begun; what is left stays frozen in %s", where, g.Where())
		o.Sayf("to finish the job: %s   (it reuses %s)", again, g.Where())
	default:
		o.Sayf("%s: the chain stays frozen in %s", where, g.Where())
		o.Sayf("to finish the job: %s   (it reuses %s)", again, g.Where())
	}
	o.Sayf("to thaw instead:   %s", g.ThawHint())
}

func reportSurvivors(o say.Out, rep stop.Report) []survivorJSON {
	survivors := rep.Stop.Survivors
	var js []survivorJSON
	verb := "survive"
	if len(survivors) == 1 {
		verb = "survives"
	}
	o.Errorf("%s %s", show.Count(len(survivors), "process", "processes"), verb)
	for i, sv := range survivors {
		js = append(js, survivorJSON{sv.PID, string(sv.State), sv.Wchan})
		if i == 20 {
			o.Sayf("  ... and %d more", len(survivors)-20)
			continue
		}
		if i > 20 {
			continue
		}
		line := fmt.Sprintf("  pid %d state %c (%s)", sv.PID, sv.State, sv.Reason)
		if sv.Wchan != "" {
			line += " asleep in " + sv.Wchan + ": uninterruptible, it dies when that call returns"
		}
		o.Sayf("%s", line)
	}
	o.Hintf("run the same command again; processes in state D die when their I/O returns")
	return js
}

// reportRefused words each refusal: before the run (hidepid, the run
// lock) or in it (the revoke guard, processes that cannot be inspected).
func reportRefused(o say.Out, rep stop.Report) {
	var (
		guardErr *freeze.GuardError
		hide     *stop.HidePIDError
		locked   *stop.LockedError
	)
	switch {
	case errors.As(rep.Err, &hide):
		o.Errorf("refused: %v", hide)
		o.Hintf("run freeze as root (sudo freeze ...); or add --force to act only on the processes you can see; nothing was changed")
	case errors.As(rep.Err, &locked):
		o.Errorf("refused: another freeze run is working on this chain: %s", locked.Holder)
		o.Hintf("let it finish; if it is stuck, 'kill -INT %d' ends it in a recorded state, then run this again (a lock whose run died is taken over by the next run: %s)", locked.Holder.PID, locked.Path)
	case errors.As(rep.Err, &guardErr):
		o.Errorf("refused --revoke-exec: %s %s", guardErr.Path, guardErr.Rule)
		o.Hintf("%s; nothing was changed", guardErr.Hint)
	case len(rep.Stop.Hidden) > 0:
		res := rep.Stop
		o.Errorf("refused: %d processes named %q belong to other users and cannot be inspected without root (reading /proc/PID/exe: permission denied), so freeze cannot tell whether they run the target, nor stop them", len(res.Hidden), res.Hidden[0].Comm)
		sayHidden(o, res.Hidden)
		o.Hintf("run freeze as root (sudo freeze ...); or add --force to act only on your own processes; nothing was changed")
	default:
		o.Errorf("refused: %v", rep.Err)
	}
}

// reportAfter says what every outcome may leave: revoked files, hidden
// processes left alone, zombies, and where the timeline is.
func reportAfter(o say.Out, rep stop.Report) {
	res, path := rep.Stop, rep.Timeline
	if len(res.Revoked) > 0 {
		o.Sayf("exec stays revoked on %d file(s): the binary is the bug, so nothing can start it again until it is fixed", len(res.Revoked))
		if path != "" {
			o.Sayf("to put the modes back: %s restore --timeline %s", say.Self(), show.Shell(path))
		} else {
			for _, r := range res.Revoked {
				o.Sayf("to put the mode back: chmod %o %s", r.Mode, show.Shell(r.Path))
			}
		}
	}
	if len(res.Hidden) > 0 && rep.Code() != timeline.ExitRefused {
		o.Warnf("%d processes named %q of other users could not be inspected (permission denied without root) and were left alone:", len(res.Hidden), res.Hidden[0].Comm)
		sayHidden(o, res.Hidden)
	}
	if n := len(res.Zombies); n > 0 {
		z := res.Zombies[0]
		o.Sayf("%d zombies of the chain are waiting for their parent to reap them (first: pid %d, parent %d); they hold pids but run nothing", n, z.PID, z.PPID)
		// What comes next, and who acts (a bare count left the operator
		// asking; they cleared 3 s later).
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", z.PPID))
		parent := fmt.Sprintf("pid %d (%s)", z.PPID, strings.TrimSpace(string(comm)))
		if z.PPID == 1 {
			o.Sayf("next: nothing to do if they clear within seconds: PID 1 reaps them; where PID 1 does not reap, they stay until reboot and hold only pids. freeze never signals PID 1")
		} else {
			o.Sayf("next: nothing to do if they clear within seconds: their parent, %s, reaps them when it next waits; freeze leaves a parent outside the chain alone. If they stay, look at it: ps -o pid,stat,wchan,cmd -p %d", parent, z.PPID)
		}
	}
	if path != "" {
		o.Sayf("timeline: %s (render it with: %s timeline %s)", path, say.Self(), show.Shell(path))
	}
}

// sayHidden lists processes that could not be inspected, with their owner.
func sayHidden(o say.Out, hidden []match.Hidden) {
	for i, h := range hidden {
		if i == 10 {
			o.Sayf("  ... and %d more", len(hidden)-10)
			break
		}
		name := "?"
		if u, err := user.LookupId(strconv.Itoa(h.UID)); err == nil {
			name = u.Username
		}
		o.Sayf("  pid %d, uid %d (%s)", h.PID, h.UID, name)
	}
}

// finishArgs are the words of the command that finishes a run that left
// its chain in g: its targets, and the --method g needs
// (freeze.FinishWith).
func finishArgs(f Flags, g freeze.Group) []string {
	a := targetArgs(f)
	if m := freeze.FinishWith(g); m != "" {
		a = append(a, "--method", string(m))
	}
	return a
}

func targetArgs(f Flags) []string {
	var a []string
	for _, p := range f.paths {
		a = append(a, "--path", show.Shell(p))
	}
	for _, d := range f.under {
		a = append(a, "--under", show.Shell(d))
	}
	for _, x := range f.args {
		a = append(a, "--arg", show.Shell(x))
	}
	return a
}

// Output is where a run's words go while it runs: its progress, warnings
// and notes, in o's voice.
func Output(o say.Out) stop.Output {
	return stop.Output{
		Progress: func(e timeline.Event) { progress(o, e) },
		Warn:     func(s string) { o.Warnf("%s", s) },
		Note:     func(s string) { o.Sayf("%s", s) },
	}
}

// progress prints one event as a short timestamped line, with the
// runbook step it belongs to.
func progress(o say.Out, e timeline.Event) {
	if e.Msg == "" {
		return
	}
	stage := ""
	if e.Stage > 0 {
		stage = fmt.Sprintf("%d/4 %s: ", e.Stage, e.Stage)
	}
	fmt.Fprintf(o.Stderr, "freeze: %s %s%s\n", e.Time.Format("15:04:05.000"), stage, show.Term(e.Msg))
}

// joinPIDs is pids as kill(1) takes them: "12 13 14".
func joinPIDs(pids []int) string {
	words := make([]string, len(pids))
	for i, pid := range pids {
		words[i] = strconv.Itoa(pid)
	}
	return strings.Join(words, " ")
}
