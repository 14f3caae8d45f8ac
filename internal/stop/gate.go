package stop

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/gate"
	"freeze/internal/match"
	"freeze/internal/proc"
	"freeze/internal/timeline"
)

// wantsGate reports whether the run tries the kernel gate: --method bpf,
// and auto, where it comes first.
func (r *run) wantsGate() bool {
	return !r.c.DryRun && r.c.Method.TriesGate()
}

// gate is the first part of step 2, taken before the first scan: the
// identity of a --path target is known from the file, so the chain stops
// growing before freeze reads a single process of it, and the scan then
// reads a set that can no longer change. With --arg the file is an
// interpreter that runs much else: the gate holds all of its processes
// only until the scan has read argv, then the chain by mark and the rest
// let go (letGo). In a container's scope the gate knows no file: the
// scan's matches are marked, and what they start is gated by lineage.
// Where the gate cannot load, the run falls back to the cgroup methods
// and says why.
func (r *run) gate() error {
	if !r.wantsGate() {
		return nil // a spare in r.c.Gate is closed at the end of Run
	}
	files, note := gateFiles(r.c.Spec, r.c.Force)
	// The gate stops; Tuning.GateKill (for the benchmark) kills instead,
	// in a run that kills anyway: never with --arg, where the gate holds
	// the file's every process at first, decoys included, and a decoy
	// is only ever paused.
	kill := !r.c.Hold && len(r.c.Spec.Args) == 0 && r.c.Tuning.GateKill
	// Tuning.GateForm picks the form: for the benchmark and the VM
	// matrix, which measure each form on one kernel.
	formWord := r.c.Tuning.GateForm
	if formWord == "" {
		formWord = "auto"
	}
	form, ferr := gate.ParseForm(formWord)
	if ferr != nil {
		r.gateWhy = ferr.Error()
		r.rec.RecordOf(timeline.StageFreeze, timeline.StepGateUnavailable, "the BPF gate is not available: FREEZE_GATE_FORM: "+r.gateWhy+"; falling back to the cgroup methods", timeline.GateUnavailable{Error: r.gateWhy, MethodAsked: string(r.c.Method)})
		return nil
	}
	g, preloaded, err := r.loadGate(files, kill, form)
	if err != nil {
		r.gateWhy = gate.Explain(err)
		r.rec.RecordOf(timeline.StageFreeze, timeline.StepGateUnavailable, "the BPF gate is not available: "+r.gateWhy+"; falling back to the cgroup methods", timeline.GateUnavailable{Error: r.gateWhy, MethodAsked: string(r.c.Method)})
		return nil
	}
	r.gateOn = g
	if r.byArg = len(r.c.Spec.Args) > 0 && g.Files > 0; r.byArg {
		// Each decoy goes as soon as the scan has decided it.
		r.lg = newLetGo(g)
		r.scanner.OnPassed(r.free)
	}
	r.out.GatePrograms = g.ProgramIDs()
	// From now on every scan of the run reads the processes through the
	// gate's task iterator: milliseconds where /proc takes tens to
	// hundreds, and no contention with the chain's exits on /proc.
	if !r.c.Tuning.ScanProc && g.CanScan() {
		r.scanner.UseTasks(g.Tasks)
	}
	r.recordAttached(g, preloaded, note)
	return nil
}

// loadGate fills the caller's spare gate where it fits the run, else
// loads one, and attaches it; then what only speeds things up loads
// (the kill and scan iterators), once the chain is held.
func (r *run) loadGate(files []gate.File, kill bool, form gate.Form) (g *gate.Gate, preloaded bool, err error) {
	spare := r.c.Gate
	r.c.Gate = nil // taken: used below, or closed
	preloaded = spare != nil && spare.Kill == kill && r.c.BTF == "" && (form == gate.FormAuto || form == spare.Form)
	if preloaded {
		t0 := time.Now()
		g, err = spare, spare.Fill(files, gate.Exempt(r.c.FS))
		if err == nil {
			err = g.Owners(r.c.Spec.UIDs)
		}
		g.LoadTook = time.Since(t0) // preloaded: only the filling counts
		if err != nil {
			g.Close()
			return nil, preloaded, err
		}
	} else {
		if spare != nil {
			spare.Close()
		}
		if g, err = gate.Load(gate.Config{Files: files, Exempt: gate.Exempt(r.c.FS), BTF: r.c.BTF, Kill: kill, Form: form}); err != nil {
			return nil, preloaded, err
		}
		if err = g.Owners(r.c.Spec.UIDs); err != nil {
			g.Close()
			return nil, preloaded, err
		}
	}
	if len(r.c.Spec.Args) > 0 && !g.Stops() {
		// The refusal alone would hold the file's processes: a decoy's
		// fork or exec would fail, not pause. Gated by mark only.
		if err = g.Forget(); err != nil {
			g.Close()
			return nil, preloaded, err
		}
	}
	// Held first. The refusal (where this form has one) attaches in the
	// background: at once for a hold, where it gives finality (a process
	// continued later is stopped again, and refused where the stop does
	// not see the call: a 32-bit one); for a kill, only when a second
	// kill round is needed (see kill), so that its attach does not take
	// the CPU from the first.
	if err = g.AttachHeld(); err != nil {
		g.Close()
		return nil, preloaded, err
	}
	if r.c.Hold && !(len(r.c.Spec.Args) > 0 && g.Files > 0) {
		g.StartRest() // with --arg by file: once the decoys are let go (letGo)
	}
	g.LoadExtras() // a spare has them already: then it does nothing
	return g, preloaded, nil
}

