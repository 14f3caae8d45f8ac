package contain

import (
	"strings"
	"testing"
)

// A process gone before freeze read what its exec ran is named by the
// name its exec gave it (the comm event carries it), and its fork's
// argv is said to be its parent's; a Go test binary read in time is
// named by its package.
func TestStartedByNamesWhatItCould(t *testing.T) {
	unread := []ancestor{
		{PID: 12, Parent: 11, Exe: "/usr/local/go/bin/go", Args: []string{"go", "test", "."}, Comm: "leaky.test", Unread: true},
		{PID: 11, Parent: 10, Exe: "/usr/local/go/bin/go", Args: []string{"go", "test", "."}},
	}
	got := startedBy(unread)
	if !strings.Contains(got, "pid 12 leaky.test (exited before freeze could read it; forked from: go test .)") || !strings.Contains(got, "<- pid 11 go test .") {
		t.Errorf("startedBy = %q", got)
	}
	read := []ancestor{{PID: 12, Parent: 11, Exe: "/tmp/go-build123/b001/leaky.test", Args: []string{"/tmp/go-build123/b001/leaky.test", "-test.run=TestX"}, Dir: "/src/leaky"}}
	if got := startedBy(read); got != "the Go test binary leaky.test of package /src/leaky (-test.run=TestX)" {
		t.Errorf("startedBy = %q", got)
	}
}
