package stop

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"freeze/internal/container"
	"freeze/internal/freeze"
	"freeze/internal/match"
	"freeze/internal/rounds"
	"freeze/internal/show"
	"freeze/internal/timeline"
)

// The steps of Run, in order. Each records what it did; each returns nil
// to go on, errDone when the outcome is complete, or the error that ends
// the run (with out.Kind set where the error alone does not say it).

// match is step 1: one scan, the counts, and the refusal of a chain that
// cannot all be seen.
func (r *run) match() error {
	t0 := time.Now()
	res, err := r.scanner.Scan()
	if err != nil {
		return err
	}
	r.res, r.out.Matched = res, res.Live()
	took := time.Since(t0)
	from := r.scanner.ReadFrom()
	verb := "match"
	if res.Live() == 1 {
		verb = "matches"
	}
	msg := fmt.Sprintf("%s %s (%d by path, %d replaced binary, %d under, %d descendants) of %d scanned in %v from %s",
		show.Count(res.Live(), "live process", "live processes"), verb, res.Counts[match.ByPath], res.Counts[match.ByDeleted], res.Counts[match.ByUnder], res.Counts[match.ByDescendant], res.Scanned, show.Dur(took), from)
	if err := r.scanner.TaskErr; err != nil {
		msg += " (the task iterator: " + err.Error() + ")"
	}
	if res.ArgsRead > 0 || res.ArgsRecorded > 0 {
		msg += fmt.Sprintf("; reading the processes took %s, argv of %s %s", show.Dur(res.ReadTook), show.Count(res.ArgsRead, "process", "processes"), show.Dur(res.ArgsTook))
	}
	if res.ArgsRecorded > 0 {
		msg += fmt.Sprintf(", %s by the argv recorded at exec", show.Count(res.ArgsRecorded, "match", "matches"))
	}
	where, in := whereOf(res)
	msg += in
	r.rec.RecordOf(timeline.StageMatch, timeline.StepMatch, msg, timeline.Matched{
		Matched: res.Live(), ByPath: res.Counts[match.ByPath], ByDeleted: res.Counts[match.ByDeleted],
		ByUnder: res.Counts[match.ByUnder], Descendants: res.Counts[match.ByDescendant],
		Zombies: len(res.Zombies), Scanned: res.Scanned, ScanMS: ms(took), ScanFrom: from, Where: where,
		ReadMS: ms(res.ReadTook), ArgsRead: res.ArgsRead, ArgsMS: ms(res.ArgsTook), ArgsRecorded: res.ArgsRecorded})
	r.containerInits(where)
	r.out.Hidden = res.Hidden
	if len(res.Hidden) > 0 {
		var pids []int
		for _, h := range res.Hidden {
			pids = append(pids, h.PID)
		}
		r.rec.RecordOf(timeline.StageMatch, timeline.StepHidden, fmt.Sprintf("%d processes named %q could not be inspected: reading their exe link was refused (another user's processes, seen without root)", len(res.Hidden), res.Hidden[0].Comm),
			timeline.HiddenSeen{PIDs: pids, Force: r.c.Force})
		if !r.c.Force && !r.c.DryRun {
			r.out.Kind = Refused
			return &HiddenError{Hidden: res.Hidden}
		}
	}
	if !r.c.DryRun && r.interrupted() {
		return r.stopNothing(timeline.StageMatch)
	}
	return nil
}

// stopNothing ends a run interrupted before anything was frozen.
func (r *run) stopNothing(stage timeline.Stage) error {
	what := "before anything was frozen"
	if n := len(r.out.Revoked); n > 0 {
		what += fmt.Sprintf("; exec stays revoked on %d file(s)", n)
	}
	frozen, revoked := 0, len(r.out.Revoked)
	return r.stopHere(stage, what, timeline.Interrupted{Frozen: &frozen, Revoked: &revoked})
}

