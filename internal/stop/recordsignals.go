package stop

import (
	"context"
	"fmt"

	"freeze/internal/interrupt"
	"freeze/internal/timeline"
)

// recordSignals records the signals that end ctx while the run lasts
// (the command catches SIGINT, SIGTERM and SIGHUP for its whole life: see
// package interrupt). The first is recorded as soon as it ends ctx; the
// stop order sees it at its next look and ends between two steps. Each
// further one is recorded and otherwise ignored, because dying in the
// middle of a round would leave stopped processes outside the frozen set
// with no record of them. Every step is bounded by its own waits, so the
// run still ends promptly. The returned function ends the recording,
// before the timeline is closed.
func recordSignals(ctx context.Context, rec *timeline.Recorder) func() {
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-ctx.Done():
		case <-quit:
			return
		}
		c, _ := interrupt.Of(ctx)
		if c == nil {
			c = &interrupt.Cause{Signal: interrupt.Signal(ctx)}
		}
		recordSignal(rec, interrupt.Name(c.Signal), 1)
		for n := 2; ; n++ {
			select {
			case s := <-c.Later:
				recordSignal(rec, interrupt.Name(s), n)
			case <-quit:
				return
			}
		}
	}()
	return func() { close(quit); <-done }
}

// recordSignal records the n-th signal of a run.
func recordSignal(rec *timeline.Recorder, name string, n int) {
	if n == 1 {
		rec.RecordOf(timeline.StageNone, timeline.StepSignal, fmt.Sprintf("%s: stopping after the current step; what is frozen stays frozen", name), timeline.SignalCaught{Signal: name})
		return
	}
	rec.RecordOf(timeline.StageNone, timeline.StepSignalAgain, fmt.Sprintf("%s (signal %d of this run): ignored, so that no set is left half-moved; freeze is finishing the current step", name, n), timeline.SignalCaught{Signal: name, Count: n})
}
