package freeze

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/gate"
	"freeze/internal/match"
	"freeze/internal/proc"
	"freeze/internal/show"
	"freeze/internal/timeline"
)

// Bpf is the kernel gate (package gate): no process of the chain
// completes a fork, clone or exec while it is attached, so the set is
// fixed by construction, and the gate's own kill (one pass of a task
// iterator in the kernel) takes it without moving anything. With --hold, or to finish a group an earlier --hold
// left, the gated set also goes into a group of the first cgroup method
// that works, and that group is what holds once the gate is gone.
const Bpf Method = "bpf"

// gated is the set the gate holds. The caller seals the chain (Seal)
// before the first scan and unseals it when the run ends; the group only
// marks.
type gated struct {
	gate *gate.Gate
	// files reports that the gate knows the targets by file, so a
	// process matched by path is gated without being marked.
	files bool
	// inner is the group that holds, with --hold or a reused group; nil
	// when the run kills straight from the gate.
	inner Group
	// lineage is the gate's lineage count at the last Populated.
	lineage uint64
}

// openGated wraps a sealed gate as the run's Group. With hold, or
// where an earlier --hold left a group for name, the gated set is also
// moved into a group opened as Open(fs, Auto, name, Options{}) would.
func openGated(fs proc.FS, gt *gate.Gate, hold bool, name string) (Group, string, error) {
	g := &gated{gate: gt, files: gt.Files > 0}
	if c, err := gt.Counters(); err == nil {
		g.lineage = c.Lineage
	}
	why := "the gate is attached: the chain cannot fork or exec, so its set is fixed; killed by the gate's own kill (one pass in the kernel), with no move"
	if !hold && len(GroupDirs(name)) == 0 {
		return g, why, nil
	}
	inner, innerWhy, err := openMethod(fs, Auto, name)
	if err != nil {
		return nil, "", err
	}
	g.inner = inner
	if hold {
		return g, fmt.Sprintf("the gate is attached; --hold moves the stopped set into %s (%s), which holds it once the gate is gone", inner.Method(), innerWhy), nil
	}
	return g, fmt.Sprintf("the gate is attached; an earlier --hold left %s, which is finished too", inner.Where()), nil
}

func (g *gated) Method() Method { return Bpf }

func (g *gated) Where() string {
	if g.inner != nil {
		return g.inner.Where()
	}
	return "the BPF gate"
}

func (g *gated) Freezes() bool { return true }
func (g *gated) Holds() bool   { return g.inner != nil && g.inner.Holds() }

// StopFirst is the inner group's: a move into a frozen cgroup waits for
// the forks in flight, and the chain has none (the gate refuses them
// before the pids charge and the threadgroup lock), but the stop and
// continue around the move is what turns a gate-stopped process into a
// frozen one that a thaw resumes.
func (g *gated) StopFirst() bool { return g.inner != nil && g.inner.StopFirst() }

// KillReachesAll: the gate's kill (a task iterator in the kernel) reaches
// every process the gate knows, by file or by mark: what Snapshot calls
// inside. Where the kill iterator did not load (its kfunc is Linux
// 6.13's), it reaches none, and the rounds signal each by pidfd.
func (g *gated) KillReachesAll() bool {
	if g.inner != nil {
		return g.inner.KillReachesAll()
	}
	return g.gate.CanKill()
}

func (g *gated) ThawHint() string {
	if g.inner != nil {
		return g.inner.ThawHint()
	}
	return "kill -CONT each stopped pid (the gate stopped them with SIGSTOP; a continued process stops again at its next fork only while the gate is attached)"
}

func (g *gated) Reused() bool { return g.inner != nil && g.inner.Reused() }

// Snapshot: inside the gate is a process known by its file, or marked in
// this run; with an inner group, only what is in that group.
func (g *gated) Snapshot() (func(match.Proc) bool, error) {
	if g.inner != nil {
		return g.inner.Snapshot()
	}
	return func(p match.Proc) bool {
		return (g.files && p.Reason == match.ByPath) || g.gate.Marked(p.ID)
	}, nil
}

// Move marks h in the gate, and moves it into the inner group if any.
func (g *gated) Move(h *proc.Handle) error {
	if err := g.gate.Mark(h); err != nil {
		return err
	}
	if g.inner != nil {
		return g.inner.Move(h)
	}
	return nil
}

func (g *gated) WaitFrozen(deadline time.Time) error {
	if g.inner != nil {
		return g.inner.WaitFrozen(deadline)
	}
	return nil
}

