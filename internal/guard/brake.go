package guard

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"freeze/internal/autopilot"
	"freeze/internal/gate"
	"freeze/internal/show"
)

// The disarmer: an automatic responder that starts acting often is more
// likely misjudging the machine's work than meeting that many runaway
// chains (earlyoom declined fork-bomb detection for that risk, its issue
// #109). After BrakeHolds holds of distinct executables within
// BrakeWindow, the guard stops acting automatically: it says so (stderr,
// the log's auto-disarmed line, freeze_guard_auto_disarmed, the
// heartbeat's second line), goes on answering requests, and acts again
// once an operator writes auto-rearm into its FIFO, or restarts it.
//
// Why 3 in 10 minutes: one runaway chain is an incident; a second one of
// another file soon after happens (a test suite's two binaries); a third
// distinct one in ten minutes is a pattern of the machine's own work
// that the rule mistakes for chains, and a human should look before a
// fourth workload is frozen.
const (
	BrakeHolds  = 3
	BrakeWindow = 10 * time.Minute
)

// RearmWord is the FIFO request that re-arms a disarmed guard.
const RearmWord = "auto-rearm"

type brake struct {
	mu       sync.Mutex
	holds    []brakeHold
	disarmed string // why, "" while armed
}

type brakeHold struct {
	key  gate.FileKey
	path string
	at   time.Time
}

// armed reports whether the automatic triggers may act, and if not, why.
func (b *brake) armed() (bool, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.disarmed == "", b.disarmed
}

// held counts an automatic hold of key; it returns why it disarmed, if
// this hold tripped it.
func (b *brake) held(key gate.FileKey, path string, now time.Time) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	kept := b.holds[:0]
	for _, h := range b.holds {
		if now.Sub(h.at) < BrakeWindow && h.key != key {
			kept = append(kept, h)
		}
	}
	b.holds = append(kept, brakeHold{key, path, now})
	if len(b.holds) < BrakeHolds || b.disarmed != "" {
		return ""
	}
	var paths []string
	for _, h := range b.holds {
		paths = append(paths, h.path)
	}
	b.disarmed = fmt.Sprintf("%d holds of distinct executables within %v (%v): the automatic triggers stop acting until an operator writes %s into the guard's FIFO, or restarts it", len(b.holds), BrakeWindow, paths, RearmWord)
	return b.disarmed
}

// rearm arms the triggers again, with no holds counted.
func (b *brake) rearm() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	was := b.disarmed != ""
	b.disarmed, b.holds = "", nil
	return was
}

// answer is what a request came to, for whoever queued it (an automatic
// hold's webhook document).
type answer struct {
	outcome, timeline string
	exit              int
}

// autoHold makes the hold an automatic trigger (growth or cap) decided
// on, within the brake: in monitor mode it says, logs and counts the
// command instead; disarmed, it says why not. what is the trigger's own
// account of the chain. It returns false if the guard stopped meanwhile.
func (g *Guard) autoHold(trigger string, key gate.FileKey, v autopilot.Verdict, limit *NoticeLimit, what string, stop <-chan struct{}) bool {
	n := Notice{Trigger: trigger, Path: v.Path, Live: v.Live, Container: v.Place.ID, Pod: v.Place.Pod, Runtime: v.Place.Runtime,
		Limit: limit, Command: append([]string{"freeze"}, v.Words...), Why: v.Why}
	name := map[string]string{"growth": "auto", "cap": "auto-on-cap"}[trigger]
	if g.c.Monitor {
		g.stats.wouldHold(trigger)
		g.c.Say(fmt.Sprintf("%s (monitor): would run freeze %s: %s", name, show.Term(strings.Join(v.Words, " ")), what))
		n.Event = "would-hold"
		g.hook.send(n)
		return true
	}
	if ok, why := g.brake.armed(); !ok {
		g.c.Say(fmt.Sprintf("warning: %s: disarmed, not holding %s: %s", name, show.Term(v.Path), why))
		return true
	}
	g.c.Say(name + ": " + what)
	judged := v.File
	ans := &answer{exit: -1}
	r := request{source: "auto", uid: -1, words: v.Words, judged: &judged, line: fmt.Sprint(v.Words), done: make(chan struct{}), answer: ans}
	g.enqueue(r)
	select {
	case <-r.done:
	case <-stop:
		return false
	}
	n.Event, n.Outcome, n.Timeline = "hold", ans.outcome, ans.timeline
	n.Exit = &ans.exit
	g.hook.send(n)
	if why := g.brake.held(key, v.Path, time.Now()); why != "" {
		g.disarm(why)
	}
	return true
}

// disarm says, logs and sends that the automatic triggers stopped.
func (g *Guard) disarm(why string) {
	g.beat() // first: whoever reads the log's line finds the heartbeat saying so
	g.c.Say("warning: auto: disarmed: " + why)
	g.record("auto-disarmed", &DisarmLine{Why: why})
	g.hook.send(Notice{Event: "disarmed", Why: why})
}

// disarmedNow reports whether the disarmer stopped the triggers.
func (g *Guard) disarmedNow() bool {
	ok, _ := g.brake.armed()
	return !ok
}
