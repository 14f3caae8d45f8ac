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
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

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
	// LiftedAt is when the process lifted itself at start (package
	// priority/early), zero if it did not: recorded so that start-up can
	// be split into the part at ordinary priority and the rest.
	LiftedAt time.Time
	// RevokeExec removes the execute bits of the target files (and of
	// files under --under that matches run) before freezing, guarded by
	// freeze.CheckRevoke against Disposable roots; Force allows files
	// with other hard links.
	RevokeExec bool
	Disposable []string
	Force      bool
	// Interrupt carries SIGINT and SIGTERM from the command. The run looks
	// at it between steps and between rounds, never inside one, so an
	// interrupt cannot leave a set half-moved: it ends the run with what
	// is frozen still frozen, and records where it stopped.
	Interrupt <-chan os.Signal
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
	Revoked        []freeze.Revocation
	WouldRevoke    []freeze.Revocation // a dry run's
	Refused        []error             // guard refusals (a dry run reports them)
	// Interrupted is the signal that ended the run early, and
	// InterruptStage the step it ended in (0: nothing had changed).
	Interrupted    os.Signal
	InterruptStage int
	// Hidden are processes named like a target that could not be
	// inspected (see HiddenError).
	Hidden []match.Hidden
}

// HiddenError refuses a run that cannot see all of the chain: live
// processes named like a target that this user may not inspect (another
// user's, without root). Stopping the part one can see does not stop a
// chain, and zero could not be confirmed. --force acts on the visible part.
type HiddenError struct{ Hidden []match.Hidden }

func (e *HiddenError) Error() string {
	return fmt.Sprintf("%d processes named like the target could not be inspected (permission denied): another user's, seen without root", len(e.Hidden))
}

