// Package incident runs freeze's stop order against one chain: match by
// exact executable, freeze growth until the set is fixed, kill rounds to
// zero, and record every step in the timeline. It is the one entry point
// the command calls; it prints nothing (the timeline's observer does).
package incident

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"freeze/internal/freeze"
	"freeze/internal/match"
	"freeze/internal/proc"
	"freeze/internal/rounds"
	"freeze/internal/timeline"
)

// Stages of the stop order, as the runbook numbers them.
const (
	StageMatch  = 1
	StageFreeze = 2
	StageKill   = 3
	StageRecord = 4
)

// Config is one run.
type Config struct {
	FS        proc.FS
	Spec      match.Spec
	Method    freeze.Method
	Hold      bool
	DryRun    bool
	Rounds    int
	Timeout   time.Duration
	RoundWait time.Duration
	Command   []string
	Priority  []string // what the caller did to its own priority, for the record
}

// Outcome is how the run ended.
type Outcome struct {
	Matched        int
	NothingMatched bool
	Zero           bool
	Held           bool
	Method         freeze.Method
	Group          string
	Survivors      []rounds.Survivor
	Zombies        []match.Zombie
	Support        []freeze.Support // filled by a dry run
}

// GroupName names the group for a set of targets: the same targets give
// the same name, which is how a run finds the group a --hold run left.
func GroupName(spec match.Spec) string {
	var keys []string
	base := "under"
	for _, t := range spec.Targets {
		keys = append(keys, fmt.Sprintf("%d:%d", t.File.Dev, t.File.Ino))
		base = t.Basename
	}
	keys = append(keys, spec.Under...)
	keys = append(keys, spec.Args...)
	sort.Strings(keys)
	sum := sha256.Sum256([]byte(strings.Join(keys, "\x00")))
	clean := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, base)
	if len(clean) > 32 {
		clean = clean[:32]
	}
	return "freeze-" + clean + "-" + hex.EncodeToString(sum[:4])
}

