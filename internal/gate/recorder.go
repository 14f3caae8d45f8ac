package gate

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"freeze/internal/proc"
)

// Recorder records each process's argv at its exec, in the kernel
// (record_exec, on tp_btf/sched_process_exec), and refuses nothing: an
// armed guard keeps it attached, so that a request named with --arg reads
// a process's argv from its record instead of /proc/PID/cmdline, which
// waits for the process's address-space lock. A fork bomb's root holds
// that lock through the copy of each fork it makes at its cap: one match
// in five waited 90-430 ms on it (issue #51). It costs every exec on the
// machine a copy of at most 256 bytes, and a record of 264 bytes in the
// exec'ing task's storage, freed with the task.
type Recorder struct {
	ld   *loader
	prog *ebpf.Program
	link link.Link
	recs *ebpf.Map
}

// argvRecordSize is how much of an argv a record holds.
const argvRecordSize = len(gateArgvRec{}.Buf)

// StartRecorder loads the gate's object and attaches its argv recorder
// only.
func StartRecorder() (*Recorder, error) {
	ld, err := newLoader("", 0)
	if err != nil {
		return nil, fmt.Errorf("load the argv recorder: %w", err)
	}
	r := &Recorder{ld: ld, recs: ld.maps["argv_recs"]}
	if r.prog, err = ld.prog("record_exec"); err != nil {
		ld.close()
		return nil, fmt.Errorf("load the argv recorder: %w", err)
	}
	ld.done()
	if r.link, err = link.AttachTracing(link.TracingOptions{Program: r.prog}); err != nil {
		r.prog.Close()
		ld.close()
		return nil, fmt.Errorf("attach the argv recorder: %w", err)
	}
	return r, nil
}

// ErrNoRecord means the process has no record of its argv: it exec'd
// before the recorder attached, it was forked since its exec (a fork
// inherits no record), or the kernel could not make the record.
var ErrNoRecord = errors.New("no record of its argv")

// Args returns the argv h's process was exec'd with, as its exec
// recorded it. full is false when the argv was longer than the record
// (argvRecordSize bytes): args then holds only the elements that ended
// within it. Where no record exists the error is ErrNoRecord.
func (r *Recorder) Args(h *proc.Handle) (args []string, full bool, err error) {
	fd := h.FD()
	if fd < 0 {
		return nil, false, fmt.Errorf("pid %d: %w", h.PID, proc.ErrFixture)
	}
	var rec gateArgvRec
	if err := r.recs.Lookup(uint32(fd), &rec); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil, false, fmt.Errorf("pid %d: %w", h.PID, ErrNoRecord)
		}
		return nil, false, fmt.Errorf("pid %d: read its argv record: %w", h.PID, err)
	}
	if rec.Len == 0 || int(rec.Len) > len(rec.Buf) {
		return nil, false, fmt.Errorf("pid %d: %w (its exec's argv could not be read)", h.PID, ErrNoRecord)
	}
	b := make([]byte, rec.Len)
	for i := range b {
		b[i] = byte(rec.Buf[i])
	}
	return splitArgv(b), rec.Full == 1, nil
}

// splitArgv splits a record's bytes at each NUL. An exec copies each
// string with its NUL, so bytes after the last NUL are the cut end of an
// argv longer than the record, and are dropped: a record can only lose
// an element, never make one up.
func splitArgv(b []byte) []string {
	var out []string
	for {
		i := bytes.IndexByte(b, 0)
		if i < 0 {
			return out
		}
		out = append(out, string(b[:i]))
		b = b[i+1:]
	}
}

// Close detaches and unloads the recorder.
func (r *Recorder) Close() error {
	r.link.Close()
	r.prog.Close()
	return r.ld.close()
}
