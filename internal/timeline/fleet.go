package timeline

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/show"
)

// HostRun is one timeline of a fleet: one run on one host, summed up for
// the fleet postmortem's table.
type HostRun struct {
	// Host names the row: the directory the file was collected into
	// under the fleet directory (the inventory's name for the host, as
	// the Ansible playbook fetches to freeze-incident/HOST/), else the
	// hostname the run recorded, else the file's name.
	Host      string `json:"host"`
	Hostname  string `json:"hostname,omitempty"` // as the run recorded it
	MachineID string `json:"machine_id,omitempty"`
	Kernel    string `json:"kernel,omitempty"`
	File      string `json:"file"`
	Started   string `json:"started,omitempty"` // UTC, RFC 3339
	Command   string `json:"command,omitempty"`
	// Outcome is the step that ended the run (zero, survivors, hold,
	// nothing-matched, dry-run, ...), "unfinished" when none did, or
	// "unreadable".
	Outcome string `json:"outcome"`
	Method  string `json:"method,omitempty"`
	// Matched is the most processes the run held: the fixed set, or the
	// largest freeze round, else the match's first count.
	Matched int `json:"matched"`
	// Where are the containers and pods the run acted in (its match
	// step's), none for a run on the host's own processes.
	Where []Where `json:"where,omitempty"`
	// ZeroMS is from the run's own start (in a drill, after the drill's
	// set-up); only when zero was reached.
	ZeroMS    float64 `json:"time_to_zero_ms,omitempty"`
	Survivors int     `json:"survivors"`
	// Fork and exec attempts of the chain that the BPF gate stopped.
	GateForks uint64 `json:"gate_forks_stopped,omitempty"`
	GateExecs uint64 `json:"gate_execs_stopped,omitempty"`
	// Exit is the exit code freeze gives for that ending, -1 when the
	// timeline does not say (unfinished, unreadable).
	Exit int `json:"exit"`
	// Attention says why the host needs an operator, "" when it does not.
	Attention string  `json:"attention,omitempty"`
	Error     string  `json:"error,omitempty"`
	Events    []Event `json:"-"`
}

// Freeze's exit codes: the one table, which the usage text ("Exit
// codes"), the command, the guard and the fleet postmortem all read.
const (
	ExitZero      = 0 // zero remain, nothing matched, a dry run, a hold
	ExitSurvivors = 1 // processes survive, or the run failed
	ExitUsage     = 2
	ExitRefused   = 3 // a safety rule refused the run; nothing changed
	// ExitInterrupted: SIGINT, SIGTERM or SIGHUP ended the run between two
	// steps; what was frozen stays frozen and the output says how to go on.
	ExitInterrupted = 4
)

// ExitCode is the exit code freeze gives for a run that ended with step
// end, and false for a step that does not end a run. Its words are the
// outcomes: the command's --json, the guard's log and metrics and this
// postmortem all say the step that ended the run.
func ExitCode(end Step) (int, bool) {
	switch end {
	case StepZero, StepNothingMatched, StepDryRun, StepHold, StepHelp:
		return ExitZero, true
	case StepSurvivors, StepMethodFailed, StepFailed:
		return ExitSurvivors, true
	case StepRefused:
		return ExitRefused, true
	case StepInterrupted:
		return ExitInterrupted, true
	case StepUsage:
		return ExitUsage, true
	case StepDrillEnd:
		return ExitZero, true // a failed drill exits 1: Summarize reads its verdict
	case StepRunEnd:
		return ExitZero, true // freeze run's code is its record's (RunEnd.Exit)
	}
	return -1, false
}

// Number reads a numeric field as a recorder holds it in memory (the Go
// type it was recorded with: int, uint64, float64 ...) or as it reads
// back from JSON (float64). Reading float64 alone made every count of
// an in-memory summary 0: the guard's gate_forks, and the
// freeze_gate_*_total metrics built on them.
func Number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case float32:
		return float64(n), true
	case int:
		return float64(n), true
	case int32:
		return float64(n), true
	case int64:
		return float64(n), true
	case uint:
		return float64(n), true
	case uint32:
		return float64(n), true
	case uint64:
		return float64(n), true
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}