func (g *gated) Kill() error {
	if g.inner != nil {
		return g.inner.Kill()
	}
	if !g.gate.CanKill() {
		return nil // KillReachesAll is false: the rounds signal by pidfd
	}
	_, err := g.gate.KillAll()
	return err
}

// Populated: the gate's set is in no group, so no group can say whether
// it gained a member. A fork that was in flight when the gate attached
// can complete late under load (seen in CI: one process of a churning
// chain alive after zero was confirmed by two empty scans), and every
// child of the chain is counted by the gate's lineage program: a birth
// since the last look counts as populated, so the rounds look and kill
// again before they confirm zero.
func (g *gated) Populated() (bool, error) {
	if g.inner != nil {
		return g.inner.Populated()
	}
	c, err := g.gate.Counters()
	if err != nil {
		return false, nil
	}
	born := c.Lineage != g.lineage
	g.lineage = c.Lineage
	return born, nil
}

func (g *gated) Remove() error {
	if g.inner != nil {
		return g.inner.Remove()
	}
	return nil
}

// Terms: the gate marks a match and kills what it gates in one pass in
// the kernel.
func (g *gated) Terms() (string, string) {
	return "marked", "held by the gate, killed by its iterator"
}

func (g *gated) Notes() []string {
	notes := []string{fmt.Sprintf("gate knows %d file(s) by identity", g.gate.Files)}
	if g.inner != nil {
		notes = append(notes, g.inner.Notes()...)
	}
	return notes
}

// The gate's life in a run, from its load to its detach: Seal (before
// the first scan), the attached record, Unseal (at the end, whatever
// ended the run). The stop order calls them; Open then makes the sealed
// chain the run's Group.

// SealOptions are what a run asks of the gate.
type SealOptions struct {
	Spec  match.Spec
	Force bool // gate files under --under that have other hard links
	Hold  bool
	BTF   string // the kernel types the gate loads against; "" for the running kernel's
	// Spare is a gate loaded ahead and still empty (a guard's): used
	// where it fits the run, else closed.
	Spare *Spare
	// Kill lets the gate kill at the next fork or exec instead of
	// stopping (a measurement's setting); never with --hold or --arg.
	Kill bool
	Form string // the gate's form; "" for auto
}

// Sealed is a chain the gate holds, as a run keeps it from before its
// first scan to its end: no process of it completes a fork or exec.
type Sealed struct {
	*gate.Gate
	Preloaded bool   // a spare, filled in
	Note      string // what the gate does not hold by file, and why
}

// ErrMarkIncomplete is Sealed.MarkByFile's: the mark iterator could not
// mark every process it met, and each match is to be marked by pidfd.
var ErrMarkIncomplete = gate.ErrMarkIncomplete

// ErrGateForm is a form that does not parse (FREEZE_GATE_FORM).
type ErrGateForm struct{ Err error }

func (e *ErrGateForm) Error() string { return "FREEZE_GATE_FORM: " + e.Err.Error() }

// Seal loads the gate (or fills the spare), attaches it on the files of
// o.Spec, and says what it holds by file: the step of method bpf (and of
// auto, where it comes first) before the first scan. The gate stops;
// o.Kill kills instead, in a run that kills anyway: never with --arg,
// where the gate holds the file's every process at first, decoys
// included, and a decoy is only ever paused. Where the gate does not
// load, the error is a *GateError that says why in an operator's words.
func Seal(fs proc.FS, o SealOptions) (*Sealed, error) {
	files, note := gateFiles(o.Spec, o.Force)
	kill := !o.Hold && len(o.Spec.Args) == 0 && o.Kill
	word := o.Form
	if word == "" {
		word = "auto"
	}
	form, err := gate.ParseForm(word)
	if err != nil {
		o.Spare.Close()
		return nil, &ErrGateForm{err}
	}
	g, preloaded, err := loadGate(fs, o, files, kill, form)
	if err != nil {
		return nil, &GateError{Why: gate.Explain(err), Err: err}
	}
	return &Sealed{Gate: g, Preloaded: preloaded, Note: note}, nil
}

// GateError is a gate that did not load or attach: Why says so in an
// operator's words.
type GateError struct {
	Why string
	Err error
}

