package guard

import (
	"fmt"
	"time"

	"freeze/internal/autopilot"
	"freeze/internal/gate"
	"freeze/internal/show"
)

// watch looks every AutoEvery until stop, and queues a request for each
// executable the rule says to act on.
func (g *Guard) watch(a *autopilot.Growth, stop <-chan struct{}) {
	every(autopilot.Every, stop, func() {
		for _, s := range a.Look() {
			v := a.Judge(s)
			if !v.Act && v.Live <= a.N {
				continue // busy but small: not worth a log line every look
			}
			g.record("auto-look", autoLine(v))
			if !v.Act {
				g.decline(a, s, v)
				continue
			}
			if ok, _ := g.brake.armed(); g.c.Monitor || !ok {
				// Said once a minute a chain, not at every look.
				if !a.Due(s.Key) {
					continue
				}
			}
			what := fmt.Sprintf("%s in %s: %d alive, %d deep, %d fork attempts in %v: %s", show.Term(v.Path), show.Term(v.Place.String()), v.Live, v.Depth, v.Attempts, autopilot.Every, v.Why)
			// One at a time: the next look comes after this run.
			if !g.autoHold("growth", s.Key, v, nil, what, stop) {
				return
			}
		}
	})
}

// decline raises the alert for a chain --auto judged (more than N alive
// and AutoDepth deep) and will not act on: a warning line, a log event
// at level warning, and freeze_guard_auto_declined_total. Before, only
// an act:false line in the log said so.
func (g *Guard) decline(a *autopilot.Growth, s autopilot.Suspect, v autopilot.Verdict) {
	if v.Live <= a.N || v.Depth < autopilot.Depth || !a.Due(s.Key) {
		return // not a chain (a pool, or small), or said within the minute
	}
	g.stats.declined()
	g.c.Say(fmt.Sprintf("warning: auto: a growing chain it will not act on: %s in %s: %d alive, %d deep: %s", v.Path, show.Term(v.Place.String()), v.Live, v.Depth, v.Why))
	l := autoLine(v)
	l.Level, l.Attempts, l.LeftOut = "warning", 0, 0
	g.record("auto-declined", l)
}

// autoLine is the log's line for a verdict.
func autoLine(v autopilot.Verdict) *AutoLine {
	return &AutoLine{Path: v.Path, Live: v.Live, Depth: v.Depth, Attempts: v.Attempts, Act: v.Act, Why: v.Why,
		UID: v.UID, LeftOut: v.LeftOut, Container: v.Place.ID, Pod: v.Place.Pod, Runtime: v.Place.Runtime}
}

// ExplainAuto says why --auto could not start: it needs the gate's fork
// counter.
func ExplainAuto(err error) string { return autopilot.Explain(err) }

// watchCap reads the counts every CapEvery until stop, and holds (or in
// monitor mode, says it would hold) the chain of each group whose cap
// refused a fork.
func (g *Guard) watchCap(c *autopilot.Cap, stop <-chan struct{}) {
	monitor := g.c.Monitor
	every(autopilot.CapEvery, stop, func() {
		for _, h := range c.Look() {
			v := c.JudgeGroup(h)
			// A group that keeps refusing (a chain left alone, held
			// already, or met while disarmed) is logged once a minute,
			// not at every look.
			now := time.Now()
			armed, _ := g.brake.armed()
			if !v.Act || !armed && !monitor {
				if !c.LogDue(h.Group, now) {
					continue
				}
			}
			line := &CapLine{Group: h.Group, PidsMax: h.Max, Owner: autopilot.Owner(h.Group), Before: h.Before, After: h.After, Read: h.Read,
				Path: v.Path, Live: v.Live, Depth: v.Depth, Act: v.Act, Monitor: monitor && v.Act, Why: v.Why, UID: v.UID,
				Container: v.Place.ID, Pod: v.Place.Pod, Runtime: v.Place.Runtime, Request: v.Words}
			g.record("auto-cap", line)
			if !v.Act {
				continue
			}
			what := fmt.Sprintf("the cap of %s (pids.max %s, %s) refused %d fork(s): %s in %s: %d alive, %d deep: %s",
				show.Term(h.Group), show.Term(h.Max), show.Term(autopilot.Owner(h.Group)), h.After-h.Before, show.Term(v.Path), show.Term(v.Place.String()), v.Live, v.Depth, v.Why)
			key := gate.KeyOf(v.File)
			if armed || monitor {
				c.Held(key, now)
			}
			limit := &NoticeLimit{Group: h.Group, PidsMax: h.Max, Owner: autopilot.Owner(h.Group), Before: h.Before, After: h.After}
			if !g.autoHold("cap", key, v, limit, what, stop) {
				return
			}
		}
	})
}
