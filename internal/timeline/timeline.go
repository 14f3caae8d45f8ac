// Package timeline records the steps of a run as events, one JSON object a
// line, with wall-clock and monotonic times, so the record can be attached
// to a postmortem as it was written during the incident.
//
// Recording must never hold up containment: events go through a bounded
// buffer to a writer goroutine, and when the file cannot keep up or cannot
// be written at all (disk full, read-only), events are counted as dropped
// from the file, kept in memory, and the run goes on.
package timeline

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/safedir"
)

// Event is one step. Fields holds the counts and decisions of the step.
type Event struct {
	Time      time.Time      `json:"time"`
	ElapsedMS float64        `json:"elapsed_ms"`
	Step      Step           `json:"step"`
	Stage     Stage          `json:"stage,omitempty"` // runbook step 1..4, 0 outside the stop order
	Msg       string         `json:"msg,omitempty"`
	Fields    map[string]any `json:"-"`
	// raw is the line an event was read from: Decode reads numbers from
	// it exactly (a float64 holds an inode number only up to 2^53).
	raw []byte
}

// Line is the line an event was read from, as it was read (checked);
// for an event made in this process, its JSON.
func (e Event) Line() ([]byte, error) {
	if e.raw != nil {
		return e.raw, nil
	}
	return json.Marshal(e)
}

// MarshalJSON flattens Fields into the object beside the fixed keys.
func (e Event) MarshalJSON() ([]byte, error) {
	m := make(map[string]any, len(e.Fields)+5)
	for k, v := range e.Fields {
		m[k] = v
	}
	m["time"] = e.Time.Format(time.RFC3339Nano)
	m["elapsed_ms"] = e.ElapsedMS
	m["step"] = e.Step
	if e.Stage != 0 {
		m["stage"] = e.Stage
	}
	if e.Msg != "" {
		m["msg"] = e.Msg
	}
	b, err := json.Marshal(m)
	return shellInert(b), err
}

// shellInert writes $ and ` as JSON's \u escapes. JSON has them only
// inside strings, so the record means the same; but a $(...) in a
// chain's path no longer runs when someone sources or evals a line of
// the file in a shell (#24, finding 2). encoding/json already escapes
// <, > and & this way.
func shellInert(b []byte) []byte {
	if bytes.IndexAny(b, "$`") < 0 {
		return b
	}
	b = bytes.ReplaceAll(b, []byte("$"), []byte(`\u0024`))
	return bytes.ReplaceAll(b, []byte("`"), []byte(`\u0060`))
}

// F is shorthand for an event's fields.
type F map[string]any

// fileBuffer is how many events may wait for the file: a run records a few
// hundred at most, so only a stalled file fills it.
const fileBuffer = 4096

// closeWait bounds how long Close waits for the file to take the last
// events: the run's outcome must not wait on a hung disk.
const closeWait = 2 * time.Second

// Recorder records events.
type Recorder struct {
	start   time.Time
	path    string
	want    string // the path asked for, even when it could not be opened
	onEvent func(Event)
	onErr   func(error)

	mu      sync.Mutex
	events  []Event
	dropped int
	werr    error

	ch   chan []byte
	done chan struct{}
	// synced answers Sync: the writer, given an empty line, fsyncs the
	// file and answers here.
	synced chan error
}

// New starts a recorder. With a non-empty path it writes there, creating
// the directory; when the file cannot be opened it returns the recorder
// (in memory only) together with the error, so the caller can warn and go
// on. onEvent, if set, sees every event as it happens.
func New(path string, onEvent func(Event)) (*Recorder, error) {
	r := &Recorder{start: time.Now(), path: path, want: path, onEvent: onEvent}
	if path == "" {
		return r, nil
	}
	// The directory by descriptor, no symlink followed in any component.
	dfd, err := safedir.MkdirAll(filepath.Dir(path), 0o755)
	if err != nil {
		r.path = ""
		return r, fmt.Errorf("timeline %s: %w", path, err)
	}
	unix.Close(dfd)
	// Appended to only if it is a regular file of the caller's, with one
	// link, that no FIFO at the name can hang (safedir.Open).
	f, err := safedir.Open(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		r.path = ""
		return r, fmt.Errorf("timeline %s: %w", path, err)
	}
	r.ch = make(chan []byte, fileBuffer)
	r.done = make(chan struct{})
	r.synced = make(chan error, 1)
	go r.write(f)
	return r, nil
}

