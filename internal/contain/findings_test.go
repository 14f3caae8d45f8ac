package contain

import (
	"bytes"
	"encoding/xml"
	"strings"
	"testing"
	"unicode/utf8"
)

// #52: an annotation's title was the whole ~400-byte chain, the message
// repeated it, a JUnit case's classname was always freeze.run and the
// suite's name the whole command. A title is at most 100 characters, the
// message says who started the leftover, and the JUnit case's classname
// is its starter (the Go test package), so it merges with the runner's.
func TestFindingsAreShortAndNamedByTheirStarter(t *testing.T) {
	starter := "freeze/internal/some/package/with/a/long/path/" + strings.Repeat("x", 200)
	rep := Report{Leftovers: []Leftover{{PID: 42, Comm: "sleep", Args: []string{"/tmp/x/sleep", "60"}, StartedBy: starter}}}
	f := rep.found()
	if len(f) != 1 {
		t.Fatalf("%d findings, want 1", len(f))
	}
	if n := utf8.RuneCountInString(f[0].title); n > 100 || !strings.HasPrefix(f[0].title, "left behind: pid 42 sleep") {
		t.Errorf("title %q (%d characters), want 'left behind: pid 42 sleep', at most 100", f[0].title, n)
	}
	if !strings.HasPrefix(f[0].msg, "started by freeze/internal/some/package") {
		t.Errorf("message %q does not say who started it", f[0].msg)
	}
	var s junitSuite
	cmd := append([]string{"go", "test"}, strings.Fields(strings.Repeat("./pkg/a/b/c ", 13))...)
	if err := xml.NewDecoder(bytes.NewReader(rep.JUnit(cmd))).Decode(&s); err != nil {
		t.Fatal(err)
	}
	if utf8.RuneCountInString(s.Name) > 100 || !strings.HasPrefix(s.Name, "freeze run -- go test") {
		t.Errorf("suite name %q, want the command's first words, at most 100 characters", s.Name)
	}
	if len(s.Cases) != 1 || !strings.HasPrefix(s.Cases[0].Classname, "freeze/internal/some/package") || utf8.RuneCountInString(s.Cases[0].Classname) > 100 {
		t.Errorf("cases %+v, want one whose classname is its starter, at most 100 characters", s.Cases)
	}
}

// PYTEST_CURRENT_TEST as pytest sets it, split as pytest's own JUnit
// names the test.
func TestPytestID(t *testing.T) {
	for in, want := range map[string][3]string{
		"test_daemon.py::test_starts_a_daemon (call)": {"test_starts_a_daemon", "test_daemon", "test_daemon.py"},
		"sub/test_x.py::TestC::test_m (setup)":        {"test_m", "sub.test_x.TestC", "sub/test_x.py"},
		"tests/test_p.py::test_param[a b] (call)":     {"test_param[a b]", "tests.test_p", "tests/test_p.py"},
	} {
		test, class, file := pytestID(in)
		if got := [3]string{test, class, file}; got != want {
			t.Errorf("pytestID(%q) = %q, want %q", in, got, want)
		}
	}
}