// revoke is the first part of step 2 with --revoke-exec: the guard, then
// the execute bits off, so no new hop can start. A dry run only says
// what it would do.
func (r *run) revoke() error {
	if !r.c.RevokeExec {
		return nil
	}
	revs, refused := checkRevocations(r.c, r.res)
	for _, err := range refused {
		r.rec.RecordOf(timeline.StageFreeze, timeline.StepRevokeRefused, err.Error(), timeline.Failure{Error: err.Error()})
	}
	if r.c.DryRun {
		r.out.Refusals, r.out.WouldRevoke = refused, revs
		for _, v := range revs {
			r.rec.RecordOf(timeline.StageFreeze, timeline.StepWouldRevoke, fmt.Sprintf("would revoke exec on %s (mode %#o -> %#o)", v.Path, v.Mode, v.NewMode), revFields(v))
		}
		return nil
	}
	if len(refused) > 0 {
		r.out.Kind = Refused
		return fmt.Errorf("revoke exec: %w", refused[0])
	}
	for _, v := range revs {
		if v.Mode&0o111 == 0 {
			r.alreadyRevoked(v)
			continue
		}
		// Write-ahead: the original mode is on disk before the chmod, so
		// a crash between the two leaves the record of what to put back
		// (#24, finding 8; the revoked record follows with the change
		// time restore needs).
		r.rec.RecordOf(timeline.StageFreeze, timeline.StepRevokeIntent, fmt.Sprintf("revoking exec on %s (mode %#o -> %#o)", v.Path, v.Mode, v.NewMode), revFields(v))
		if r.rec.Path() == "" {
			// No file to make it durable in (the record is in memory and
			// saved elsewhere at the end): revoke all the same.
		} else if err := r.rec.Sync(); err != nil {
			r.rec.RecordOf(timeline.StageFreeze, timeline.StepRevokeFailed, "not revoked: the record of its mode could not be made durable first: "+err.Error(), revFields(v))
			continue
		}
		if !runByChain(r.c.FS, r.res, v) {
			r.rec.RecordOf(timeline.StageFreeze, timeline.StepRevokeFailed, "not revoked: no process of the chain runs "+v.Path+" now", revFields(v))
			continue
		}
		v, err := freeze.Revoke(v)
		if err != nil {
			r.rec.RecordOf(timeline.StageFreeze, timeline.StepRevokeFailed, err.Error(), revFields(v))
			continue
		}
		if !runByChain(r.c.FS, r.res, v) {
			// The chain left the file between the two looks: the mode
			// goes back, by the same checks a restore makes.
			msg := "revoked, then put back: no process of the chain ran " + v.Path + " any more"
			if err := freeze.Restore(v); err != nil {
				msg = "revoked, and no process of the chain runs " + v.Path + " any more; putting its mode back failed: " + err.Error()
				r.out.Revoked = append(r.out.Revoked, v)
			}
			r.rec.RecordOf(timeline.StageFreeze, timeline.StepRevokeFailed, msg, revFields(v))
			continue
		}
		r.out.Revoked = append(r.out.Revoked, v)
		r.rec.RecordOf(timeline.StageFreeze, timeline.StepRevoke, fmt.Sprintf("revoked exec on %s (mode %#o -> %#o, inode %d, owner %d:%d): no new hop can start", v.Path, v.Mode, v.NewMode, v.Ino, v.UID, v.GID), revFields(v))
	}
	return nil
}

// dryRun ends a dry run: which methods would work, and nothing changed.
func (r *run) dryRun() error {
	if !r.c.DryRun {
		return nil
	}
	r.out.Kind, r.out.Support, r.out.Zombies = DryRun, freeze.Probe(r.c.BTF), r.res.Zombies
	r.dryRunProcesses()
	r.lookAlikes()
	for _, s := range r.out.Support {
		r.rec.RecordOf(timeline.StageFreeze, timeline.StepDryRunMethod, fmt.Sprintf("%s: %s (%s)", s.Method, yesNo(s.OK), s.Why), timeline.DryRunMethod{Method: string(s.Method), OK: s.OK, Why: s.Why})
		for _, k := range s.Kinds {
			r.rec.RecordOf(timeline.StageFreeze, timeline.StepDryRunGate, fmt.Sprintf("BPF %s: %s (%s)", k.Name, k.Says(), k.Why), timeline.DryRunGate{Kind: k.Name, OK: k.OK, Why: k.Why})
		}
	}
	r.rec.Record(timeline.StageRecord, timeline.StepDryRun, "dry run: nothing was changed", nil)
	return errDone
}

// alreadyRevoked records a file whose execute bits are off already: an
// earlier run revoked them (a rerun after a crash or a --hold). Its
// record of the original mode is carried over, so that a restore from
// this run's timeline puts that mode back, not the revoked one; the file
// is not touched. Without such a record, this run says so and leaves
// the mode to the operator.
func (r *run) alreadyRevoked(v freeze.Revocation) {
	e, from, ok := r.earlier(v)
	if !ok {
		r.rec.RecordOf(timeline.StageFreeze, timeline.StepAlreadyRevoked, fmt.Sprintf("exec is off on %s already (mode %#o), and no earlier run's timeline records its mode: nothing to revoke; restore its mode by hand once the source is fixed", v.Path, v.Mode), revFields(v))
		return
	}
	r.out.Revoked = append(r.out.Revoked, e)
	r.rec.RecordOf(timeline.StageFreeze, timeline.StepRevoke, fmt.Sprintf("exec was revoked on %s by an earlier run (%s): mode %#o -> %#o carried over, unchanged since; freeze restore with this timeline puts %#o back", v.Path, from, e.Mode, e.NewMode, e.Mode), revFields(e))
}