func (r *Recorder) write(f *os.File) {
	defer close(r.done)
	w := bufio.NewWriter(f)
	for b := range r.ch {
		if len(b) == 0 { // Sync
			err := w.Flush()
			if err == nil {
				err = f.Sync()
			}
			r.synced <- err
			continue
		}
		w.Write(b)
		// Flush each event: a run cut short (power, SIGKILL) keeps what
		// it recorded up to then.
		if err := w.Flush(); err != nil {
			r.mu.Lock()
			first := r.werr == nil
			if first {
				r.werr = err
			}
			r.dropped++
			r.mu.Unlock()
			w.Reset(f)
			if first && r.onErr != nil {
				r.onErr(err)
			}
		}
	}
	f.Close()
}

// Sync waits until every event recorded so far is written and the file
// is fsynced, for a record that must be on disk before freeze acts on
// it (a revocation's original mode, before the chmod). It gives up after
// closeWait: a hung disk must not hold up the run.
func (r *Recorder) Sync() error {
	if r.ch == nil {
		return fmt.Errorf("timeline: in memory only, nothing to sync")
	}
	timeout := time.After(closeWait)
	select {
	case r.ch <- []byte{}:
	case <-timeout:
		return fmt.Errorf("timeline %s: the writer did not take the sync in %v", r.path, closeWait)
	}
	select {
	case err := <-r.synced:
		return err
	case <-timeout:
		return fmt.Errorf("timeline %s: not synced within %v", r.path, closeWait)
	}
}

// SaveAtEnd marks a recorder that could not be given a file (its
// directory was unsafe) as wanting one: Incomplete reports true, and
// SaveCopy names the copy after name.
func (r *Recorder) SaveAtEnd(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.path == "" {
		r.want = name
	}
}

// Path is where the timeline is written, or "" when it is in memory only.
func (r *Recorder) Path() string { return r.path }

// OnWriteError sets a function told once, from the writer, when the file
// stops taking events (a full disk). Set it before the first Record.
func (r *Recorder) OnWriteError(f func(error)) { r.onErr = f }

// Incomplete reports whether events asked to go to a file did not all
// reach it: the file could not be opened, or writes to it failed. Call it
// after Close.
func (r *Recorder) Incomplete() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.want != "" && (r.path == "" || r.dropped > 0)
}

// SaveCopy writes every event recorded in memory to a new file in the
// first of dirs that takes it, and makes that the recorder's path. It is
// the way out when the asked-for location was read-only or full.
func (r *Recorder) SaveCopy(dirs ...string) (string, error) {
	var b []byte
	for _, e := range r.Events() {
		line, err := json.Marshal(e)
		if err != nil {
			continue
		}
		b = append(append(b, line...), '\n')
	}
	name := filepath.Base(r.want)
	if name == "." || name == "/" || name == "" {
		name = "freeze-" + r.start.UTC().Format("20060102T150405Z") + ".jsonl"
	}
	var errs []error
	for _, d := range dirs {
		f, err := safedir.CreateTemp(d, strings.TrimSuffix(name, ".jsonl")+"-*.jsonl", 0o600)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		_, err = f.Write(b)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(f.Name())
			errs = append(errs, err)
			continue
		}
		r.mu.Lock()
		r.path = f.Name()
		r.mu.Unlock()
		return f.Name(), nil
	}
	return "", errors.Join(errs...)
}

// Record adds an event.
func (r *Recorder) Record(stage Stage, step Step, msg string, fields F) Event {
	now := time.Now()
	e := Event{Time: now, ElapsedMS: float64(now.Sub(r.start).Microseconds()) / 1000, Step: step, Stage: stage, Msg: msg, Fields: fields}
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	if r.ch != nil {
		b, err := json.Marshal(e)
		if err == nil {
			select {
			case r.ch <- append(b, '\n'):
			default:
				r.mu.Lock()
				r.dropped++
				r.mu.Unlock()
			}
		}
	}
	if r.onEvent != nil {
		r.onEvent(e)
	}
	return e
}

// Events returns a copy of what was recorded.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

// Close flushes the file, waiting at most closeWait, and reports events
// that did not reach it.
func (r *Recorder) Close() error {
	if r.ch == nil {
		return nil
	}
	close(r.ch)
	select {
	case <-r.done:
	case <-time.After(closeWait):
		return fmt.Errorf("timeline %s: still writing after %v; the file may be incomplete", r.path, closeWait)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dropped > 0 {
		return fmt.Errorf("timeline %s: %d events not written: %v", r.path, r.dropped, r.werr)
	}
	return nil
}
