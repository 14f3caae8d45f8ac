package guard

import (
	"encoding/json"
	"time"
)

// The lines of guard.log, one type per event, written and read as the
// same type: the guard writes them (record), ReadStats and AskFIFO read
// the request lines, census and the fleet read the log as these types.
// Each embeds Line, which record fills.

// Line is what every line of guard.log carries.
type Line struct {
	Event string `json:"event"`
	Time  string `json:"time"` // RFC 3339, UTC
	Level string `json:"level,omitempty"`
}

func (l *Line) line() *Line { return l }

// liner is a typed line: it embeds Line.
type liner interface{ line() *Line }

// LifeLine is the guard's own start and stop ("start", "stop").
type LifeLine struct {
	Line
	PID      int    `json:"pid"`
	Unclean  int    `json:"unclean,omitempty"`  // start: the previous guard did not end cleanly
	Previous string `json:"previous,omitempty"` // start: what the previous guard's state file said
}

// ArmedLine says the guard is armed ("armed"): its gate, its spare and
// its argv recorder.
type ArmedLine struct {
	Line
	Gate        bool   `json:"gate"`
	GateWhy     string `json:"gate_why"`
	GateLoaded  bool   `json:"gate_loaded"`
	Recorder    bool   `json:"argv_recorder"`
	RecorderWhy string `json:"argv_recorder_why,omitempty"`
	PID         int    `json:"pid"`
}

// RequestLine is one request's outcome ("request").
type RequestLine struct {
	Line
	Source    string   `json:"source"` // fifo, socket or auto
	UID       int      `json:"uid"`
	PID       int      `json:"pid"`
	Request   []string `json:"request"`
	Exit      int      `json:"exit"`
	Outcome   string   `json:"outcome"`
	Timeline  string   `json:"timeline"`
	TookMS    float64  `json:"took_ms"`
	ZeroMS    float64  `json:"zero_ms"`
	GateForks uint64   `json:"gate_forks"`
	GateExecs uint64   `json:"gate_execs"`
}

// RefusedLine is a request that was not run ("refused").
type RefusedLine struct {
	Line
	Source string `json:"source"`
	UID    int    `json:"uid"`
	PID    int    `json:"pid"`
	Text   string `json:"line"`
	Error  string `json:"error"`
	Exit   int    `json:"exit"`
}

// AutoLine is the automatic mode's judgement of a growing executable
// ("auto-look", and "auto-declined" at level warning).
type AutoLine struct {
	Line
	Path      string `json:"path"`
	Live      int    `json:"live"`
	Depth     int    `json:"depth"`
	Attempts  uint64 `json:"attempts,omitempty"`
	Act       bool   `json:"act"`
	Why       string `json:"why"`
	UID       int    `json:"uid"`
	LeftOut   int    `json:"left_out,omitempty"`
	Container string `json:"container,omitempty"`
	Pod       string `json:"pod,omitempty"`
	Runtime   string `json:"runtime,omitempty"`
}

// CapLine is one look of --auto-on-cap at a group whose cap refused a
// fork ("auto-cap"): the limit that was hit, who owns it, the refusals
// before and after, and the verdict on the group's chain; Monitor, that
// the hold was only said (--auto-mode monitor).
type CapLine struct {
	Line
	Group     string   `json:"group"`
	PidsMax   string   `json:"pids_max"`
	Owner     string   `json:"owner"`
	Before    int      `json:"refused_before"`
	After     int      `json:"refused_after"`
	Read      string   `json:"read"` // what read the rise: notice (inotify, v2), poll (v1) or walk (a group first seen)
	Path      string   `json:"path,omitempty"`
	Live      int      `json:"live"`
	Depth     int      `json:"depth"`
	Act       bool     `json:"act"`
	Monitor   bool     `json:"monitor,omitempty"`
	Why       string   `json:"why"`
	UID       int      `json:"uid"`
	Container string   `json:"container,omitempty"`
	Pod       string   `json:"pod,omitempty"`
	Runtime   string   `json:"runtime,omitempty"`
	Request   []string `json:"request,omitempty"`
}

// DisarmLine says the automatic triggers stopped acting
// ("auto-disarmed"), and why.
type DisarmLine struct {
	Line
	Why string `json:"why"`
}

// CensusLine is the watcher's census ("census"), with its first rows.
type CensusLine struct {
	Line
	Processes int         `json:"processes"`
	Load      [3]float64  `json:"load"`
	PidSpace  string      `json:"pid_space"`
	Top       []CensusRow `json:"top"`
}

// CensusRow is one row of a CensusLine.
type CensusRow struct {
	Exe      string `json:"exe"`
	Count    int    `json:"count"`
	Orphaned int    `json:"orphaned"`
	Appeared int    `json:"appeared"`
	Vanished int    `json:"vanished"`
	Suspect  bool   `json:"suspect"`
}

// ReapedLine is a freeze run the watcher ended because its freeze was
// gone ("reaped").
type ReapedLine struct {
	Line
	Run     string   `json:"run"`
	Command []string `json:"command"`
	Left    int      `json:"left"`
	Gone    bool     `json:"gone"`
	Error   string   `json:"error,omitempty"`
}

// record appends one line to the log, stamped with event and the time.
func (g *Guard) record(event string, v liner) {
	if g.log == nil {
		return
	}
	l := v.line()
	l.Event, l.Time = event, time.Now().UTC().Format(time.RFC3339Nano)
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	g.logMu.Lock()
	defer g.logMu.Unlock()
	g.log.Write(append(b, '\n'))
	g.rotate()
}
