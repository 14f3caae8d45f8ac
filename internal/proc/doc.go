// Package proc reads the few /proc files that freeze needs on its hot path
// (stat and the exe link) and pins processes by identity.
//
// A process is identified by (pid, start time), never by pid alone: with
// pid_max at 32768, a churning chain reuses pids within seconds. A Handle
// is a pidfd (pidfd_open(2)) opened after a scan and checked against the
// start time the scan saw, so a signal sent through it reaches that
// process or none.
//
// The hot path never reads /proc/PID/cmdline or anything else that takes
// the target's memory-map lock: under a fork bomb those reads stall. The
// one reader of cmdline (Args, in cold.go) is for processes that already
// matched by their exe link (--arg), never for a whole scan.
package proc