// dryRunListed is how many processes a dry run lists one by one.
const dryRunListed = 20

// dryRunProcesses lists what a run would act on: the operator checks the
// set before anything changes.
func (r *run) dryRunProcesses() {
	for i, p := range r.res.Procs {
		if i == dryRunListed {
			r.rec.RecordOf(timeline.StageMatch, timeline.StepDryRunProcess, fmt.Sprintf("would act on %s more (the timeline of a real run lists them all)", show.Count(len(r.res.Procs)-dryRunListed, "process", "processes")),
				timeline.DryRunProcess{More: len(r.res.Procs) - dryRunListed})
			return
		}
		exe := p.Exe
		if exe == "" {
			exe = "a descendant"
		}
		r.rec.RecordOf(timeline.StageMatch, timeline.StepDryRunProcess, fmt.Sprintf("would act on pid %d (parent %d, state %c, by %s): %s", p.PID, p.PPID, p.State, p.Reason, exe),
			timeline.DryRunProcess{PID: p.PID, PPID: p.PPID, State: string(p.State), Reason: p.Reason.String(), Exe: p.Exe})
	}
}

// containerInits says which matches are their container's PID 1: the
// chain's kill ends the container with it (its runtime records the exit:
// 137 for SIGKILL). Only the chain's roots in a container are read (a
// match whose parent is not a match): a container's init is one.
func (r *run) containerInits(where []timeline.Where) {
	if len(where) == 0 {
		return
	}
	in := make(map[int]bool, len(r.res.Procs))
	for _, p := range r.res.Procs {
		in[p.PID] = true
	}
	for _, p := range r.res.Procs {
		if in[p.PPID] {
			continue
		}
		place, err := container.Of(r.c.FS, p.PID)
		if err != nil || place.Host() {
			continue
		}
		if inner, err := r.c.FS.InnerPID(p.PID); err != nil || inner != 1 {
			continue
		}
		r.rec.RecordOf(timeline.StageMatch, timeline.StepContainerInit, fmt.Sprintf("pid %d is PID 1 of %s: the kill rounds end the container with it (its runtime records the exit: 137 for SIGKILL)", p.PID, show.Term(place.String())),
			timeline.ContainerInit{PID: p.PID, Runtime: place.Runtime, Container: place.ID, Pod: place.Pod})
	}
}

// whereOf lists the containers and pods the matches run in, most first,
// and says them for the match's line: "; in podman 661e5390e538 (300)".
// The names come from cgroup paths the container's owner may name.
func whereOf(res match.Result) ([]timeline.Where, string) {
	var where []timeline.Where
	for p, n := range res.Where {
		where = append(where, timeline.Where{Runtime: p.Runtime, Container: p.ID, Pod: p.Pod, Processes: n})
	}
	sort.Slice(where, func(i, j int) bool {
		if where[i].Processes != where[j].Processes {
			return where[i].Processes > where[j].Processes
		}
		return where[i].Container+where[i].Pod < where[j].Container+where[j].Pod
	})
	var parts []string
	for _, w := range where {
		p := container.Place{Runtime: w.Runtime, ID: w.Container, Pod: w.Pod}
		parts = append(parts, fmt.Sprintf("%s (%d)", show.Term(p.String()), w.Processes))
	}
	if len(parts) == 0 {
		return nil, ""
	}
	return where, "; in " + strings.Join(parts, ", ")
}

// lookAlikes says where a target's name runs from another file: the
// match is by file, so those are left alone, and an operator who meant
// them learns it before the incident, not after.
func (r *run) lookAlikes() {
	for _, t := range r.c.Spec.Targets {
		for _, other := range match.LookAlikes(r.c.FS, t) {
			r.rec.RecordOf(timeline.StageMatch, timeline.StepLookAlike, fmt.Sprintf("not matched: %s also runs as %s (%s), a different file: left alone; name it with --path to include it",
				t.Basename, show.Shell(other.Path), show.Count(other.Count, "process", "processes")),
				timeline.LookAlike{Target: t.Path, Path: other.Path, Count: other.Count})
		}
	}
}

