// Package live holds the freeze command's tests that run the built
// binary against real processes: chains in pids cgroups, the gate, the
// guard, freeze run's leftovers, hostile input. The command's words and
// exit codes (testdata/*.txtar) stay in cmd/freeze, whose tests start no
// chain. Apart, go test runs the two packages at once.
package live

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"freeze/internal/containtest"
	"freeze/internal/priority"
)

// TestMain runs the tests under the containment harness (subreaper,
// reaping, the sentinel), at ordinary priority: a test binary that
// links package early is lifted like freeze, and a child such as 'go
// build' would inherit SCHED_RR and RLIMIT_RTTIME and die of SIGXCPU
// after 2 s of CPU.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == "freeze-test-listen" {
		listenAndSleep()
	}
	priority.Lower()
	os.Exit(containtest.Main(m))
}

// listenAndSleep is a leftover server for the tests of freeze run: it
// listens on a loopback port, writes the port to the file it is given
// and sleeps. Tests run a copy of the test binary under this name.
func listenAndSleep() {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.Exit(1)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	if err := os.WriteFile(os.Args[1], []byte(port), 0o644); err != nil {
		os.Exit(1)
	}
	time.Sleep(60 * time.Second)
	os.Exit(0)
}