// Summarize sums up one run's events.
func Summarize(host, file string, events []Event) HostRun {
	h := HostRun{Host: host, File: file, Outcome: "unfinished", Exit: -1, Events: events}
	var startMS float64 // the run's own start: a drill records its set-up before it
	for _, e := range events {
		h.take(e, &startMS)
		if code, ok := ExitCode(e.Step); ok && h.Exit == -1 {
			h.end(e, code, startMS)
		}
	}
	if h.Host == "" {
		h.Host = h.Hostname
	}
	if h.Host == "" {
		h.Host = strings.TrimSuffix(filepath.Base(file), ".jsonl")
	}
	h.Attention = attention(h, events)
	return h
}

// take reads one event of the run into h. A field of the wrong type (a
// hand-edited or forged file) is left at zero; Decode fills the rest
// (encoding/json goes on past a mismatch), so one bad value does not
// hide a host.
func (h *HostRun) take(e Event, startMS *float64) {
	switch e.Step {
	case StepStart:
		var s Start
		e.Decode(&s)
		*startMS = e.ElapsedMS
		h.Started = e.Time.UTC().Format(time.RFC3339)
		h.Hostname, h.MachineID, h.Kernel = s.Host, s.MachineID, s.Kernel
		h.Command = show.ShellJoin(s.Command)
	case StepMatch:
		var m Matched
		e.Decode(&m)
		h.Matched = max(h.Matched, m.Matched)
		if h.Where == nil {
			h.Where = m.Where
		}
	case StepFreezeRound:
		var f FreezeRound
		e.Decode(&f)
		h.Matched = max(h.Matched, f.Matched)
	case StepFixed:
		var f Fixed
		e.Decode(&f)
		h.Matched = max(h.Matched, f.Set)
	case StepMethod:
		var m MethodChosen
		e.Decode(&m)
		h.Method = m.Method
	case StepSurvivors:
		var s SurvivorsLeft
		e.Decode(&s)
		h.Survivors = len(s.Survivors)
	case StepGateDetached:
		var g GateDetached
		e.Decode(&g)
		h.GateForks, h.GateExecs = g.ForksStopped, g.ExecsStopped+g.TargetExecs
	}
}

// end reads the step that ended the run: its outcome and exit code.
func (h *HostRun) end(e Event, code int, startMS float64) {
	h.Outcome, h.Exit = string(e.Step), code
	if e.Step == StepZero {
		h.ZeroMS = e.ElapsedMS - startMS
	}
	if e.Step == StepDrillEnd {
		var d DrillEnd
		if e.Decode(&d); !d.Passed {
			h.Exit = 1
		}
	}
	if e.Step == StepRunEnd {
		var r RunEnd
		e.Decode(&r)
		h.Exit, h.Survivors = r.Exit, r.Leftovers
	}
}

// attention is why a host needs an operator: anything but a run that
// reached zero, found nothing, or only looked.
func attention(h HostRun, events []Event) string {
	switch Step(h.Outcome) {
	case StepZero, StepNothingMatched, StepDryRun:
		if h.Exit == 0 {
			return ""
		}
	case StepHold:
		return "the chain is held frozen: finish the job or thaw it"
	case StepSurvivors:
		return fmt.Sprintf("%d processes survived the kill rounds: run the same command again there", h.Survivors)
	case StepInterrupted:
		return "interrupted: what was frozen stays frozen; run the same command again there"
	}
	if h.Outcome == "unfinished" {
		last := "no step"
		if len(events) > 0 {
			last = fmt.Sprintf("step %q", events[len(events)-1].Step)
		}
		return "the timeline stops early, after " + last + ": freeze was killed there, or is still running"
	}
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Step.Ends() && events[i].Msg != "" {
			return h.Outcome + ": " + events[i].Msg
		}
	}
	return h.Outcome
}

// Host is what a run's start event says of the machine, so that
// timelines collected from a fleet say where each ran: the hostname, the
// machine id (/etc/machine-id, stable across renames) and the kernel
// release. What cannot be read is left out.
func Host() HostInfo {
	var h HostInfo
	h.Host, _ = os.Hostname()
	for _, p := range []string{"/etc/machine-id", "/var/lib/dbus/machine-id"} {
		if b, err := os.ReadFile(p); err == nil && len(strings.TrimSpace(string(b))) > 0 {
			h.MachineID = strings.TrimSpace(string(b))
			break
		}
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		h.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	return h
}