// nothingToDo ends a run that matched nothing, unless an earlier --hold
// or interrupted run left a group for these targets to finish.
func (r *run) nothingToDo() error {
	if r.res.Live() == 0 && len(freeze.GroupDirs(r.c.Name)) == 0 {
		r.out.Kind, r.out.Zombies = NothingMatched, r.res.Zombies
		r.rec.RecordOf(timeline.StageRecord, timeline.StepNothingMatched, "no live process matches: nothing to stop", timeline.Ended{Zombies: len(r.res.Zombies)})
		return errDone
	}
	if r.interrupted() {
		return r.stopNothing(timeline.StageFreeze)
	}
	return nil
}

// openGroup makes the frozen set (or reuses a held group): the sealed
// chain, or a group of the method (freeze.Open).
func (r *run) openGroup() error {
	g, why, err := freeze.Open(r.c.FS, r.c.Method, r.c.Name,
		freeze.Options{Sealed: r.sealed, SealWhy: r.gateWhy, Hold: r.c.Hold, Open: r.c.Open})
	if err != nil {
		r.out.Kind = Failed
		r.rec.Record(timeline.StageFreeze, timeline.StepMethodFailed, err.Error(), nil)
		return err
	}
	r.out.Group = g
	r.rec.RecordOf(timeline.StageFreeze, timeline.StepMethod, fmt.Sprintf("method %s at %s: %s", g.Method(), g.Where(), why),
		timeline.MethodChosen{Method: string(g.Method()), Why: why, Group: g.Where(), Reused: g.Reused(), Notes: g.Notes()})
	if g.Reused() {
		r.rec.RecordOf(timeline.StageFreeze, timeline.StepReuse, "reusing the group an earlier --hold run left: "+g.Where(), timeline.GroupNamed{Group: g.Where()})
	}
	return nil
}

// grow is step 2: move matches into the frozen group until a scan finds
// none outside. A deadline first leaves the set unfixed, and the kill
// rounds still take what is held.
func (r *run) grow() error {
	g := r.out.Group
	if !g.Freezes() {
		r.rec.Record(timeline.StageFreeze, timeline.StepNoFreezer, "no freezer (--method none): kill rounds straight after revoking exec, as in the original incident; this does not stop a chain that only forks", nil)
		return nil
	}
	var last freeze.Round
	moved, _ := g.Terms()
	r.scanner.Prime(r.res) // round 1 acts on the match's scan
	res, err := freeze.Grow(r.c.FS, r.scanner, g, r.deadline, r.interrupted, func(n freeze.Round) {
		last = n
		for _, p := range n.Placed {
			how := "in place: " + p.Frozen
			if !p.InPlace {
				how = "nested: " + p.Frozen
			}
			r.rec.RecordOf(timeline.StageFreeze, timeline.StepPlace, fmt.Sprintf("%s (%s)", how, p.Why),
				timeline.Placed{Group: p.Group, Frozen: p.Frozen, InPlace: p.InPlace, Why: p.Why})
		}
		failed, failedErr := "", ""
		if len(n.FailedPIDs) > 0 {
			failedErr = n.FailedErr.Error()
			failed = fmt.Sprintf(", %d left outside, stopped (%s)", len(n.FailedPIDs), failedErr)
		}
		r.rec.RecordOf(timeline.StageFreeze, timeline.StepFreezeRound, fmt.Sprintf("round %d: %d matched, %d outside, %d %s, %d gone%s, frozen=%v (%v)",
			n.N, n.Matched, n.Outside, n.Moved, moved, n.Gone, failed, n.Frozen, show.Dur(n.Took)),
			timeline.FreezeRound{Round: n.N, Matched: n.Matched, Outside: n.Outside, Moved: n.Moved, Gone: n.Gone,
				ReusedPIDs: n.Reused, Failed: len(n.FailedPIDs), FailedErr: failedErr, Frozen: n.Frozen, TookMS: ms(n.Took)})
	})
	r.res, r.out.Matched = res, res.Live()
	switch {
	case errors.Is(err, freeze.ErrStopped):
		return r.stopHere(timeline.StageFreeze, fmt.Sprintf("after freeze round %d: %s holds what that round moved in (%d moved, %d matched); the set was not yet fixed, so a process started before its parent was stopped may be outside",
			last.N, g.Where(), last.Moved, last.Matched), timeline.Interrupted{Round: &last.N, Moved: &last.Moved, Matched: &last.Matched})
	case errors.Is(err, freeze.ErrDeadline):
		r.rec.Record(timeline.StageFreeze, timeline.StepNotFixed, err.Error()+"; killing what is held anyway", nil)
	case errors.Is(err, freeze.ErrLeftOutside):
		r.out.StoppedOutside = last.FailedPIDs
		r.rec.Record(timeline.StageFreeze, timeline.StepNotFixed, err.Error()+"; the kill rounds signal them by pidfd with the rest", nil)
	case err != nil:
		return err
	default:
		r.rec.RecordOf(timeline.StageFreeze, timeline.StepFixed, fmt.Sprintf("fixed set: %s, none outside %s", show.Count(res.Live(), "process", "processes"), g.Where()), timeline.Fixed{Set: res.Live()})
	}
	return nil
}