// recordAttached records the attached gate: its form, what it took, and
// what did not load.
func (r *run) recordAttached(g *gate.Gate, preloaded bool, note string) {
	how := "load"
	if preloaded {
		how = "preloaded, filled in"
	}
	attach := "attach " + timeline.Dur(g.AttachTook)
	switch {
	case g.Started():
		attach = g.Refusal() + " in the background"
	case g.Settling():
		attach = g.Refusal() + " if a second kill round is needed"
	}
	msg := fmt.Sprintf("gate attached, form %s (%s %s, %s, held after %s): no process of the chain can fork, clone or exec from now on; each that tries is %s", g.Form, how, timeline.Dur(g.LoadTook), attach, timeline.Dur(g.HeldTook), gateAction(g))
	if note != "" {
		msg += "; " + note
	}
	if g.Skipped > 0 {
		msg += fmt.Sprintf("; %d executable(s) under --under changed between the walk and the gate's open and are not gated by file", g.Skipped)
	}
	a := timeline.GateAttached{Preloaded: preloaded, LoadMS: ms(g.LoadTook), AttachMS: ms(g.AttachTook), HeldMS: ms(g.HeldTook), ExtrasMS: ms(g.ExtrasTook),
		Files: g.Files, ByFile: g.Files > 0, Programs: g.ProgramIDs(), Action: gateAction(g), Form: g.Form.Word()}
	for _, k := range g.Tried {
		a.Tried = append(a.Tried, k.Name+": "+k.Why)
	}
	if len(a.Tried) > 0 {
		msg += fmt.Sprintf("; %d stronger form(s) did not load here (the record's 'tried' says why)", len(a.Tried))
	}
	for _, k := range g.Missing {
		msg += "; without " + k.Name + ": " + k.Why
		a.Missing = append(a.Missing, k.Name+": "+k.Why)
	}
	// Tagged with the match: the gate attaches before the scan, on the
	// target's file, and the scan then marks what it finds in it. So the
	// progress reads 1/4 before 2/4, as it happened.
	r.rec.RecordOf(timeline.StageMatch, timeline.StepGateAttached, msg, a)
}

// gateAction is what the gate does to an attempt of the chain.
func gateAction(g *gate.Gate) string {
	if g.Form.Refuses() {
		return "refused and " + actionWord(g.Kill)
	}
	return actionWord(g.Kill)
}

// gateFiles are the files whose every process is held at first: the
// targets, and the executables under --under (with --arg, only until
// letGo has sorted them); none in a container's scope.
func gateFiles(spec match.Spec, force bool) ([]gate.File, string) {
	if !spec.Scope.Zero() {
		// A file can be shared beyond the scope (a host directory
		// bound into two containers): gated by file, the other's
		// processes would be held too.
		return nil, "in one " + spec.Scope.String() + " the gate knows no file: it gates the scan's matches by pid and what they start by lineage"
	}
	var files []gate.File
	var deleted []string
	for _, t := range spec.Targets {
		if t.Deleted {
			// Nothing can open it by its path: its processes are
			// gated by the scan's marks, and their children by lineage.
			deleted = append(deleted, t.Path)
			continue
		}
		files = append(files, gate.File{Path: t.Path, Stat: t.File})
	}
	var w underWalk
	for _, dir := range spec.Under {
		w.walk(dir, force, &files)
	}
	var notes []string
	if len(spec.Args) > 0 && len(files) > 0 {
		notes = append(notes, "with --arg the gate holds every process of the file until the scan has read their argv; then it holds the matches by mark and lets the others go")
	}
	if len(deleted) > 0 {
		notes = append(notes, fmt.Sprintf("%s was deleted: the gate gates its processes as the scan marks them, and what they start by lineage", strings.Join(deleted, ", ")))
	}
	if w.more > 0 {
		notes = append(notes, fmt.Sprintf("%d more executables under --under than the gate holds: their processes are gated when the scan marks them", w.more))
	}
	if w.linked > 0 {
		notes = append(notes, fmt.Sprintf("%d executables under --under with other hard links are not gated by file (a link to a program elsewhere would gate all of it): their processes are gated when the scan marks them; --force gates them", w.linked))
	}
	return files, strings.Join(notes, "; ")
}

