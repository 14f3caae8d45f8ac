package incident

import (
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"freeze/internal/stop"
	"freeze/internal/timeline"
)

// watchSignals catches SIGINT, SIGTERM and SIGHUP (the operator's ssh
// session dropped) for the whole run, and ignores SIGPIPE (freeze piped
// into head, which exited): by default each of the last two killed
// freeze mid-step, with no record and its lock left behind. A write to a
// closed pipe now fails with EPIPE and the run goes on. The first is
// recorded at once and handed to the stop order, which ends between two
// steps; any further one is recorded and otherwise ignored, because dying
// in the middle of a round would leave stopped processes outside the
// frozen set with no record of them. Every step is bounded by its own
// waits, so the run still ends promptly. The returned function ends the
// recording, before the timeline is closed, and the catching.
func watchSignals(rec *timeline.Recorder) (<-chan os.Signal, func()) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	signal.Ignore(syscall.SIGPIPE)
	forward := make(chan os.Signal, 1)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 1; ; n++ {
			select {
			case sig := <-sigs:
				// Handed over before it is recorded: once the record
				// says so, the run sees it at its next look.
				if n == 1 {
					forward <- sig
				}
				recordSignal(rec, sig, n)
			case <-quit:
				return
			}
		}
	}()
	// The stop function takes the channel off the signal list: a guard
	// runs one request after another in one process, and each left a
	// channel registered before (the guard's own handler still catches
	// SIGINT and SIGTERM between requests).
	return forward, func() { close(quit); wg.Wait(); signal.Stop(sigs) }
}

// recordSignal records the n-th signal of a run.
func recordSignal(rec *timeline.Recorder, sig os.Signal, n int) {
	name := stop.SignalName(sig)
	if n == 1 {
		rec.RecordOf(timeline.StageNone, timeline.StepSignal, fmt.Sprintf("%s: stopping after the current step; what is frozen stays frozen", name), timeline.SignalCaught{Signal: name})
		return
	}
	rec.RecordOf(timeline.StageNone, timeline.StepSignalAgain, fmt.Sprintf("%s (signal %d of this run): ignored, so that no set is left half-moved; freeze is finishing the current step", name, n), timeline.SignalCaught{Signal: name, Count: n})
}