// Run applies the stop order. It returns the outcome and, when the chain
// was not brought to zero, an error saying why.
func Run(c Config, rec *timeline.Recorder) (Outcome, error) {
	var out Outcome
	deadline := time.Now().Add(c.Timeout)
	var targets []map[string]any
	for _, t := range c.Spec.Targets {
		targets = append(targets, map[string]any{"path": t.Path, "dev": t.File.Dev, "ino": t.File.Ino, "mode": fmt.Sprintf("%#o", t.Mode.Perm())})
	}
	rec.Record(0, "start", "freeze run started", timeline.F{
		"command": c.Command, "pid": os.Getpid(), "uid": os.Getuid(), "targets": targets,
		"under": c.Spec.Under, "args": c.Spec.Args, "descendants": !c.Spec.NoDescendants,
		"method_asked": string(c.Method), "hold": c.Hold, "dry_run": c.DryRun,
		"rounds_max": c.Rounds, "timeout_s": c.Timeout.Seconds(), "priority": c.Priority,
	})

	scanner := match.NewScanner(c.FS, c.Spec)
	t0 := time.Now()
	res, err := scanner.Scan()
	if err != nil {
		return out, err
	}
	out.Matched = res.Live()
	rec.Record(StageMatch, "match", fmt.Sprintf("%d live processes match (%d by path, %d replaced binary, %d under, %d descendants) of %d scanned in %v",
		res.Live(), res.Counts[match.ByPath], res.Counts[match.ByDeleted], res.Counts[match.ByUnder], res.Counts[match.ByDescendant], res.Scanned, time.Since(t0).Round(time.Millisecond)),
		timeline.F{"matched": res.Live(), "by_path": res.Counts[match.ByPath], "by_deleted": res.Counts[match.ByDeleted],
			"by_under": res.Counts[match.ByUnder], "descendants": res.Counts[match.ByDescendant],
			"zombies": len(res.Zombies), "scanned": res.Scanned, "scan_ms": ms(time.Since(t0))})

	if c.DryRun {
		out.Support = freeze.Probe()
		for _, s := range out.Support {
			rec.Record(StageFreeze, "dry-run-method", fmt.Sprintf("%s: %s (%s)", s.Method, yesNo(s.OK), s.Why), timeline.F{"method": string(s.Method), "ok": s.OK, "why": s.Why})
		}
		out.Zombies = res.Zombies
		rec.Record(StageRecord, "dry-run", "dry run: nothing was changed", nil)
		return out, nil
	}

	name := GroupName(c.Spec)
	if res.Live() == 0 && !heldGroupExists(name) {
		out.NothingMatched = true
		out.Zero = true
		out.Zombies = res.Zombies
		rec.Record(StageRecord, "nothing-matched", "no live process matches: nothing to stop", timeline.F{"zombies": len(res.Zombies)})
		return out, nil
	}

	g, why, err := freeze.Open(c.FS, c.Method, name)
	if err != nil {
		rec.Record(StageFreeze, "method-failed", err.Error(), nil)
		return out, err
	}
	out.Method, out.Group = g.Method(), g.Where()
	rec.Record(StageFreeze, "method", fmt.Sprintf("method %s at %s: %s", g.Method(), g.Where(), why),
		timeline.F{"method": string(g.Method()), "why": why, "group": g.Where(), "reused": g.Reused(), "notes": g.Notes()})
	if g.Reused() {
		rec.Record(StageFreeze, "reuse", "reusing the group an earlier --hold run left: "+g.Where(), timeline.F{"group": g.Where()})
	}

	res, err = freeze.Grow(c.FS, scanner, g, deadline, func(r freeze.Round) {
		rec.Record(StageFreeze, "freeze-round", fmt.Sprintf("round %d: %d matched, %d outside, %d moved in, %d gone, frozen=%v (%v)",
			r.N, r.Matched, r.Outside, r.Moved, r.Gone, r.Frozen, r.Took.Round(time.Millisecond)),
			timeline.F{"round": r.N, "matched": r.Matched, "outside": r.Outside, "moved": r.Moved, "gone": r.Gone,
				"reused_pids": r.Reused, "frozen": r.Frozen, "took_ms": ms(r.Took)})
	})
	if err != nil && !errors.Is(err, freeze.ErrDeadline) {
		return out, err
	}
	if err == nil {
		rec.Record(StageFreeze, "fixed", fmt.Sprintf("fixed set: %d processes, none outside %s", res.Live(), g.Where()), timeline.F{"set": res.Live()})
	} else {
		rec.Record(StageFreeze, "not-fixed", err.Error()+"; killing what is held anyway", nil)
	}

	if c.Hold {
		out.Held = true
		out.Matched = res.Live()
		rec.Record(StageFreeze, "hold", fmt.Sprintf("holding %d processes frozen in %s (--hold)", res.Live(), g.Where()), timeline.F{"set": res.Live(), "group": g.Where()})
		return out, nil
	}

	ko, err := rounds.Run(rounds.Config{FS: c.FS, Scanner: scanner, Group: g, Rounds: c.Rounds, Deadline: deadline, Wait: c.RoundWait}, func(r rounds.Round) {
		rec.Record(StageKill, "kill-round", fmt.Sprintf("round %d: %d alive (%d in the group), %d signalled by pidfd (%v)", r.N, r.Live, r.Inside, r.Signaled, r.Took.Round(time.Millisecond)),
			timeline.F{"round": r.N, "live": r.Live, "inside": r.Inside, "signaled": r.Signaled, "group_err": r.GroupErr, "took_ms": ms(r.Took)})
	})
	out.Zero, out.Survivors, out.Zombies = ko.Zero, ko.Survivors, ko.Zombies
	if err != nil {
		var pids []int
		for _, s := range ko.Survivors {
			pids = append(pids, s.PID)
		}
		rec.Record(StageKill, "survivors", err.Error(), timeline.F{"survivors": pids})
		return out, err
	}
	if rmErr := removeGroup(g); rmErr != nil {
		rec.Record(StageRecord, "group-left", rmErr.Error(), timeline.F{"group": g.Where()})
	} else if g.Method() != freeze.Sigstop {
		rec.Record(StageRecord, "group-removed", "removed "+g.Where(), timeline.F{"group": g.Where()})
	}
	rec.Record(StageRecord, "zero", "zero remain: confirmed by two empty scans", timeline.F{"zombies": len(ko.Zombies)})
	return out, nil
}

// removeGroupWait bounds the wait for an emptied group to disappear.
const removeGroupWait = 5 * time.Second

func removeGroup(g freeze.Group) error {
	end := time.Now().Add(removeGroupWait)
	for {
		err := g.Remove()
		if err == nil {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("could not remove %s: %v; remove it with: rmdir %s", g.Where(), err, g.Where())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func heldGroupExists(name string) bool {
	if mount, err := freeze.Cgroup2Mount(); err == nil {
		if _, err := os.Stat(mount + "/" + name); err == nil {
			return true
		}
	}
	_, err := os.Stat("/sys/fs/cgroup/freezer/" + name)
	return err == nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
