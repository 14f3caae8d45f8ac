package stop

import (
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/timeline"
)

// detachQueue is how many lines a run may have said and not yet written;
// detachWait is how long the end of a run waits for them to be written.
const (
	detachQueue = 1024
	detachWait  = 5 * time.Second
)

// Detached returns an Output that never makes the run wait for its
// words, and a flush for the end of the run. Its lines are written in
// order by a goroutine of their own; when the writer is stalled (a
// terminal paused with ^S, a pipe nobody reads, journald starved by the
// chain, an asker that stopped reading the guard's socket) and
// detachQueue lines are waiting, further lines are dropped and counted:
// the timeline has every event. Before, a progress line that could not
// be written held the stop order at that line, the chain stopped by
// the gate and never killed, and the record ended at the last event
// that was written to the file before its line blocked (#34's run that
// stopped at "fixed").
//
// flush waits at most detachWait for the lines to be written, then says
// how many were dropped, if any. A Blocking Output is returned as it is.
func (o Output) Detached() (Output, func()) {
	if o.Blocking {
		return o, func() {}
	}
	ch := make(chan func(), detachQueue)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for say := range ch {
			say()
		}
	}()
	var dropped atomic.Int64
	// A line said after flush (a recorder's writer that outlived its
	// Close, a guard goroutine still ending) is dropped, never sent on
	// the closed channel.
	var mu sync.Mutex
	closed := false
	send := func(say func()) {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			dropped.Add(1)
			return
		}
		select {
		case ch <- say:
		default:
			dropped.Add(1)
		}
	}
	var d Output
	if o.Progress != nil {
		d.Progress = func(e timeline.Event) { send(func() { o.Progress(e) }) }
	}
	if o.Warn != nil {
		d.Warn = func(s string) { send(func() { o.Warn(s) }) }
	}
	if o.Note != nil {
		d.Note = func(s string) { send(func() { o.Note(s) }) }
	}
	flush := func() {
		mu.Lock()
		closed = true
		close(ch)
		mu.Unlock()
		select {
		case <-done:
		case <-time.After(detachWait):
		}
		if n := dropped.Load(); n > 0 {
			o.warn("%d lines were not shown: the output was not taking them, and freeze did not wait for it; the record (the timeline, the guard's log) has what they said", n)
		}
	}
	return d, flush
}

// pausing has the run stop its own process (SIGSTOP) once it has recorded
// step, the first time (Tuning.PauseAt), after flush (the record written
// up to there); "" changes nothing. The stop is sent from the recording
// goroutine, before the run goes on.
func (o Output) pausing(step timeline.Step, flush func()) Output {
	if step == "" {
		return o
	}
	var once sync.Once
	progress := o.Progress
	o.Progress = func(e timeline.Event) {
		if progress != nil {
			progress(e)
		}
		if e.Step == step {
			once.Do(func() {
				flush()
				unix.Kill(os.Getpid(), unix.SIGSTOP)
			})
		}
	}
	return o
}
