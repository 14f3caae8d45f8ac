package timeline

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// The typed records of the steps that readers decode. A writer records
// one with RecordOf; every reader (the renderer, the fleet summary, the
// command's report, restore, the benchmark) decodes it with Event.Decode
// into the same type, from memory or from a file alike: RecordOf keeps in
// memory what it writes. An untyped map read by hand in five places is
// how the guard's gate counts came to read 0 (an in-memory uint64 read as
// a float64).

// Start is the first event of a run (StepStart).
type Start struct {
	Command     []string      `json:"command"`
	PID         int           `json:"pid"`
	UID         int           `json:"uid"`
	Targets     []StartTarget `json:"targets"`
	Under       []string      `json:"under"`
	Args        []string      `json:"args"`
	Descendants bool          `json:"descendants"`
	MethodAsked string        `json:"method_asked"`
	Hold        bool          `json:"hold"`
	DryRun      bool          `json:"dry_run"`
	RoundsMax   int           `json:"rounds_max"`
	TimeoutS    float64       `json:"timeout_s"`
	Priority    []string      `json:"priority"`
	// LiftedAt is when package early lifted the process, RFC 3339 UTC;
	// empty if it did not.
	LiftedAt string `json:"lifted_at,omitempty"`
	// LiftCPUUS is the CPU the process had used when it lifted itself,
	// in microseconds: everything before the lift, the package's first
	// stage and the shell's fork included.
	LiftCPUUS int64 `json:"lift_cpu_us,omitempty"`
	// Version is the freeze that ran (internal/version's line).
	Version string `json:"freeze_version,omitempty"`
	HostInfo
}

// StartTarget is a --path target as the run resolved it.
type StartTarget struct {
	Path string `json:"path"`
	Dev  uint64 `json:"dev"`
	Ino  uint64 `json:"ino"`
	Mode string `json:"mode"`
}

// HostInfo names the machine a run was on, for the fleet postmortem.
type HostInfo struct {
	Host      string `json:"host,omitempty"`
	MachineID string `json:"machine_id,omitempty"`
	Kernel    string `json:"kernel,omitempty"`
}

// Matched is the first scan's count (StepMatch).
type Matched struct {
	Matched     int     `json:"matched"`
	ByPath      int     `json:"by_path"`
	ByDeleted   int     `json:"by_deleted"`
	ByUnder     int     `json:"by_under"`
	Descendants int     `json:"descendants"`
	Zombies     int     `json:"zombies"`
	Scanned     int     `json:"scanned"`
	ScanMS      float64 `json:"scan_ms"`
	ReadMS      float64 `json:"read_ms,omitempty"`   // of it, reading the processes
	ArgsRead    int     `json:"args_read,omitempty"` // argv read for --arg
	ArgsMS      float64 `json:"args_ms,omitempty"`
	// ArgsRecorded matched --arg by the argv their exec recorded (an
	// armed guard's recorder), without reading /proc.
	ArgsRecorded int    `json:"args_recorded,omitempty"`
	ScanFrom     string `json:"scan_from"`
	// Where the matches run, for a run in a container or pod (or of a
	// container's file named through a process): each container and
	// pod, and how many of the matches are there.
	Where []Where `json:"where,omitempty"`
}

// Where is one container or pod a run acted in; all empty is the host.
type Where struct {
	Runtime   string `json:"runtime,omitempty"`
	Container string `json:"container,omitempty"`
	Pod       string `json:"pod,omitempty"`
	Processes int    `json:"processes"`
}

// MethodChosen is the frozen set the run opened (StepMethod).
type MethodChosen struct {
	Method string   `json:"method"`
	Why    string   `json:"why"`
	Group  string   `json:"group"`
	Reused bool     `json:"reused"`
	Notes  []string `json:"notes"`
}

// GateAttached is the gate as it was attached (StepGateAttached).
type GateAttached struct {
	Preloaded bool     `json:"preloaded"`
	LoadMS    float64  `json:"load_ms"`
	AttachMS  float64  `json:"attach_ms"`
	HeldMS    float64  `json:"held_ms"`
	ExtrasMS  float64  `json:"extras_ms"`
	Files     int      `json:"files"`
	ByFile    bool     `json:"by_file"`
	Programs  []uint32 `json:"programs"`
	Action    string   `json:"action"`
	Form      string   `json:"form"`
	Tried     []string `json:"tried,omitempty"`
	Missing   []string `json:"missing,omitempty"`
}

