package timeline

// Step names an event. The stop order records these, the renderer reads
// them, and the benchmark splits a run's time by them: one list, so a
// renamed step cannot leave one of them reading the old name.
type Step string

// The steps of a run, in the order they can happen.
const (
	StepStart           Step = "start"
	StepLockTakeover    Step = "lock-takeover"
	StepSignal          Step = "signal"       // SIGINT, SIGTERM or SIGHUP arrived
	StepSignalAgain     Step = "signal-again" // a further one, ignored
	StepPriorityDropped Step = "priority-dropped"
	StepMatch           Step = "match"
	StepHidden          Step = "hidden"
	StepLetGo           Step = "let-go" // --arg: the gate held the file's every process; the ones no --arg names are let go
	StepRevoke          Step = "revoke"
	StepRevokeRefused   Step = "revoke-refused"
	StepRevokeFailed    Step = "revoke-failed"
	StepRevokeIntent    Step = "revoke-intent" // written and fsynced before the chmod
	StepWouldRevoke     Step = "would-revoke"
	StepDryRunMethod    Step = "dry-run-method"
	StepDryRunGate      Step = "dry-run-gate"    // a BPF program kind, loaded or refused
	StepDryRunProcess   Step = "dry-run-process" // a process a run would act on
	StepAlreadyRevoked  Step = "already-revoked" // exec off already, no earlier record of the mode
	StepLookAlike       Step = "look-alike"      // the target's name, run from another file: left alone
	StepContainerInit   Step = "container-init"  // a match is its container's PID 1: the container ends with the chain
	StepGateAttached    Step = "gate-attached"
	StepGateUnavailable Step = "gate-unavailable"
	StepGateDetached    Step = "gate-detached"
	StepMethod          Step = "method"
	StepReuse           Step = "reuse"
	StepPlace           Step = "place" // cgroup2: a group the chain occupies frozen in place, or a group nested in it
	StepNoFreezer       Step = "no-freezer"
	StepFreezeRound     Step = "freeze-round"
	StepFixed           Step = "fixed"
	StepNotFixed        Step = "not-fixed"
	StepKillRound       Step = "kill-round"
	StepKillProgress    Step = "kill-progress" // a round that lasts: where it stands, every second
	StepGroupRemoved    Step = "group-removed"
	StepGroupLeft       Step = "group-left"
	StepMemory          Step = "memory"
	StepDrill           Step = "drill"

	// Steps of freeze run.
	StepRunStart Step = "run-start" // the command started, capped
	StepRunExit  Step = "run-exit"  // it exited, timed out, or was signalled
	StepLeftover Step = "leftover"  // a process that outlived it

	// Steps that end a run: each says how it ended.
	StepZero           Step = "zero"
	StepSurvivors      Step = "survivors"
	StepHold           Step = "hold"
	StepNothingMatched Step = "nothing-matched"
	StepDryRun         Step = "dry-run"
	StepMethodFailed   Step = "method-failed"
	StepInterrupted    Step = "interrupted"
	StepRefused        Step = "refused" // a safety rule refused the run; nothing changed
	StepFailed         Step = "failed"  // an error ended the run
	StepUsage          Step = "usage"   // the request's words were wrong: nothing ran
	StepHelp           Step = "help"    // the request asked for its help text: nothing ran
	StepDrillEnd       Step = "drill-end"
	StepRunEnd         Step = "run-end" // freeze run's teardown and verdict
)

// Ends reports whether s is a step that ends a run.
func (s Step) Ends() bool {
	switch s {
	case StepZero, StepSurvivors, StepHold, StepNothingMatched, StepDryRun, StepMethodFailed, StepInterrupted, StepRefused, StepFailed, StepDrillEnd, StepRunEnd:
		return true
	}
	return false
}

// Stage is the runbook's step an event belongs to: 1 match, 2 freeze
// growth, 3 kill rounds, 4 confirm and record; 0 is outside the stop
// order (start, signals, the drill's own lines).
type Stage int

// The runbook's four steps.
const (
	StageNone   Stage = 0
	StageMatch  Stage = 1
	StageFreeze Stage = 2
	StageKill   Stage = 3
	StageRecord Stage = 4
)

// String is the step's name as the runbook and the progress lines say it.
func (s Stage) String() string {
	switch s {
	case StageMatch:
		return "match"
	case StageFreeze:
		return "freeze growth"
	case StageKill:
		return "kill rounds"
	case StageRecord:
		return "confirm and record"
	}
	return ""
}
