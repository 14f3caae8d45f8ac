// Package containtest is the containment harness for every test of freeze
// that starts processes. Those tests start runaway chains on purpose, so
// the harness, not the code under test, guarantees that nothing escapes:
//
//   - Owned: a chain's leader starts in its own process group and waits on
//     a gate until it sits in the chain's capped cgroup; on timeout, on
//     failure and at cleanup the harness kills the process group, then
//     every member of the cgroup (which catches processes that called
//     setsid or setpgid), then anything still running from the test's own
//     temporary directory, and waits until none is left.
//   - Capped from outside: every chain runs in its own pids cgroup with
//     pids.max set from a literal in the test, nested under the cgroup the
//     test process is in, so a ceiling around the whole suite still holds.
//     A non-root user gets RLIMIT_NPROC instead. Where neither can be put
//     in place the test is skipped, never run uncapped.
//   - Reaped: Main makes the test process a child subreaper
//     (PR_SET_CHILD_SUBREAPER, prctl(2)) and reaps the chain processes it
//     inherits, because PID 1 on these machines does not reap orphans.
//   - Narrow: the fixture is a copy in the test's temporary directory; the
//     harness only ever signals processes of its own chains.
//
// The harness must never read a bound from the code under test: every cap
// is a literal at the call site. It must not import any freeze package.
package containtest