// LetGo is the end of holding an --arg chain by file (StepLetGo): the
// gate held every process of the file while the scan read their argv;
// the matches are then held by mark, and the others let go.
type LetGo struct {
	Marked int `json:"marked"` // matches marked in the gate
	// ByIterator of them were marked by the mark iterator in one pass
	// (the processes of the file); the rest one by one, by pidfd.
	ByIterator int `json:"by_iterator"`
	LetGo      int `json:"let_go"`  // processes let go: the file's, no --arg in their argv, and theirs
	Stopped    int `json:"stopped"` // of those, how many the gate had stopped (each continued)
	// Held is how long each stopped one was held, in milliseconds, by
	// pid; HeldMaxMS the longest.
	Held      []Held   `json:"held,omitempty"`
	HeldMaxMS float64  `json:"held_max_ms"`
	Scans     int      `json:"scans"` // scans it took until none was left to sort
	TookMS    float64  `json:"took_ms"`
	Errors    []string `json:"errors,omitempty"`
}

// Held is one process the gate stopped and freeze let go.
type Held struct {
	PID    int     `json:"pid"`
	HeldMS float64 `json:"held_ms"`
}

// GateDetached is the gate's count of the chain's attempts
// (StepGateDetached). ForksStopped and ExecsStopped count every attempt
// the gate ended, refused or stopped.
type GateDetached struct {
	Action       string `json:"action"`
	Form         string `json:"form"`
	ForksStopped uint64 `json:"forks_stopped"`
	ExecsStopped uint64 `json:"execs_stopped"`
	ForksRefused uint64 `json:"forks_refused"`
	ExecsRefused uint64 `json:"execs_refused"`
	TargetExecs  uint64 `json:"target_execs"`
	Lineage      uint64 `json:"lineage"`
	// Task storage a gate program could not create (gate.Counters):
	// kills counted without a note, marks the mark iterator could not
	// make (made by pidfd instead), children the lineage could not gate.
	KillUnnoted   uint64 `json:"kill_unnoted,omitempty"`
	MarkFailed    uint64 `json:"mark_failed,omitempty"`
	LineageFailed uint64 `json:"lineage_failed,omitempty"`
	Error         string `json:"error,omitempty"`
	// AttachMS is when the rest of the gate (the refusal) had attached,
	// from the start of the attach, where it attached beside the kill;
	// AttachError why it did not.
	AttachMS    float64 `json:"attach_ms,omitempty"`
	AttachError string  `json:"attach_error,omitempty"`
	// Tried: auto's refusing forms tried in the background, each with
	// why it did not load, where none did.
	Tried []string `json:"tried,omitempty"`
}

// SurvivorsLeft are the pids alive when the rounds ran out (StepSurvivors).
type SurvivorsLeft struct {
	Survivors []int `json:"survivors"`
}

// DrillEnd is the drill's verdict (StepDrillEnd).
type DrillEnd struct {
	Passed    bool     `json:"passed"`
	Reached   int      `json:"reached"`
	Leftovers []string `json:"leftovers"`
}

// Revoked is one file whose exec bits a run removed (StepRevokeIntent,
// StepRevoke): what restore needs to put them back, and to check it is
// still the same file.
type Revoked struct {
	Path    string `json:"path"`
	Dev     uint64 `json:"dev"`
	Ino     uint64 `json:"ino"`
	Mode    string `json:"mode"`     // octal, as 0o755 is written: "0755"
	NewMode string `json:"new_mode"` // octal
	UID     int    `json:"uid"`
	GID     int    `json:"gid"`
	// CtimeNS is a string: a nanosecond count does not survive a float64.
	CtimeNS string `json:"ctime_ns"`
}

// RunStart is freeze run's command, started and capped (StepRunStart).
type RunStart struct {
	// The machine and the freeze, as a stop order's start records them
	// (a run's record said neither).
	HostInfo
	Version  string   `json:"freeze_version,omitempty"`
	Command  []string `json:"command"`
	PID      int      `json:"pid"`
	Cap      string   `json:"cap"` // cgroup2, cgroup1 or rlimit
	CapWhy   string   `json:"cap_why"`
	Group    string   `json:"group,omitempty"`
	MaxProcs int      `json:"max_procs"`
	// Start is how CMD was started: "direct" (by freeze itself, #51),
	// else "helper: " and why not directly.
	Start string `json:"start,omitempty"`
	// Lineage is "on" where the run records who started whom, else
	// "off: " and why (its leftovers are then named without starters).
	Lineage string `json:"lineage,omitempty"`
}

