package interrupt

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"
)

// A request's context is derived from the command's (the guard's
// requests, a run's deadline): the signal that ended the command's is
// the one the request reads.
func TestTheSignalReachesADerivedContext(t *testing.T) {
	parent, cancel := context.WithCancelCause(context.Background())
	child, stop := context.WithTimeout(parent, time.Hour)
	defer stop()
	if s := Signal(child); s != 0 {
		t.Fatalf("a live context names signal %v", s)
	}
	Cancel(cancel, syscall.SIGHUP)
	if s := Signal(child); s != syscall.SIGHUP {
		t.Fatalf("the derived context names %v, want SIGHUP", s)
	}
	if !errors.Is(context.Cause(child), context.Canceled) {
		t.Errorf("the cause %v is not a context.Canceled", context.Cause(child))
	}
}

// A context ended otherwise (a test's plain cancel) reads as SIGTERM, what
// a supervisor sends, so freeze run passes on a signal a command knows.
func TestAContextEndedWithoutASignalReadsAsSIGTERM(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, ok := Of(ctx); ok {
		t.Fatal("a plain cancel reads as a signal's cause")
	}
	if s := Signal(ctx); s != syscall.SIGTERM {
		t.Fatalf("Signal = %v, want SIGTERM", s)
	}
	if n := Name(syscall.SIGINT); n != "SIGINT" {
		t.Errorf("Name(SIGINT) = %q", n)
	}
}
