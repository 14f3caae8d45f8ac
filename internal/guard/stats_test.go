package guard

import (
	"os"
	"path/filepath"
	"testing"
)

// ReadStats sums the requests of a guard's log by outcome, keeps the
// last one's time to zero and adds the gate's counts; other events and
// garbage lines are skipped; a missing log is no guard.
func TestReadStats(t *testing.T) {
	dir := t.TempDir()
	log := `{"event":"start","time":"2026-12-01T10:00:00Z"}
{"event":"request","time":"2026-12-01T10:01:00Z","outcome":"zero","zero_ms":120.5,"gate_forks":7,"gate_execs":1}
not json
{"event":"refused","time":"2026-12-01T10:02:00Z","exit":3}
{"event":"request","time":"2026-12-01T10:03:00Z","outcome":"nothing-matched","zero_ms":0}
{"event":"request","time":"2026-12-01T10:04:00Z","outcome":"zero","zero_ms":80,"gate_forks":3}
`
	if err := os.WriteFile(filepath.Join(dir, LogName), []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := ReadStats(dir)
	if err != nil {
		t.Fatal(err)
	}
	if s.Armed || s.Runs["zero"] != 2 || s.Runs["nothing-matched"] != 1 || len(s.Runs) != 2 ||
		s.LastZeroMS != 80 || s.GateForks != 10 || s.GateExecs != 1 || s.LastRun.Minute() != 4 {
		t.Fatalf("stats %+v", s)
	}
	if s, err := ReadStats(filepath.Join(dir, "none")); err != nil || s.Armed || len(s.Runs) != 0 {
		t.Fatalf("no log: %+v %v", s, err)
	}
}