// RunExit is how the command ended (StepRunExit): Status is its exit
// status (128+N for signal N), -1 if it did not exit.
type RunExit struct {
	Status   int    `json:"status"`
	Signal   string `json:"signal,omitempty"` // one freeze passed on
	TimedOut bool   `json:"timed_out"`
}

// RunLeftover is a process that outlived the command (StepLeftover).
type RunLeftover struct {
	PID     int      `json:"pid"`
	Exe     string   `json:"exe"`
	Comm    string   `json:"comm"`
	AgeS    float64  `json:"age_s"`
	PPID    int      `json:"ppid"`
	How     string   `json:"how,omitempty"`
	Pipes   int      `json:"pipes"`
	Sockets int      `json:"sockets"`
	Ports   []string `json:"ports,omitempty"`
	// Args is its argv; StartedBy who started it (the Go test package,
	// or its ancestors' argv), from the run's lineage.
	Args      []string `json:"args,omitempty"`
	StartedBy string   `json:"started_by,omitempty"`
}

// RunEnd is freeze run's verdict (StepRunEnd).
type RunEnd struct {
	Exit      int    `json:"exit"` // freeze run's exit code
	Why       string `json:"why"`
	Leftovers int    `json:"leftovers"`
	Refused   int    `json:"forks_refused"` // by the cap (pids.events)
	// Peak is pids.peak; absent where there is none (5.10, the rlimit):
	// the reader refuses a negative count, and -1 made such a record
	// unreadable.
	Peak int `json:"peak,omitempty"`
	Max  int `json:"max_procs"`
	// AtCap: what the group held when the cap first fired, by
	// executable ("2043 x /tmp/x/bomb").
	AtCap  []string `json:"at_cap,omitempty"`
	Zero   bool     `json:"zero"`
	TookMS float64  `json:"took_ms"`
	// TeardownMS is from the freeze to zero confirmed; RemoveMS the
	// groups' removal after it.
	TeardownMS float64 `json:"teardown_ms"`
	RemoveMS   float64 `json:"remove_ms"`
}

// Memory is freeze's own peak resident memory (StepMemory).
type Memory struct {
	VmHWMKiB int64 `json:"vm_hwm_kib"`
}

// RecordOf records an event whose fields are v, a typed record above:
// the event held in memory carries exactly what the file does.
func (r *Recorder) RecordOf(stage Stage, step Step, msg string, v any) Event {
	fields, err := fieldsOf(v)
	if err != nil {
		fields = F{"error": fmt.Sprintf("recording %T: %v", v, err)}
	}
	return r.Record(stage, step, msg, fields)
}

// fieldsOf is v as the map a timeline line holds, its numbers kept
// exact (json.Number; Number reads them).
func fieldsOf(v any) (F, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var f F
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&f); err != nil {
		return nil, err
	}
	return f, nil
}

// Decode decodes the event's fields into v, a typed record above: from
// the line it was read from, else from its fields.
func (e Event) Decode(v any) error {
	b := e.raw
	if b == nil {
		var err error
		if b, err = json.Marshal(e.Fields); err != nil {
			return err
		}
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("step %s: %w", e.Step, err)
	}
	return nil
}

// FreezeRound is one round of freezing growth (StepFreezeRound).
type FreezeRound struct {
	Round      int `json:"round"`
	Matched    int `json:"matched"`
	Outside    int `json:"outside"`
	Moved      int `json:"moved"`
	Gone       int `json:"gone"`
	ReusedPIDs int `json:"reused_pids"`
	// Failed are the moves that failed for a reason other than death
	// (left outside, stopped by SIGSTOP); FailedErr the first's error.
	Failed    int     `json:"failed,omitempty"`
	FailedErr string  `json:"failed_error,omitempty"`
	Frozen    bool    `json:"frozen"`
	TookMS    float64 `json:"took_ms"`
}

// KillRound is one kill round (StepKillRound).
type KillRound struct {
	Round    int     `json:"round"`
	Live     int     `json:"live"`
	Inside   int     `json:"inside"`
	Signaled int     `json:"signaled"`
	GroupErr string  `json:"group_err"`
	KillMS   float64 `json:"kill_ms"` // the group's own kill
	TookMS   float64 `json:"took_ms"`
}

// KillProgress is where a long kill round stands (StepKillProgress).
type KillProgress struct {
	Round          int     `json:"round"`
	Live           int     `json:"live"`
	Signaled       int     `json:"signaled"`
	Waiting        int     `json:"waiting"`
	Gone           int     `json:"gone"`
	GroupPopulated bool    `json:"group_populated"`
	TookMS         float64 `json:"took_ms"`
}
