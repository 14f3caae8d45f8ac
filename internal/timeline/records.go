package timeline

// The typed records of the remaining steps: every step that carries
// fields writes one of these with RecordOf, so a reader decodes the type
// the writer wrote (the rule typed.go states).

// Failure is why a run was refused or failed (StepRefused, StepFailed,
// StepRevokeRefused).
type Failure struct {
	Error string `json:"error"`
}

// HiddenSeen are the processes named like a target that could not be
// inspected (StepHidden).
type HiddenSeen struct {
	PIDs  []int `json:"pids"`
	Force bool  `json:"force"`
}

// Interrupted is where a signal ended the run (StepInterrupted): the
// group and method that hold what was frozen, and, by where it stopped,
// what was frozen or revoked (before the freeze), the last freeze
// round's counts (between two), or the set held (before the kill).
type Interrupted struct {
	Signal  string `json:"signal"`
	Group   string `json:"group,omitempty"`
	Method  string `json:"method,omitempty"`
	Frozen  *int   `json:"frozen,omitempty"`
	Revoked *int   `json:"revoked,omitempty"`
	Round   *int   `json:"round,omitempty"`
	Moved   *int   `json:"moved,omitempty"`
	Matched *int   `json:"matched,omitempty"`
	Set     *int   `json:"set,omitempty"`
}

// DryRunMethod is a method a dry run tried (StepDryRunMethod).
type DryRunMethod struct {
	Method string `json:"method"`
	OK     bool   `json:"ok"`
	Why    string `json:"why"`
}

// DryRunGate is a BPF program kind a dry run tried (StepDryRunGate).
type DryRunGate struct {
	Kind string `json:"kind"`
	OK   bool   `json:"ok"`
	Why  string `json:"why"`
}

// DryRunProcess is a process a dry run would act on, or, with More set
// alone, how many more there are (StepDryRunProcess).
type DryRunProcess struct {
	PID    int    `json:"pid,omitempty"`
	PPID   int    `json:"ppid,omitempty"`
	State  string `json:"state,omitempty"`
	Reason string `json:"reason,omitempty"`
	Exe    string `json:"exe,omitempty"`
	More   int    `json:"more,omitempty"`
}

// ContainerInit is a match that is its container's PID 1
// (StepContainerInit): the kill rounds end the container with it.
type ContainerInit struct {
	PID       int    `json:"pid"`
	Runtime   string `json:"runtime,omitempty"`
	Container string `json:"container,omitempty"`
	Pod       string `json:"pod,omitempty"`
}

// LookAlike is another file of the target's name that live processes
// run, left alone (StepLookAlike).
type LookAlike struct {
	Target string `json:"target"`
	Path   string `json:"path"`
	Count  int    `json:"count"`
}

// Ended is a run's end that counts the chain's zombies left for their
// parents (StepZero, StepNothingMatched).
type Ended struct {
	Zombies int `json:"zombies"`
}

// GroupNamed names the group a step acted on (StepReuse,
// StepGroupRemoved, StepGroupLeft).
type GroupNamed struct {
	Group string `json:"group"`
}

// Placed is where cgroup2 froze a group the chain occupies (StepPlace):
// the group itself (in place) or a group nested in it, and why there.
type Placed struct {
	Group   string `json:"group"`
	Frozen  string `json:"frozen"`
	InPlace bool   `json:"in_place"`
	Why     string `json:"why"`
}

// Fixed is the fixed set (StepFixed).
type Fixed struct {
	Set int `json:"set"`
}

// Hold is a set held frozen, --hold (StepHold).
type Hold struct {
	Set   int    `json:"set"`
	Group string `json:"group"`
}

// GateUnavailable is why the gate was not used (StepGateUnavailable).
type GateUnavailable struct {
	Error       string `json:"error"`
	MethodAsked string `json:"method_asked"`
}

// LockTakeover is a run lock taken over from a run that died holding it
// (StepLockTakeover).
type LockTakeover struct {
	Lock            string   `json:"lock"`
	StalePID        int      `json:"stale_pid"`
	StaleStartTicks uint64   `json:"stale_start_ticks"`
	StaleCommand    []string `json:"stale_command"`
}

// SignalCaught is a signal that arrived during the run (StepSignal, and
// StepSignalAgain with its count).
type SignalCaught struct {
	Signal string `json:"signal"`
	Count  int    `json:"count,omitempty"`
}

// PriorityDropped is freeze's real-time priority dropped by the kernel
// (StepPriorityDropped).
type PriorityDropped struct {
	Reason string `json:"reason"`
}
