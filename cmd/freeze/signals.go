package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"freeze/internal/interrupt"
)

// withSignals is the one catcher of SIGINT, SIGTERM and SIGHUP (the
// operator's ssh session dropped): the first cancels the returned
// context with an *interrupt.Cause naming it, and each after it goes to
// the cause's Later, for the run to record. A run ends between two
// steps, never inside one, so a second signal never kills freeze in the
// middle of a round. SIGPIPE is ignored (freeze piped into head, which
// exited): a write to the closed pipe fails with EPIPE and the run goes
// on, where by default it killed freeze mid-step with no record and its
// lock, groups or command left behind. The stop function releases the
// signals to their defaults' handling again.
func withSignals(parent context.Context) (context.Context, func()) {
	signal.Ignore(syscall.SIGPIPE)
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	ctx, cancel := context.WithCancelCause(parent)
	later := make(chan syscall.Signal, 8)
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		first := true
		for {
			select {
			case s := <-sigs:
				sig := s.(syscall.Signal)
				if first {
					first = false
					cancel(&interrupt.Cause{Signal: sig, Later: later})
					continue
				}
				select {
				case later <- sig:
				default:
				}
			case <-quit:
				return
			}
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(quit)
		<-done
		cancel(nil)
	}
}