func (e *GateError) Error() string { return e.Why }
func (e *GateError) Unwrap() error { return e.Err }

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// loadGate fills the caller's spare gate where it fits the run, else
// loads one, and attaches it; then what only speeds things up loads
// (the kill and scan iterators), once the chain is held. The spare is
// used or closed.
func loadGate(fs proc.FS, o SealOptions, files []gate.File, kill bool, form gate.Form) (g *gate.Gate, preloaded bool, err error) {
	spare := o.Spare.take()
	preloaded = spare != nil && spare.Kill == kill && o.BTF == "" && (form == gate.FormAuto || form == spare.Form)
	if preloaded {
		t0 := time.Now()
		g, err = spare, spare.Fill(files, gate.Exempt(fs))
		if err == nil {
			err = g.Owners(o.Spec.UIDs)
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
		if g, err = gate.Load(gate.Config{Files: files, Exempt: gate.Exempt(fs), BTF: o.BTF, Kill: kill, Form: form}); err != nil {
			return nil, preloaded, err
		}
		if err = g.Owners(o.Spec.UIDs); err != nil {
			g.Close()
			return nil, preloaded, err
		}
	}
	if len(o.Spec.Args) > 0 && !g.Stops() {
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
	if o.Hold && !(len(o.Spec.Args) > 0 && g.Files > 0) {
		g.StartRest() // with --arg by file: once the decoys are let go (letGo)
	}
	g.LoadExtras() // a spare has them already: then it does nothing
	return g, preloaded, nil
}

// Attached is the record of the attached gate: its form, what it took,
// and what did not load, in words and as the timeline's record.
func (s *Sealed) Attached() (string, timeline.GateAttached) {
	g, preloaded, note := s.Gate, s.Preloaded, s.Note
	how := "load"
	if preloaded {
		how = "preloaded, filled in"
	}
	attach := "attach " + show.Dur(g.AttachTook)
	switch {
	case g.Started():
		attach = g.Refusal() + " in the background"
	case g.Settling():
		attach = g.Refusal() + " if a second kill round is needed"
	}
	msg := fmt.Sprintf("gate attached, form %s (%s %s, %s, held after %s): no process of the chain can fork, clone or exec from now on; each that tries is %s", g.Form, how, show.Dur(g.LoadTook), attach, show.Dur(g.HeldTook), gateAction(g))
	if note != "" {
		msg += "; " + note
	}
	if g.Skipped > 0 {
		msg += fmt.Sprintf("; %d file(s) changed (under --under) or lost the process they were opened through (a deleted file) before the gate's open, and are not gated by file", g.Skipped)
	}
	a := timeline.GateAttached{Preloaded: preloaded, LoadMS: msOf(g.LoadTook), AttachMS: msOf(g.AttachTook), HeldMS: msOf(g.HeldTook), ExtrasMS: msOf(g.ExtrasTook),
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
	return msg, a
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
	var deleted, held []string
	for _, t := range spec.Targets {
		if t.Deleted && t.ExePID > 0 {
			// No path names it: opened through a process that runs it
			// (pinned while opened, its identity checked against the
			// one matched). If that process has ended, the file is
			// left out, and gated as the scan marks its processes.
			files = append(files, gate.File{Path: "/proc/" + strconv.Itoa(t.ExePID) + "/exe", Stat: t.File, Optional: true})
			held = append(held, t.Path)
			continue
		}
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
	if len(held) > 0 {
		notes = append(notes, fmt.Sprintf("%s was deleted: the gate holds the file its processes still run, opened through one of them (/proc/PID/exe)", strings.Join(held, ", ")))
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

// Unseal detaches the gate at the end of the run, whatever ended it,
// and says what it did: its counters, and how its refusal fared.
func (s *Sealed) Unseal() (string, timeline.GateDetached) {
	g := s.Gate
	settling, started := g.Settling(), g.Started()
	serr := g.Settle()
	c, cerr := g.Counters()
	err := g.Close()
	d := timeline.GateDetached{Action: gateAction(g), Form: g.Form.Word(), ForksStopped: c.Forks(), ExecsStopped: c.Execs(),
		ForksRefused: c.ForksRefused, ExecsRefused: c.ExecsRefused, TargetExecs: c.TargetExecs, Lineage: c.Lineage,
		KillUnnoted: c.KillUnnoted, MarkFailed: c.MarkFailed, LineageFailed: c.LineageFailed}
	if started {
		d.AttachMS = msOf(g.AttachTook)
	}
	msg := fmt.Sprintf("gate detached: it %s %s and %s of the chain and %s of a target, and gated %s by lineage", gateAction(g),
		show.Count(int(c.Forks()), "fork attempt", "fork attempts"), show.Count(int(c.Execs()), "exec attempt", "exec attempts"),
		show.Count(int(c.TargetExecs), "exec", "execs"), show.Count(int(c.Lineage), "child", "children"))
	if cerr != nil {
		msg += " (" + cerr.Error() + ")"
	}
	msg += storageWords(c)
	switch {
	case started && serr == nil && g.Form.Refuses():
		msg += fmt.Sprintf("; the refusal (form %s) had attached %s after the run's attach began", g.Form, show.Dur(g.AttachTook))
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
	return msg, d
}

// storageWords says what the gate's programs could not note, where
// the kernel refused them task storage (they allocate without waiting):
// nothing when they noted everything.
func storageWords(c gate.Counters) string {
	if c.KillUnnoted+c.MarkFailed+c.LineageFailed == 0 {
		return ""
	}
	return fmt.Sprintf("; the kernel refused task storage to the gate's programs (they allocate without waiting): %s counted without a note, %s marked by pidfd instead of the mark iterator, %s not gated by lineage (the next scan finds them as descendants)",
		show.Count(int(c.KillUnnoted), "kill", "kills"), show.Count(int(c.MarkFailed), "process", "processes"), show.Count(int(c.LineageFailed), "child", "children"))
}

func actionWord(kill bool) string {
	if kill {
		return "killed"
	}
	return "stopped"
}

// Spare is a gate loaded ahead and still empty, as a guard keeps one
// between requests: a run fills it (SealOptions.Spare) instead of
// loading its own. A nil *Spare is none.
type Spare struct {
	g   *gate.Gate
	rec *Recorder // the guard's, lent to each run; Close leaves it
}

// LoadSpare loads a spare gate, with what speeds a run up (the kill and
// scan iterators) loaded too.
func LoadSpare() (*Spare, error) {
	g, err := gate.Load(gate.Config{Ahead: true})
	if err != nil {
		return nil, err
	}
	g.LoadExtras()
	return &Spare{g: g}, nil
}

// WithRecorder lends the spare's run the guard's argv recorder.
func (s *Spare) WithRecorder(r *Recorder) *Spare {
	if s != nil {
		s.rec = r
	}
	return s
}

// Records gives the run's scan the argv of each process's exec, from the
// recorder lent with the spare (match.Scanner.UseRecords); nil when there
// is none.
func (s *Spare) Records(fs proc.FS) match.ArgvRecords {
	if s == nil || s.rec == nil {
		return nil
	}
	return s.rec.Records(fs)
}

// take hands the spare's gate over, once.
func (s *Spare) take() *gate.Gate {
	if s == nil {
		return nil
	}
	g := s.g
	s.g = nil
	return g
}

// Tasks lists every process with the spare's task iterator (gate.Tasks),
// before a run takes it: a request's checks read the processes in one
// pass. An error when there is no spare, or its iterator cannot run.
func (s *Spare) Tasks(buf []proc.Task) ([]proc.Task, error) {
	if s == nil || s.g == nil {
		return buf, errors.New("no spare gate")
	}
	return s.g.Tasks(buf)
}

// Close unloads a spare nobody took.
func (s *Spare) Close() {
	if g := s.take(); g != nil {
		g.Close()
	}
}

// GateLoads probes whether the gate's main form loads here (with the
// running kernel's types), and says why or why not.
func GateLoads() (bool, string) {
	k := gate.Probe("")
	return k[0].OK, k[0].Why
}

// Recorder records each process's argv at its exec, in the kernel
// (gate.Recorder): an armed guard keeps one attached, and a request named
// with --arg matches by the record where /proc would wait on the
// process's address-space lock.
type Recorder struct{ r *gate.Recorder }

// StartRecorder attaches an argv recorder.
func StartRecorder() (*Recorder, error) {
	r, err := gate.StartRecorder()
	if err != nil {
		return nil, err
	}
	return &Recorder{r: r}, nil
}

// Records reads the recorder by pidfd: a process that is gone, or whose
// pid now names another start, has no record.
func (r *Recorder) Records(fs proc.FS) match.ArgvRecords {
	return func(id proc.ID) []string {
		h, err := fs.Open(id)
		if err != nil {
			return nil
		}
		defer h.Close()
		args, _, err := r.r.Args(h)
		if err != nil {
			return nil
		}
		return args
	}
}

// Close detaches and unloads the recorder.
func (r *Recorder) Close() {
	if r != nil {
		r.r.Close()
	}
}