// hold ends a --hold run with the set frozen, and an interrupted one
// before the kill rounds.
func (r *run) hold() error {
	g := r.out.Group
	if r.c.Hold {
		r.out.Kind = Held
		r.rec.RecordOf(timeline.StageFreeze, timeline.StepHold, fmt.Sprintf("holding %s frozen in %s (--hold)", show.Count(r.res.Live(), "process", "processes"), g.Where()), timeline.Hold{Set: r.res.Live(), Group: g.Where()})
		return errDone
	}
	if r.interrupted() {
		set := r.res.Live()
		return r.stopHere(timeline.StageFreeze, fmt.Sprintf("before the kill rounds: %d processes held in %s", set, g.Where()), timeline.Interrupted{Set: &set})
	}
	return nil
}

// kill is step 3: kill rounds against the fixed set until two scans in a
// row find none.
func (r *run) kill() error {
	g := r.out.Group
	_, inside := g.Terms()
	r.scanner.Prime(r.res) // round 1 kills the fixed set as the last scan found it
	progress := func(p rounds.Progress) {
		held := ""
		if p.Group {
			held = "; the group still holds members"
		}
		r.rec.RecordOf(timeline.StageKill, timeline.StepKillProgress, fmt.Sprintf("round %d, %v in: %d alive at its scan, %d signalled by pidfd so far, %d of %d waited for gone%s", p.N, show.Dur(p.Took), p.Live, p.Signaled, p.Gone, p.Waiting, held),
			timeline.KillProgress{Round: p.N, Live: p.Live, Signaled: p.Signaled, Waiting: p.Waiting, Gone: p.Gone, GroupPopulated: p.Group, TookMS: ms(p.Took)})
	}
	ko, err := rounds.Run(rounds.Config{FS: r.c.FS, Scanner: r.scanner, Group: g, Rounds: r.c.Rounds, Deadline: r.deadline, Wait: r.c.RoundWait, Stop: r.interrupted, Progress: progress}, func(n rounds.Round) {
		if n.N == 2 && r.sealed != nil {
			// Survivors of the first round: the refusal now guards the
			// rest (a 32-bit process, which the stop at sys_enter misses).
			r.sealed.StartRest()
		}
		r.rec.RecordOf(timeline.StageKill, timeline.StepKillRound, fmt.Sprintf("round %d: %d alive (%d %s, the group's kill %v), %d signalled by pidfd (%v)", n.N, n.Live, n.Inside, inside, show.Dur(n.KillTook), n.Signaled, show.Dur(n.Took)),
			timeline.KillRound{Round: n.N, Live: n.Live, Inside: n.Inside, Signaled: n.Signaled, GroupErr: n.GroupErr, KillMS: ms(n.KillTook), TookMS: ms(n.Took)})
	})
	r.out.Survivors, r.out.Zombies = ko.Survivors, ko.Zombies
	switch {
	case errors.Is(err, rounds.ErrStopped):
		return r.stopHere(timeline.StageKill, fmt.Sprintf("during the kill rounds (%v): what is left stays in %s", err, g.Where()), timeline.Interrupted{})
	case err != nil:
		var pids []int
		for _, s := range ko.Survivors {
			pids = append(pids, s.PID)
		}
		if errors.Is(err, rounds.ErrSurvivors) {
			r.out.Kind = Survivors
			r.rec.RecordOf(timeline.StageKill, timeline.StepSurvivors, err.Error(), timeline.SurvivorsLeft{Survivors: pids})
		}
		return err
	}
	return nil
}