// ErrInterrupted means SIGINT or SIGTERM ended the run between two steps;
// the Outcome says where.
var ErrInterrupted = errors.New("interrupted")

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
	startMsg := "freeze run started"
	if len(c.Priority) > 0 {
		startMsg += " at " + strings.Join(c.Priority, ", ")
	}
	startFields := timeline.F{
		"command": c.Command, "pid": os.Getpid(), "uid": os.Getuid(), "targets": targets,
		"under": c.Spec.Under, "args": c.Spec.Args, "descendants": !c.Spec.NoDescendants,
		"method_asked": string(c.Method), "hold": c.Hold, "dry_run": c.DryRun,
		"rounds_max": c.Rounds, "timeout_s": c.Timeout.Seconds(), "priority": c.Priority,
	}
	if !c.LiftedAt.IsZero() {
		startFields["lifted_at"] = c.LiftedAt.UTC().Format(time.RFC3339Nano)
	}
	rec.Record(0, "start", startMsg, startFields)

	interrupted := func() bool {
		if out.Interrupted != nil {
			return true
		}
		select {
		case sig := <-c.Interrupt:
			out.Interrupted = sig
			return true
		default:
			return false
		}
	}
	// stopNothing ends a run interrupted before anything was frozen.
	stopNothing := func(stage int) (Outcome, error) {
		out.InterruptStage = stage
		msg := fmt.Sprintf("interrupted by %s: nothing was frozen", SignalName(out.Interrupted))
		if len(out.Revoked) > 0 {
			msg += fmt.Sprintf("; exec stays revoked on %d file(s)", len(out.Revoked))
		}
		rec.Record(stage, "interrupted", msg, timeline.F{"signal": SignalName(out.Interrupted), "frozen": 0, "revoked": len(out.Revoked)})
		return out, fmt.Errorf("%w by %s", ErrInterrupted, SignalName(out.Interrupted))
	}

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

	out.Hidden = res.Hidden
	if len(res.Hidden) > 0 {
		var pids []int
		for _, h := range res.Hidden {
			pids = append(pids, h.PID)
		}
		rec.Record(StageMatch, "hidden", fmt.Sprintf("%d processes named %q could not be inspected: reading their exe link was refused (another user's processes, seen without root)", len(res.Hidden), res.Hidden[0].Comm),
			timeline.F{"pids": pids, "force": c.Force})
		if !c.Force && !c.DryRun {
			return out, &HiddenError{Hidden: res.Hidden}
		}
	}

	if !c.DryRun && interrupted() {
		return stopNothing(StageMatch)
	}

	if c.RevokeExec {
		revs, refused := checkRevocations(c, res)
		for _, err := range refused {
			rec.Record(StageFreeze, "revoke-refused", err.Error(), timeline.F{"error": err.Error()})
		}
		out.Refused = refused
		if c.DryRun {
			out.WouldRevoke = revs
			for _, r := range revs {
				rec.Record(StageFreeze, "would-revoke", fmt.Sprintf("would revoke exec on %s (mode %#o -> %#o)", r.Path, r.Mode, r.NewMode), revFields(r))
			}
		} else {
			if len(refused) > 0 {
				return out, fmt.Errorf("revoke exec: %w", refused[0])
			}
			for _, r := range revs {
				r, err := freeze.Revoke(r)
				if err != nil {
					rec.Record(StageFreeze, "revoke-failed", err.Error(), revFields(r))
					continue
				}
				out.Revoked = append(out.Revoked, r)
				rec.Record(StageFreeze, "revoke", fmt.Sprintf("revoked exec on %s (mode %#o -> %#o, inode %d, owner %d:%d): no new hop can start", r.Path, r.Mode, r.NewMode, r.Ino, r.UID, r.GID), revFields(r))
			}
		}
	}

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

	if interrupted() {
		return stopNothing(StageFreeze)
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

	if g.Method() == freeze.None {
		rec.Record(StageFreeze, "no-freezer", "no freezer (--method none): kill rounds straight after revoking exec, as in the original incident; this does not stop a chain that only forks", nil)
		err = nil
	} else {
		var last freeze.Round
		res, err = freeze.Grow(c.FS, scanner, g, deadline, interrupted, func(r freeze.Round) {
			last = r
			rec.Record(StageFreeze, "freeze-round", fmt.Sprintf("round %d: %d matched, %d outside, %d moved in, %d gone, frozen=%v (%v)",
				r.N, r.Matched, r.Outside, r.Moved, r.Gone, r.Frozen, r.Took.Round(time.Millisecond)),
				timeline.F{"round": r.N, "matched": r.Matched, "outside": r.Outside, "moved": r.Moved, "gone": r.Gone,
					"reused_pids": r.Reused, "frozen": r.Frozen, "took_ms": ms(r.Took)})
		})
		if errors.Is(err, freeze.ErrStopped) {
			out.InterruptStage = StageFreeze
			out.Matched = res.Live()
			rec.Record(StageFreeze, "interrupted", fmt.Sprintf("interrupted by %s after freeze round %d: %s holds what that round moved in (%d moved, %d matched); the set was not yet fixed, so a process started before its parent was stopped may be outside",
				SignalName(out.Interrupted), last.N, g.Where(), last.Moved, last.Matched),
				timeline.F{"signal": SignalName(out.Interrupted), "round": last.N, "moved": last.Moved, "matched": last.Matched, "group": g.Where(), "method": string(g.Method())})
			return out, fmt.Errorf("%w by %s during freeze growth", ErrInterrupted, SignalName(out.Interrupted))
		}
	}
	if err != nil && !errors.Is(err, freeze.ErrDeadline) {
		return out, err
	}
	if g.Method() == freeze.None {
		// nothing was frozen: no fixed set to report
	} else if err == nil {
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

	if interrupted() {
		out.InterruptStage = StageFreeze
		out.Matched = res.Live()
		rec.Record(StageFreeze, "interrupted", fmt.Sprintf("interrupted by %s before the kill rounds: %d processes held in %s", SignalName(out.Interrupted), res.Live(), g.Where()),
			timeline.F{"signal": SignalName(out.Interrupted), "set": res.Live(), "group": g.Where(), "method": string(g.Method())})
		return out, fmt.Errorf("%w by %s before the kill rounds", ErrInterrupted, SignalName(out.Interrupted))
	}

	ko, err := rounds.Run(rounds.Config{FS: c.FS, Scanner: scanner, Group: g, Rounds: c.Rounds, Deadline: deadline, Wait: c.RoundWait, Stop: interrupted}, func(r rounds.Round) {
		rec.Record(StageKill, "kill-round", fmt.Sprintf("round %d: %d alive (%d in the group), %d signalled by pidfd (%v)", r.N, r.Live, r.Inside, r.Signaled, r.Took.Round(time.Millisecond)),
			timeline.F{"round": r.N, "live": r.Live, "inside": r.Inside, "signaled": r.Signaled, "group_err": r.GroupErr, "took_ms": ms(r.Took)})
	})
	out.Zero, out.Survivors, out.Zombies = ko.Zero, ko.Survivors, ko.Zombies
	if errors.Is(err, rounds.ErrStopped) {
		out.InterruptStage = StageKill
		rec.Record(StageKill, "interrupted", fmt.Sprintf("interrupted by %s during the kill rounds (%v): what is left stays in %s", SignalName(out.Interrupted), err, g.Where()),
			timeline.F{"signal": SignalName(out.Interrupted), "group": g.Where(), "method": string(g.Method())})
		return out, fmt.Errorf("%w by %s during the kill rounds", ErrInterrupted, SignalName(out.Interrupted))
	}
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

func heldGroupExists(name string) bool { return len(GroupDirs(name)) > 0 }

// GroupDirs lists the cgroup directories named name that exist: where a
// --hold or interrupted run left its frozen group (cgroup v2, or the v1
// freezer).
func GroupDirs(name string) []string {
	var dirs []string
	if mount, err := freeze.Cgroup2Mount(); err == nil {
		dirs = append(dirs, filepath.Join(mount, name))
	}
	dirs = append(dirs, filepath.Join("/sys/fs/cgroup/freezer", name))
	var out []string
	for _, d := range dirs {
		if _, err := os.Stat(d); err == nil {
			out = append(out, d)
		}
	}
	return out
}

// SignalName names a signal as operators write it: SIGINT, not
// "interrupt".
func SignalName(s os.Signal) string {
	if n, ok := s.(syscall.Signal); ok {
		if name := unix.SignalName(n); name != "" {
			return name
		}
	}
	if s == nil {
		return ""
	}
	return s.String()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// checkRevocations applies the guard to every file to revoke: the targets,
// and the files under --under directories that matches run. It changes
// nothing.
func checkRevocations(c Config, res match.Result) ([]freeze.Revocation, []error) {
	var files []string
	seen := map[string]bool{}
	add := func(p string) {
		if p != "" && !seen[p] {
			seen[p] = true
			files = append(files, p)
		}
	}
	for _, t := range c.Spec.Targets {
		add(t.Path)
	}
	for _, p := range res.Procs {
		if p.Reason == match.ByUnder {
			add(p.Exe)
		}
	}
	roots := freeze.DisposableRoots(c.Disposable)
	var revs []freeze.Revocation
	var refused []error
	for _, f := range files {
		r, err := freeze.CheckRevoke(f, roots, c.Force)
		if err != nil {
			refused = append(refused, err)
			continue
		}
		revs = append(revs, r)
	}
	return revs, refused
}

func revFields(r freeze.Revocation) timeline.F {
	return timeline.F{"path": r.Path, "dev": r.Dev, "ino": r.Ino, "mode": fmt.Sprintf("%#o", r.Mode),
		"new_mode": fmt.Sprintf("%#o", r.NewMode), "uid": r.UID, "gid": r.GID, "ctime_ns": strconv.FormatInt(r.Ctime, 10)}
}

// Revocations reads the revocations a run recorded in its timeline.
func Revocations(events []timeline.Event) ([]freeze.Revocation, error) {
	var out []freeze.Revocation
	for i, e := range events {
		if e.Step != "revoke" {
			continue
		}
		var r freeze.Revocation
		var ok1, ok2 bool
		r.Path, _ = e.Fields["path"].(string)
		dev, ok1 := e.Fields["dev"].(float64)
		ino, ok2 := e.Fields["ino"].(float64)
		mode, _ := e.Fields["mode"].(string)
		newMode, _ := e.Fields["new_mode"].(string)
		uid, _ := e.Fields["uid"].(float64)
		gid, _ := e.Fields["gid"].(float64)
		m, err1 := strconv.ParseUint(mode, 0, 32)
		nm, err2 := strconv.ParseUint(newMode, 0, 32)
		if r.Path == "" || !ok1 || !ok2 || err1 != nil || err2 != nil {
			return out, fmt.Errorf("event %d (revoke): incomplete record", i+1)
		}
		r.Dev, r.Ino, r.Mode, r.NewMode, r.UID, r.GID = uint64(dev), uint64(ino), uint32(m), uint32(nm), int(uid), int(gid)
		if ct, ok := e.Fields["ctime_ns"].(string); ok {
			r.Ctime, _ = strconv.ParseInt(ct, 10, 64)
		}
		out = append(out, r)
	}
	return out, nil
}
