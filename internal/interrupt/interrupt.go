// Package interrupt carries the signal that ends a run as its context's
// cancel cause. The command (cmd/freeze) catches SIGINT, SIGTERM and
// SIGHUP for its whole life and cancels the context with a *Cause; every
// run takes that context and reads the signal from it. No other package
// calls signal.Notify for them.
package interrupt

import (
	"context"
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// Cause is a context's cancel cause when a signal ended it.
type Cause struct {
	Signal syscall.Signal
	// Later carries the signals caught after the first, for a run to
	// record (a run that is finishing its step ignores them); the
	// catcher drops one that nobody takes at once.
	Later <-chan syscall.Signal
}

func (c *Cause) Error() string { return Name(c.Signal) + " received" }

// Is makes a Cause a context.Canceled, as signal.NotifyContext's is.
func (c *Cause) Is(target error) bool { return target == context.Canceled }

// Of returns the signal that ended ctx, if one did.
func Of(ctx context.Context) (*Cause, bool) {
	var c *Cause
	if errors.As(context.Cause(ctx), &c) {
		return c, true
	}
	return nil, false
}

// Signal is the signal that ended ctx; if ctx ended otherwise (a test's
// cancel, a deadline), SIGTERM, what a supervisor sends; 0 if ctx has not
// ended.
func Signal(ctx context.Context) syscall.Signal {
	if ctx.Err() == nil {
		return 0
	}
	if c, ok := Of(ctx); ok {
		return c.Signal
	}
	return syscall.SIGTERM
}

// Name is a signal's name as an operator types it (SIGTERM).
func Name(s syscall.Signal) string {
	if n := unix.SignalName(s); n != "" {
		return n
	}
	return s.String()
}

// Cancel ends ctx's run as the signal s would (tests, and whatever
// stands in for the command's catcher).
func Cancel(cancel context.CancelCauseFunc, s syscall.Signal) {
	cancel(&Cause{Signal: s})
}