// underWalk lists the executables under a --under directory for the
// gate. The directory's owner may be the chain's, who can swap a
// subdirectory for a symlink mid-walk (to /usr/bin, say): so the walk
// goes by descriptor, each directory opened O_NOFOLLOW relative to its
// parent's descriptor, each entry judged by fstatat without following,
// and never by a path looked up again. A file with other hard links is
// left to the scan without --force.
type underWalk struct{ more, linked int }

// maxUnderDepth bounds the walk: a test cache is a few levels deep.
const maxUnderDepth = 32

func (w *underWalk) walk(dir string, force bool, files *[]gate.File) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	w.dir(fd, dir, 0, force, files)
}

func (w *underWalk) dir(fd int, path string, depth int, force bool, files *[]gate.File) {
	f := os.NewFile(uintptr(fd), path) // owns fd
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return
	}
	for _, name := range names {
		var st unix.Stat_t
		if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if depth >= maxUnderDepth {
				continue
			}
			sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err == nil {
				w.dir(sub, filepath.Join(path, name), depth+1, force, files)
			}
		case unix.S_IFREG:
			switch {
			case st.Mode&0o111 == 0:
			case st.Nlink > 1 && !force:
				w.linked++
			case len(*files) >= gate.MaxFiles:
				w.more++
			default:
				*files = append(*files, gate.File{Path: filepath.Join(path, name), Stat: proc.File{Dev: st.Dev, Ino: st.Ino, Nlink: uint64(st.Nlink)}, Optional: true})
			}
		}
	}
}

// closeGate detaches the gate at the end of the run, whatever ended it,
// and records its counters.
func (r *run) closeGate() {
	g := r.gateOn
	if g == nil {
		return
	}
	settling, started := g.Settling(), g.Started()
	serr := g.Settle()
	c, cerr := g.Counters()
	err := g.Close()
	r.gateOn = nil
	d := timeline.GateDetached{Action: gateAction(g), Form: g.Form.Word(), ForksStopped: c.Forks(), ExecsStopped: c.Execs(),
		ForksRefused: c.ForksRefused, ExecsRefused: c.ExecsRefused, TargetExecs: c.TargetExecs, Lineage: c.Lineage}
	if started {
		d.AttachMS = ms(g.AttachTook)
	}
	msg := fmt.Sprintf("gate detached: it %s %s and %s of the chain and %s of a target, and gated %s by lineage", gateAction(g),
		match.Count(int(c.Forks()), "fork attempt", "fork attempts"), match.Count(int(c.Execs()), "exec attempt", "exec attempts"),
		match.Count(int(c.TargetExecs), "exec", "execs"), match.Count(int(c.Lineage), "child", "children"))
	if cerr != nil {
		msg += " (" + cerr.Error() + ")"
	}
	switch {
	case started && serr == nil && g.Form.Refuses():
		msg += fmt.Sprintf("; the refusal (form %s) had attached %s after the run's attach began", g.Form, timeline.Dur(g.AttachTook))
	case started && serr == nil:
		msg += "; no refusing form loads here (tried in the background), the stop alone held the chain"
		for _, k := range g.Tried {
			d.Tried = append(d.Tried, k.Name+": "+k.Why)
		}
	case settling && !started:
		msg += "; the refusal was not loaded or attached: the first kill round reached zero, the stop alone held the chain"
	}
	if serr != nil {
		d.AttachError = serr.Error()
		msg += "; the refusal did not attach (the chain was held by the stop): " + serr.Error()
	}
	if err != nil {
		d.Error = err.Error()
		msg += "; detaching failed: " + err.Error()
	}
	// Detached after zero is confirmed: part of confirm and record.
	r.rec.RecordOf(timeline.StageRecord, timeline.StepGateDetached, msg, d)
}

func actionWord(kill bool) string {
	if kill {
		return "killed"
	}
	return "stopped"
}
