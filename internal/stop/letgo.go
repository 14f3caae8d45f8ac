package stop

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"freeze/internal/freeze"
	"freeze/internal/match"
	"freeze/internal/proc"
	"freeze/internal/show"
	"freeze/internal/timeline"
)

// letGoScans bounds the scans of letGo: the second finds what exec'd the
// file between the first and the gate forgetting it; after that nothing
// is gated by file, so a third finds nothing new.
const letGoScans = 3

// letGo ends the first step for a chain named with --arg where the gate
// holds by file: from its attach every process running the file was held
// at its next fork or exec (the decoys too: they share the chain's
// file), so the chain could not grow while the scan read argv. The scan
// let each decoy go as soon as it decided it (free, through OnPassed):
// the gate never stops it again, and one it had stopped is continued.
// Here the rest of what the scan passed over goes too, then the chain,
// all the gate still holds by file, is marked (one pass of the mark
// iterator, else one pidfd each), and the gate forgets the file. A
// decoy is paused until the scan decides it, and never signalled
// otherwise; the record says how long each was held.
func (r *run) letGo() error {
	if !r.byArg || r.sealed == nil {
		return nil
	}
	lg := r.lg
	g := r.sealed
	res := r.res
	for scan := 1; ; scan++ {
		lg.rec.Scans = scan
		fresh := 0
		// The decoys first: the mark iterator must not mark them.
		for _, p := range res.Passed {
			if !lg.freed[p.ID] {
				fresh++
				r.free(p)
			}
		}
		byIter := false
		if scan == 1 {
			// What the gate holds by file is now the chain: marked in
			// one pass in the kernel where the mark iterator loaded.
			n, err := g.MarkByFile()
			byIter, lg.rec.ByIterator = err == nil, n
			if errors.Is(err, freeze.ErrMarkIncomplete) {
				lg.note(err) // each match is marked by pidfd below
			}
		}
		fresh += r.markMatches(res, byIter)
		if scan == 1 {
			// The matches are held by mark from here: the file can go.
			if err := g.Forget(); err != nil {
				return r.letGoFailed(err)
			}
		}
		if fresh == 0 && scan > 1 || scan == letGoScans || scan == 1 && lg.nothingNew(g) {
			break
		}
		var err error
		if res, err = r.scanner.Scan(); err != nil {
			return err
		}
	}
	r.scanner.OnPassed(nil) // later scans find the file's other processes ungated
	r.res, r.out.Matched = res, res.Live()
	r.recordLetGo()
	if g.Settling() && r.c.Hold {
		g.StartRest() // the refusal, now that no decoy can meet it
	}
	return nil
}

// markMatches marks the scan's matches not marked yet (noting, where
// the mark iterator marked by file, what it marked) and says how many.
func (r *run) markMatches(res match.Result, byIter bool) int {
	lg, g := r.lg, r.sealed
	fresh := 0
	for _, p := range res.Procs {
		if lg.marked[p.ID] {
			continue
		}
		lg.marked[p.ID] = true
		fresh++
		if byIter && p.OfFile {
			g.NoteMarked(p.ID)
			continue
		}
		h, err := r.c.FS.Open(p.ID)
		if err != nil {
			lg.note(err)
			continue
		}
		lg.note(g.Mark(h))
		h.Close()
	}
	return fresh
}

// recordLetGo records what letGo did: marked, let go, held how long.
func (r *run) recordLetGo() {
	lg := r.lg
	rec := &lg.rec
	rec.Marked, rec.LetGo, rec.Stopped, rec.TookMS = len(lg.marked), len(lg.freed), len(rec.Held), ms(time.Since(lg.t0))
	sort.Slice(rec.Held, func(i, j int) bool { return rec.Held[i].HeldMS > rec.Held[j].HeldMS })
	msg := fmt.Sprintf("argv read with the file held: %s named by --arg now held by mark (%d marked by the mark iterator in one pass); let go %s whose argv names none (and what they started)",
		show.Count(rec.Marked, "process", "processes"), rec.ByIterator, show.Count(rec.LetGo, "process", "processes"))
	switch {
	case rec.LetGo == 0:
	case rec.Stopped == 0:
		msg += ", none of which the gate had stopped"
	default:
		msg += fmt.Sprintf(", %d of which the gate had stopped and freeze continued (held at most %s)", rec.Stopped, show.Dur(time.Duration(rec.HeldMaxMS*float64(time.Millisecond))))
	}
	msg += fmt.Sprintf(" (%s from the gate's attach, %d scans)", show.Dur(time.Since(lg.t0)), rec.Scans)
	if len(rec.Errors) > 0 {
		msg += "; " + rec.Errors[0]
	}
	r.rec.RecordOf(timeline.StageMatch, timeline.StepLetGo, msg, *rec)
}

// letGoState is what letGo has done so far: the scan lets a decoy go as
// soon as it is decided (match.Scanner.OnPassed), before letGo runs.
type letGoState struct {
	t0 time.Time // the gate's attach
	// The gate's counts of execs of the file and of births in the
	// chain before the first scan.
	execs, lineage uint64
	marked         map[proc.ID]bool
	freed          map[proc.ID]bool
	rec            timeline.LetGo
}

// newLetGo is called once the gate is attached, before the first scan.
func newLetGo(g *freeze.Sealed) *letGoState {
	lg := &letGoState{t0: time.Now(), marked: map[proc.ID]bool{}, freed: map[proc.ID]bool{}}
	if c, err := g.Counters(); err == nil {
		lg.execs, lg.lineage = c.TargetExecs, c.Lineage
	}
	return lg
}

// nothingNew reports, once the gate has forgotten the file, that no
// process came into the gate's set since before the first scan: none
// exec'd the file, none was born of a gated process. Every process the
// gate holds was then in that scan, and a second is not needed (it cost
// 26 ms of a 600 ms run against 2,000).
func (lg *letGoState) nothingNew(g *freeze.Sealed) bool {
	c, err := g.Counters()
	return err == nil && c.TargetExecs == lg.execs && c.Lineage == lg.lineage
}

func (lg *letGoState) note(err error) {
	if err != nil && !errors.Is(err, proc.ErrGone) && len(lg.rec.Errors) < 10 {
		lg.rec.Errors = append(lg.rec.Errors, err.Error())
	}
}

// free lets one process go: freed in the gate, continued if the gate
// had stopped it, its hold recorded.
func (r *run) free(p match.Proc) {
	lg := r.lg
	if lg.freed[p.ID] {
		return
	}
	lg.freed[p.ID] = true
	h, err := r.c.FS.Open(p.ID)
	if err != nil {
		lg.note(err)
		return
	}
	held, err := r.sealed.Free(h)
	h.Close()
	lg.note(err)
	if held > 0 {
		lg.rec.Held = append(lg.rec.Held, timeline.Held{PID: p.PID, HeldMS: ms(held)})
		lg.rec.HeldMaxMS = max(lg.rec.HeldMaxMS, ms(held))
	}
}

// letGoFailed ends a run whose gate could not forget the file: it would
// keep holding every process of it, decoys included. The decoys the gate
// stopped are continued when the gate goes (closeGate does not continue
// them: the record says which to continue).
func (r *run) letGoFailed(err error) error {
	r.out.Kind = Failed
	return fmt.Errorf("the gate could not let go of the file's other processes (%w): continue any process of it that --arg does not name with kill -CONT PID", err)
}
