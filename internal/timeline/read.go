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
	for k, v := range m {
		if err := checkNumbers(k, v); err != nil {
			return e, err
		}
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

// maxExact is the largest integer a JSON number (a float64) holds
// exactly: a count beyond it is not a count freeze wrote.
const maxExact = 1 << 53

// signed are the fields whose numbers may be negative: a process's exit
// status (-1: ended by a signal).
var signed = map[string]bool{"exit": true, "status": true}

// wide are the identities that may pass maxExact (an overlayfs inode
// with xino carries the layer in its high bits).
var wide = map[string]bool{"dev": true, "ino": true, "lineage": true, "stale_start_ticks": true}

// checkNumbers rejects an impossible number under key k (in arrays and
// objects too): a negative count or duration, or one past what a count
// can be. A reader must never meet one: a negative count panicked the
// text and markdown renders and stopped a whole fleet's table (the third
// audit's S5), and a float past an int's range converts to a negative
// int.
func checkNumbers(k string, v any) error {
	switch v := v.(type) {
	case float64:
		limit := float64(maxExact)
		if wide[k] {
			limit = 1 << 64
		}
		switch {
		case v < 0 && !signed[k]:
			return fmt.Errorf("%q is %v: a count or a duration is never negative", k, v)
		case v > limit || v < -limit:
			return fmt.Errorf("%q is %v: past any count freeze writes", k, v)
		}
	case []any:
		for _, x := range v {
			if err := checkNumbers(k, x); err != nil {
				return err
			}
		}
	case map[string]any:
		for kk, x := range v {
			if err := checkNumbers(kk, x); err != nil {
				return err
			}
		}
	}
	return nil
}
