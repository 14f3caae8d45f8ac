package guard

import (
	"path/filepath"
	"testing"

	"freeze/internal/autopilot"
	"freeze/internal/gate"
)

// A growing chain --auto will not act on raises an alert: a warning line
// and log event (once a minute per file), and the declined counter the
// metrics carry. A pool or a small set raises none.
func TestAutoDeclineRaisesAnAlert(t *testing.T) {
	g := arm(t).g
	a := &autopilot.Growth{N: 10}
	chain := autopilot.Verdict{Path: "/usr/sbin/cron", Live: 50, Depth: autopilot.Depth, Why: "/usr/sbin/cron is the system's cron"}
	g.decline(a, autopilot.Suspect{Key: gate.FileKey{Ino: 1}}, chain)
	g.decline(a, autopilot.Suspect{Key: gate.FileKey{Ino: 1}}, chain) // within the minute: once
	g.decline(a, autopilot.Suspect{Key: gate.FileKey{Ino: 2}}, autopilot.Verdict{Path: "/srv/pool", Live: 50, Depth: 2})
	if n := g.Stats().AutoDeclined; n != 1 {
		t.Fatalf("declined %d, want 1", n)
	}
	if m := g.Stats().Metrics(); m.AutoDeclined != 1 {
		t.Fatalf("the metrics carry %d declined", m.AutoDeclined)
	}
	e := waitLogged(t, filepath.Join(g.c.RunDir), func(e logged) bool { return e.Event == "auto-declined" }).auto()
	if e.Level != "warning" || e.Path != "/usr/sbin/cron" {
		t.Errorf("the log's alert: %v", e)
	}
}
