package stop

import (
	"testing"
	"time"
)

// A line said after the flush is dropped, not sent on a closed channel
// (which would panic): a recorder's writer can outlive its Close, and a
// guard's goroutine can still be ending when the guard flushes. And a
// writer that never returns does not hold the caller: the lines past the
// queue are dropped and counted.
func TestDetachedNeverBlocksNorPanics(t *testing.T) {
	stuck := make(chan struct{})
	defer close(stuck)
	var warned []string
	o := Output{Note: func(string) { <-stuck }, Warn: func(s string) { warned = append(warned, s) }}
	d, flush := o.Detached()
	done := make(chan struct{})
	go func() {
		for i := 0; i < detachQueue+10; i++ {
			d.Note("line")
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("saying lines to a stuck writer held the caller")
	}
	flush()
	d.Note("after the flush")
	if len(warned) != 1 {
		t.Fatalf("warnings %q: want one saying how many lines were dropped", warned)
	}
}
