package timeline

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// ReadFile parses a timeline file. A malformed line is an error naming
// it, returned with the events before it: a run cut off mid-write leaves
// a truncated last line, and a caller that can use a partial record
// (freeze timeline warns, then renders) still has every event before it.
//
// The file is opened without blocking and must be a regular file of at
// most MaxFileSize: freeze timeline and --fleet hung on a FIFO and read
// /dev/zero until memory ran out (#24, finding 10).
func ReadFile(path string) ([]Event, error) {
	b, err := readRegular(path)
	if err != nil {
		return nil, err
	}
	return Parse(b)
}

// Parse parses timeline lines.
func Parse(b []byte) ([]Event, error) {
	var events []Event
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	n := 0
	for sc.Scan() {
		n++
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			return events, fmt.Errorf("line %d: not a timeline event: %v", n, err)
		}
		e, err := fromMap(m)
		if err != nil {
			return events, fmt.Errorf("line %d: %v", n, err)
		}
		e.raw = append([]byte(nil), line...)
		events = append(events, e)
	}
	return events, sc.Err()
}

func fromMap(m map[string]any) (Event, error) {
	var e Event
	ts, _ := m["time"].(string)
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return e, fmt.Errorf("bad or missing \"time\": %q", ts)
	}
	step, _ := m["step"].(string)
	if step == "" {
		return e, fmt.Errorf("missing \"step\"")
	}
	e.Time, e.Step = t, Step(step)
	e.ElapsedMS, _ = m["elapsed_ms"].(float64)
	st, _ := m["stage"].(float64)
	e.Stage = Stage(st)
	e.Msg, _ = m["msg"].(string)
	e.Fields = map[string]any{}
	for k, v := range m {
		switch k {
		case "time", "elapsed_ms", "step", "stage", "msg":
		default:
			e.Fields[k] = v
		}
	}
	return e, nil
}

// GatePrograms are the kernel ids of the gate's programs a run recorded
// when it attached the gate (step gate-attached, field programs): after
// the run, none of them may still be loaded.
func GatePrograms(events []Event) []uint32 {
	var ids []uint32
	for _, e := range events {
		if e.Step != StepGateAttached {
			continue
		}
		var g GateAttached
		e.Decode(&g)
		ids = append(ids, g.Programs...)
	}
	return ids
}