// confirm is step 4: the rounds confirmed zero; remove the group and
// record it.
func (r *run) confirm() error {
	g := r.out.Group
	if err := removeGroup(g); err != nil {
		r.rec.RecordOf(timeline.StageRecord, timeline.StepGroupLeft, err.Error(), timeline.GroupNamed{Group: g.Where()})
	} else if g.Holds() {
		r.rec.RecordOf(timeline.StageRecord, timeline.StepGroupRemoved, freeze.RemovedWords(g), timeline.GroupNamed{Group: g.Where()})
	}
	r.out.Kind = Zero
	r.rec.RecordOf(timeline.StageRecord, timeline.StepZero, "zero remain: confirmed by two empty scans", timeline.Ended{Zombies: len(r.out.Zombies)})
	return nil
}

// removeGroupWait bounds the wait for an emptied group to disappear.
const removeGroupWait = 5 * time.Second

func removeGroup(g freeze.Group) error {
	end := time.Now().Add(removeGroupWait)
	for {
		err := g.Remove()
		if err == nil {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("could not remove %s: %v; remove it with: rmdir %s", g.Where(), err, g.Where())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// wantsGate reports whether the run tries the kernel gate: --method bpf,
// and auto, where it comes first.
func (r *run) wantsGate() bool {
	return !r.c.DryRun && r.c.Method.TriesGate()
}

// gate is the first part of step 2, taken before the first scan: the
// identity of a --path target is known from the file, so the chain stops
// growing before freeze reads a single process of it, and the scan then
// reads a set that can no longer change. With --arg the file is an
// interpreter that runs much else: the gate holds all of its processes
// only until the scan has read argv, then the chain by mark and the rest
// let go (letGo). In a container's scope the gate knows no file: the
// scan's matches are marked, and what they start is gated by lineage.
// Where the gate cannot load, the run falls back to the cgroup methods
// and says why. freeze.Seal loads, fills and attaches it.
func (r *run) gate() error {
	if !r.wantsGate() {
		return nil // a spare in r.c.Spare is closed at the end of Run
	}
	s, err := freeze.Seal(r.c.FS, freeze.SealOptions{Spec: r.c.Spec, Force: r.c.Force, Hold: r.c.Hold, BTF: r.c.BTF,
		Spare: r.c.Spare, Kill: r.c.Tuning.GateKill, Form: r.c.Tuning.GateForm}) // takes the spare: uses it or closes it
	var formErr *freeze.ErrGateForm
	switch {
	case errors.As(err, &formErr):
		r.gateWhy = formErr.Err.Error()
		r.rec.RecordOf(timeline.StageFreeze, timeline.StepGateUnavailable, "the BPF gate is not available: FREEZE_GATE_FORM: "+r.gateWhy+"; falling back to the cgroup methods", timeline.GateUnavailable{Error: r.gateWhy, MethodAsked: string(r.c.Method)})
		return nil
	case err != nil:
		r.gateWhy = err.Error() // a *freeze.GateError: in an operator's words
		r.rec.RecordOf(timeline.StageFreeze, timeline.StepGateUnavailable, "the BPF gate is not available: "+r.gateWhy+"; falling back to the cgroup methods", timeline.GateUnavailable{Error: r.gateWhy, MethodAsked: string(r.c.Method)})
		return nil
	}
	r.sealed = s
	g := s.Gate
	if r.byArg = len(r.c.Spec.Args) > 0 && g.Files > 0; r.byArg {
		// Each decoy goes as soon as the scan has decided it.
		r.lg = newLetGo(s)
		r.scanner.OnPassed(r.free)
	}
	r.out.GatePrograms = g.ProgramIDs()
	// From now on every scan of the run reads the processes through the
	// gate's task iterator: milliseconds where /proc takes tens to
	// hundreds, and no contention with the chain's exits on /proc.
	if !r.c.Tuning.ScanProc && g.CanScan() {
		r.scanner.UseTasks(g.Tasks)
	}
	// Tagged with the match: the gate attaches before the scan, on the
	// target's file, and the scan then marks what it finds in it. So the
	// progress reads 1/4 before 2/4, as it happened.
	msg, a := s.Attached()
	r.rec.RecordOf(timeline.StageMatch, timeline.StepGateAttached, msg, a)
	return nil
}

// closeGate detaches the gate at the end of the run, whatever ended it,
// and records its counters: after zero is confirmed, part of confirm
// and record.
func (r *run) closeGate() {
	if r.sealed == nil {
		return
	}
	msg, d := r.sealed.Unseal()
	r.sealed = nil
	r.rec.RecordOf(timeline.StageRecord, timeline.StepGateDetached, msg, d)
}
