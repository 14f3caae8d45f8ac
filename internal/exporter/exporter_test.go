package exporter

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"freeze/internal/census"
	"freeze/internal/metrics"
)

// The exporter writes the census and the guard's own metrics into the
// textfile, armed or not as told; logs one census line a minute; and
// says a failing file once, and once again when it is written again.
func TestExporterWritesTheFileAndSaysItsFailuresOnce(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "freeze.prom")
	var said []string
	logged := 0
	e := &Exporter{File: file, Say: func(s string) { said = append(said, s) },
		Guard: func() *metrics.Guard { return &metrics.Guard{Runs: map[string]int{"zero": 3}} },
		Log:   func(*census.Report) { logged++ }}
	if err := e.Write(true); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"freeze_guard_armed 1", "freeze_processes "} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the file lacks %q:\n%s", want, b)
		}
	}
	if err := e.Write(false); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(file); !strings.Contains(string(b), "freeze_guard_armed 0") {
		t.Errorf("disarmed, the file says:\n%s", b)
	}
	if logged != 1 {
		t.Errorf("%d census lines logged in one minute, want 1", logged)
	}
	// Its directory gone: said once for two failed writes, then once
	// when it is written again.
	e.File = filepath.Join(dir, "gone", "freeze.prom")
	if e.Write(true) == nil || e.Write(true) == nil {
		t.Fatal("a write into a missing directory did not fail")
	}
	e.File = file
	if err := e.Write(true); err != nil {
		t.Fatal(err)
	}
	if len(said) != 2 || !strings.Contains(said[0], "warning: metrics file") || !strings.Contains(said[1], "is written again") {
		t.Errorf("said %q; want one warning and one recovery", said)
	}
}
