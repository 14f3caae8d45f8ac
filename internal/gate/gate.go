// Package gate is freeze's kernel gate: BPF programs that keep every
// process of a chain from completing a fork, clone or exec, in one step,
// whatever the chain's size (gate.bpf.c says how); a task iterator that
// kills the gated chain in one pass (KillAll); a task iterator that
// scans every process in one pass (Tasks); and a count-only program for
// the guard (Counter). It lives only while freeze runs: nothing is
// pinned, so the links go when freeze exits, however it exits, and the
// processes it stopped stay stopped.
//
// The gate degrades by program, not as a whole: each program is loaded
// on its own. The programs that fix the set (lineage, exec, and one form
// of the refusal) must load, or Load fails and freeze uses the cgroup
// methods; the ones that only speed things up (the kill and scan
// iterators, the identity reader) may be missing, and Missing says why:
// freeze then kills by pidfd and scans /proc.
//
// Load compiles nothing: the object is checked in (gen.go).
package gate

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"freeze/internal/proc"
)

// A File is one executable the gate knows: its path, resolved, and its
// identity as stat(2) gave it when freeze resolved the path.
type File struct {
	Path string
	Stat proc.File
	// Optional is a file found under --under: one that is not, when the
	// gate opens it, the file the walk saw is left out (Skipped) instead
	// of failing the gate.
	Optional bool
}

// Config is what the gate needs before it attaches.
type Config struct {
	// Files are the executables whose every process is held: the --path
	// targets and the executables under --under. With --arg, until the
	// caller has read argv: it frees the others (Free), marks the chain
	// (MarkByFile, Mark) and forgets the files (Forget). Empty in a
	// container's scope: then only what Mark marks, and its descendants,
	// are gated.
	Files []File
	// Exempt are tgids never gated: freeze and its ancestors.
	Exempt []int
	// BTF is the kernel type information to load against; empty for the
	// running kernel's (/sys/kernel/btf/vmlinux).
	BTF string
	// Kill answers a refused attempt with SIGKILL instead of SIGSTOP in
	// the stopping form: the chain then kills itself at its next fork,
	// with no scan. Only for a run that is going to kill the chain anyway
	// (not --hold, not a dry run).
	Kill bool
	// Form is the form to load; FormAuto takes the first that loads, the
	// refusing forms first.
	Form Form
	// Ahead: loaded ahead of an incident (the guard's spare), where time
	// is free: FormAuto loads its refusing form now. Otherwise FormAuto
	// loads the stopping form now, holds the chain with it, and loads
	// the refusing form only when StartRest asks for the refusal.
	Ahead bool
}

// MaxFiles is how many executables the gate can know by identity (the
// targets map's size in gate.bpf.c).
const MaxFiles = 8192

// ErrUnsupported means the gate cannot run on this architecture: its
// syscall numbers are x86_64's.
var ErrUnsupported = errors.New("the gate is built for x86_64 and arm64 only")

// ErrMissing means a program that only speeds things up did not load
// here (Gate.Missing says why); the caller uses the slower way.
var ErrMissing = errors.New("not loaded on this kernel")

// Gate is a loaded gate, attached or not.
type Gate struct {
	ld    *loader
	core  []*ebpf.Program // lineage, exec, then the form's: in attach order
	stop  *ebpf.Program   // sys_enter among them, if loaded
	kill  *ebpf.Program
	mark  *ebpf.Program // the mark iterator (MarkByFile)
	ident *ebpf.Program
	links []link.Link
	rest  *restAttach // AttachHeld's background attach, until Settle
	// later are the refusing forms auto loads only when the refusal is
	// wanted (StartRest), in the background: loading them took longer
	// than a whole kill of the chain held by the stop (6.1: 413 ms to
	// zero in the refusing form, 215 ms in the stopping form, in one
	// run of the matrix).
	later    []Form
	scan     taskIter // the scan iterator, attached at its first use
	extras   bool     // LoadExtras ran
	statOf   map[gateFileId]proc.File
	marks    map[proc.ID]bool // what Mark marked
	targets  *ebpf.Map
	exempt   *ebpf.Map
	gated    *ebpf.Map
	counters *ebpf.Map
	// Form is the form that loaded.
	Form Form
	// Tried are the forms tried before Form, each with why it did not
	// load; Missing the programs that only speed things up and did not
	// load, with why.
	Tried, Missing []Kind
	// LoadTook and AttachTook are how long loading (what fixes the set)
	// and attaching took; HeldTook how long attaching took until the
	// chain was held (the stop attached, in the refusing form before the
	// refusal); ExtrasTook how long the rest took.
	LoadTook, AttachTook, HeldTook, ExtrasTook time.Duration
	Files                                      int  // identities in the targets map
	Skipped                                    int  // optional files left out: changed since they were found
	Kill                                       bool // refused attempts are answered with SIGKILL
}

// Load loads what fixes the set (lineage, exec and the first form that
// loads) and fills the maps; nothing runs until Attach. Call LoadExtras
// after Attach for the iterators. Its errors say which kernel feature is
// missing, or that freeze runs in a pid namespace of its own
// (ErrPidNamespace).
func Load(c Config) (*Gate, error) {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		return nil, ErrUnsupported
	}
	if !initPidNS() {
		return nil, ErrPidNamespace
	}
	t0 := time.Now()
	action := uint32(unix.SIGSTOP)
	if c.Kill {
		action = uint32(unix.SIGKILL)
	}
	ld, err := newLoader(c.BTF, action)
	if err != nil {
		return nil, err
	}
	g := &Gate{ld: ld, Kill: c.Kill, targets: ld.maps["targets"], exempt: ld.maps["exempt"], gated: ld.maps["gated"], counters: ld.maps["counters"]}
	for _, name := range []string{"gate_fork", "gate_exec"} {
		p, err := ld.prog(name)
		if err != nil {
			g.Close()
			return nil, fmt.Errorf("load the gate's %s (%s): %w", name, sections[name], err)
		}
		g.core = append(g.core, p)
	}
	if err := g.loadForm(c.Form, !c.Ahead); err != nil {
		g.Close()
		return nil, err
	}
	// The identity reader is needed before Fill: without it a file is
	// known by stat(2)'s identity, right on every filesystem but btrfs
	// subvolumes and overlays across filesystems.
	if g.ident, err = ld.prog("gate_ident"); err != nil {
		g.Missing = append(g.Missing, Kind{Name: sections["gate_ident"], Why: Explain(err) + "; files are known by stat(2)'s identity"})
	}
	g.LoadTook = time.Since(t0)
	if err := g.Fill(c.Files, c.Exempt); err != nil {
		g.Close()
		return nil, err
	}
	return g, nil
}

// loadForm loads the programs of form, or with FormAuto of the first
// form that loads, and records the others tried.
func (g *Gate) loadForm(want Form, lazy bool) error {
	forms := []Form{want}
	if want == FormAuto {
		forms = []Form{FormLSM, FormFmodRet, FormStop}
		if lazy {
			if p, err := g.ld.prog("gate_sys_enter"); err == nil {
				// Held by the stop now; the refusal, if one loads here,
				// later (StartRest), in the background.
				if err := bpfLSMActive(); err != nil {
					g.Tried = append(g.Tried, Kind{Name: FormLSM.String(), Why: err.Error()})
				} else {
					g.later = append(g.later, FormLSM)
				}
				g.later = append(g.later, FormFmodRet)
				g.core, g.stop, g.Form = append(g.core, p), p, FormStop
				return nil
			}
		}
	}
	for _, f := range forms {
		var progs []*ebpf.Program
		var err error
		if f == FormLSM {
			if err := bpfLSMActive(); err != nil {
				g.Tried = append(g.Tried, Kind{Name: f.String(), Why: err.Error()})
				continue
			}
		}
		if progs, err = g.ld.form(f); err == nil {
			if f.Refuses() {
				// The stop too, attached before the refusal: it holds the
				// chain in milliseconds where attaching the refusal takes
				// seconds (see gate.bpf.c). Without it, the refusal alone.
				if p, err := g.ld.prog("gate_sys_enter"); err == nil {
					g.core, g.stop = append(g.core, p), p
				} else {
					g.Missing = append(g.Missing, Kind{Name: sections["gate_sys_enter"], Why: Explain(err) + "; the chain is held once the refusal is attached"})
				}
			}
			if f == FormStop {
				g.stop = progs[0]
			}
			g.core, g.Form = append(g.core, progs...), f
			return nil
		}
		g.Tried = append(g.Tried, Kind{Name: f.String(), Why: Explain(err)})
	}
	last := g.Tried[len(g.Tried)-1]
	return fmt.Errorf("load the gate: no form loads (%s: %s)", last.Name, last.Why)
}

// LoadExtras loads what only speeds things up: the kill iterator (its
// kfunc is Linux 6.13's) and the scan iterator. Each that does not load
// is listed in Missing, and the caller uses the next way (pidfd kills,
// /proc scans). After Attach, so that the chain stops growing first.
func (g *Gate) LoadExtras() {
	if g.extras {
		return
	}
	g.extras = true
	t0 := time.Now()
	var err error
	if g.kill, err = g.ld.prog("gate_kill"); err != nil {
		g.Missing = append(g.Missing, Kind{Name: sections["gate_kill"], Why: Explain(err) + "; the kill rounds signal each process by pidfd"})
	}
	if g.mark, err = g.ld.prog("gate_mark"); err != nil {
		g.Missing = append(g.Missing, Kind{Name: sections["gate_mark"], Why: Explain(err) + "; an --arg chain is marked by pidfd, one process at a time"})
	}
	if g.scan.prog, err = g.ld.prog("gate_tasks"); err != nil {
		g.Missing = append(g.Missing, Kind{Name: sections["gate_tasks"], Why: Explain(err) + "; scans read /proc"})
	}
	g.ExtrasTook = time.Since(t0)
	g.ld.done()
}

// CanKill reports whether KillAll can run: the kill iterator loaded.
func (g *Gate) CanKill() bool { return g.kill != nil }

// CanScan reports whether Tasks can run: the scan iterator loaded.
func (g *Gate) CanScan() bool { return g.scan.prog != nil }

// Fill tells a loaded gate what the chain is: the files whose processes
// are in it, and the tgids never to gate. A guard loads a gate before
// any incident, with nothing in it, and fills it when asked: loading
// costs tens of milliseconds (seconds from an ordinary-priority process
// under a bomb), filling microseconds.
func (g *Gate) Fill(files []File, exempt []int) error {
	if len(files) > MaxFiles {
		return fmt.Errorf("%d executables to gate, the gate holds %d: narrow --under", len(files), MaxFiles)
	}
	ids, errs := g.kernelIDs(files)
	for i, id := range ids {
		if errs[i] != nil {
			if files[i].Optional {
				g.Skipped++
				continue
			}
			return errs[i]
		}
		if err := g.targets.Put(id, uint8(1)); err != nil {
			return fmt.Errorf("gate: add file %s: %w", files[i].Path, err)
		}
		if id != fileID(files[i].Stat) {
			if g.statOf == nil {
				g.statOf = map[gateFileId]proc.File{}
			}
			g.statOf[id] = files[i].Stat
		}
	}
	g.Files += len(files) - g.Skipped
	for _, pid := range exempt {
		if err := g.exempt.Put(uint32(pid), uint8(1)); err != nil {
			return fmt.Errorf("gate: exempt pid %d: %w", pid, err)
		}
	}
	return nil
}

// Owners limits gating by file to processes whose effective uid is one
// of uids (--uid, and every automatic hold of the guard): one user's
// chain is held, and another user's process of the same file is never
// stopped or refused by file. Call it before Attach.
func (g *Gate) Owners(uids []int) error {
	if len(uids) == 0 {
		return nil
	}
	owners, on := g.ld.maps["owners"], g.ld.maps["by_owner"]
	if owners == nil || on == nil {
		return errors.New("gate: this gate object has no owner filter")
	}
	for _, u := range uids {
		if err := owners.Put(uint32(u), uint8(1)); err != nil {
			return fmt.Errorf("gate: owner uid %d: %w", u, err)
		}
	}
	return on.Put(uint32(0), uint32(1))
}

// fileID is a file's identity as the kernel holds it, computed from
// stat(2)'s: the inode's super_block s_dev is MKDEV(major, minor) =
// major<<20 | minor, which is not st_dev's encoding. Right where stat's
// device is the superblock's; kernelIDs reads the kernel's own.
func fileID(f proc.File) gateFileId {
	return gateFileId{Ino: f.Ino, Dev: unix.Major(f.Dev)<<20 | unix.Minor(f.Dev)}
}

// Attach switches the gate on. From its return, no process of the chain
// completes a fork, clone or exec, and every program is attached.
func (g *Gate) Attach() error {
	if err := g.AttachHeld(); err != nil {
		return err
	}
	g.StartRest()
	return g.Settle()
}

// AttachHeld attaches the gate until the chain is held: from its return
// no process of the chain completes a fork, clone or exec. In the
// refusing form the stop (tp_btf/sys_enter) holds the chain first; the
// refusal, an LSM or fmod_ret program on a trampoline, can take seconds
// more to attach (7.6 s of a 10 s run on 6.1 under emulation, while the
// chain had been held after 31 ms), and its attach takes the CPU from the
// kill (on 6.1, round 1 took 1.3 s beside it, 0.6 s without). So it is
// left pending: StartRest attaches it in the background when the caller
// wants it (a hold, at once; a kill, when a second round is needed),
// Settle waits for it, and Detach drops it if it never started.
func (g *Gate) AttachHeld() error {
	t0 := time.Now()
	// Lineage first, then exec, then the refusal: a fork that slips
	// between two attaches is then already marked.
	for i, p := range g.core {
		l, err := attachProgram(p)
		if err != nil {
			g.Detach()
			return fmt.Errorf("attach %s: %w", p, err)
		}
		g.links = append(g.links, l)
		if p == g.stop && g.HeldTook == 0 {
			g.HeldTook = time.Since(t0)
			if rest := g.core[i+1:]; len(rest) > 0 || len(g.later) > 0 {
				g.rest = &restAttach{progs: rest, later: g.later, ld: g.ld, t0: t0, done: make(chan struct{})}
				return nil
			}
		}
	}
	g.AttachTook = time.Since(t0)
	if g.HeldTook == 0 {
		g.HeldTook = g.AttachTook
	}
	return nil
}

// StartRest starts attaching, in the background, what AttachHeld left
// pending; it does nothing where nothing is, or when it started already.
func (g *Gate) StartRest() {
	if r := g.rest; r != nil && !r.started {
		r.started = true
		go r.attach()
	}
}

// Settle waits for what StartRest is attaching, and sets AttachTook; a
// pending attach that never started is dropped (the gate stays in the
// stopping form, which holds the chain). An error leaves the gate as it
// was when the chain was held: the caller records it.
func (g *Gate) Settle() error {
	r := g.rest
	if r == nil {
		return nil
	}
	g.rest = nil
	if !r.started {
		return nil
	}
	<-r.done
	g.links = append(g.links, r.links...)
	g.core = append(g.core, r.loaded...) // closed with the gate
	g.Tried = append(g.Tried, r.tried...)
	if r.form != 0 && r.err == nil {
		g.Form = r.form
	}
	g.AttachTook = r.took
	return r.err
}

// Refusal is the refusing form's state, for the record: "" when the gate
// is in it or has none to come; else what is pending.
func (g *Gate) Refusal() string {
	switch {
	case g.rest == nil:
		return ""
	case len(g.rest.later) > 0:
		return "a refusing form loads and attaches"
	}
	return "the refusal attaches"
}

// Settling reports whether part of the gate is still to attach, or
// attaching; Started whether that attach began.
func (g *Gate) Settling() bool { return g.rest != nil }
func (g *Gate) Started() bool  { return g.rest != nil && g.rest.started }

// restAttach is the attach of the programs after the stop, in the
// background.
type restAttach struct {
	progs []*ebpf.Program
	// later are refusing forms to load first, the first that loads
	// wins (auto's lazy refusal); loaded its programs, form that form,
	// tried why the others did not load.
	later  []Form
	ld     *loader
	loaded []*ebpf.Program
	form   Form
	tried  []Kind

	t0      time.Time
	started bool
	done    chan struct{}
	links   []link.Link
	err     error
	took    time.Duration // from the start of AttachHeld
}

func (r *restAttach) attach() {
	defer close(r.done)
	if len(r.later) > 0 {
		r.load()
		if r.form == 0 {
			// None loads here: the stop alone holds the chain, as
			// auto's eager load would have chosen. Not an error.
			r.took = time.Since(r.t0)
			return
		}
	}
	for _, p := range r.progs {
		l, err := attachProgram(p)
		if err != nil {
			r.err = fmt.Errorf("attach %s: %w", p, err)
			break
		}
		r.links = append(r.links, l)
	}
	r.took = time.Since(r.t0)
}

// load loads the first of the later forms whose programs all load.
func (r *restAttach) load() {
	for _, f := range r.later {
		progs, err := r.ld.form(f)
		if err == nil {
			r.loaded, r.progs, r.form = progs, append(r.progs, progs...), f
			return
		}
		r.tried = append(r.tried, Kind{Name: f.String(), Why: Explain(err)})
	}
}

// attachProgram attaches one program of the gate: an LSM program as one,
// the rest (tp_btf, fmod_ret) as tracing programs.
func attachProgram(p *ebpf.Program) (link.Link, error) {
	if info, err := p.Info(); err == nil && info.Type == ebpf.LSM {
		return link.AttachLSM(link.LSMOptions{Program: p})
	}
	return link.AttachTracing(link.TracingOptions{Program: p})
}

// ProgramIDs are the kernel's ids of every program the gate loaded, for
// the record: after the run, 'bpftool prog show id N' must find none.
func (g *Gate) ProgramIDs() []uint32 {
	var ids []uint32
	for _, p := range append(g.core[:len(g.core):len(g.core)], g.kill, g.mark, g.ident, g.scan.prog) {
		if p == nil {
			continue
		}
		if info, err := p.Info(); err == nil {
			if id, ok := info.ID(); ok {
				ids = append(ids, uint32(id))
			}
		}
	}
	return ids
}

// Attached reports whether the gate is on.
func (g *Gate) Attached() bool { return len(g.links) > 0 }

// Mark gates one pinned process (and, through lineage, everything it
// starts from now on). Marking twice is harmless.
func (g *Gate) Mark(h *proc.Handle) error {
	fd := h.FD()
	if fd < 0 {
		return fmt.Errorf("pid %d: %w", h.PID, proc.ErrFixture)
	}
	err := g.gated.Update(uint32(fd), uint32(1), ebpf.UpdateAny)
	if errors.Is(err, unix.ESRCH) || errors.Is(err, ebpf.ErrKeyNotExist) {
		// The task is exiting: its storage can no longer be created.
		return fmt.Errorf("pid %d: %w", h.PID, proc.ErrGone)
	}
	if err == nil {
		g.NoteMarked(h.ID)
	}
	return err
}

// Marked reports whether Mark marked the process, or NoteMarked says
// MarkByFile did: a caller that holds the chain by mark does not mark it
// twice (2,000 marks took 33-59 ms).
func (g *Gate) Marked(id proc.ID) bool { return g.marks[id] }

// NoteMarked records that MarkByFile marked the process.
func (g *Gate) NoteMarked(id proc.ID) {
	if g.marks == nil {
		g.marks = map[proc.ID]bool{}
	}
	g.marks[id] = true
}

// Stops reports whether the gate holds the chain by the stop
// (tp_btf/sys_enter) before any refusal attaches: what an --arg chain
// needs to be held by file, since its decoys are only paused, never
// refused (a refused fork or exec would be an error in a decoy).
func (g *Gate) Stops() bool { return g.stop != nil }

// Forget empties the gate of files: from its return only marked
// processes and their lineage are gated. A chain named with --arg is
// held by its file until the scan has read every argv, then by mark.
func (g *Gate) Forget() error {
	var keys []gateFileId
	var k gateFileId
	var v uint8
	it := g.targets.Iterate()
	for it.Next(&k, &v) {
		keys = append(keys, k)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("gate: list its files: %w", err)
	}
	for _, k := range keys {
		if err := g.targets.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("gate: forget a file: %w", err)
		}
	}
	g.Files = 0
	return nil
}

// Gated reports whether the gate holds the pinned process: marked (by
// freeze, or born of a gated process).
func (g *Gate) Gated(h *proc.Handle) bool {
	fd := h.FD()
	if fd < 0 {
		return false
	}
	var v uint32
	return g.gated.Lookup(uint32(fd), &v) == nil
}

// Free lets a pinned process go for good: the gate never stops it again,
// whatever its file or mark; if the gate had stopped it, it is
// continued. held is how long it was stopped (0: never). A process
// stopped by something else too is continued all the same.
func (g *Gate) Free(h *proc.Handle) (held time.Duration, err error) {
	fd := h.FD()
	freed, at := g.ld.maps["freed"], g.ld.maps["stopped_at"]
	if fd < 0 || freed == nil || at == nil {
		return 0, fmt.Errorf("pid %d: %w", h.PID, proc.ErrFixture)
	}
	// Freed first: from here the gate cannot stop it again, so a stop
	// read below is the last there will be.
	if err := freed.Update(uint32(fd), uint32(1), ebpf.UpdateAny); err != nil {
		if errors.Is(err, unix.ESRCH) || errors.Is(err, ebpf.ErrKeyNotExist) {
			return 0, fmt.Errorf("pid %d: %w", h.PID, proc.ErrGone)
		}
		return 0, fmt.Errorf("gate: free pid %d: %w", h.PID, err)
	}
	var ns uint64
	if at.Lookup(uint32(fd), &ns) != nil || ns == 0 {
		return 0, nil
	}
	var now unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &now); err == nil {
		held = time.Duration(now.Nano() - int64(ns))
	}
	if err := h.Signal(unix.SIGCONT); err != nil {
		return held, fmt.Errorf("continue pid %d: %w", h.PID, err)
	}
	return held, nil
}

// Counters are the gate's own counts.
type Counters struct {
	ForksStopped uint64 // clone-family calls of the chain stopped at sys_enter
	ExecsStopped uint64 // exec-family calls of the chain stopped at sys_enter
	TargetExecs  uint64 // execs of a target file by a process not yet gated, stopped or refused
	Lineage      uint64 // children gated because their parent was
	Killed       uint64 // processes KillAll signalled, each counted once (but KillUnnoted)
	ForksRefused uint64 // clone-family calls of the chain refused (refusing form)
	ExecsRefused uint64 // exec-family calls of the chain refused (refusing form)
	// Task storage a program could not create (it allocates without
	// waiting, and that may fail): a process KillAll signalled but could
	// not note (counted in Killed, and again if a later pass meets it
	// dying), one MarkByFile could not mark (MarkByFile then says so), a
	// child of the chain the lineage could not mark.
	KillUnnoted, MarkFailed, LineageFailed uint64
}

// Forks and Execs are the chain's attempts the gate answered, stopped or
// refused (one attempt can be both).
func (c Counters) Forks() uint64 { return max(c.ForksStopped, c.ForksRefused) }
func (c Counters) Execs() uint64 { return max(c.ExecsStopped, c.ExecsRefused) }

// MarkByFile marks every process the gate holds by its file (not freed,
// not marked yet), in one pass of a task iterator in the kernel, and
// returns how many it marked. ErrMissing where the mark iterator did not
// load (LoadExtras), and ErrMarkIncomplete where it could not mark one
// (its task storage not created): the caller then marks by pidfd.
func (g *Gate) MarkByFile() (int, error) {
	failed, err := g.counter(gateCounterC_MARK_FAILED)
	if err != nil {
		return 0, err
	}
	n, err := g.countedIter(g.mark, gateCounterC_MARKED, "the mark iterator")
	if err != nil {
		return n, err
	}
	after, err := g.counter(gateCounterC_MARK_FAILED)
	if err != nil {
		return n, err
	}
	if after > failed {
		return n, fmt.Errorf("%w: %d of the file's processes (%d marked)", ErrMarkIncomplete, after-failed, n)
	}
	return n, nil
}

// ErrMarkIncomplete: the mark iterator could not mark every process it
// met (a program allocates task storage without waiting, and that may
// fail). A mark by pidfd, from a system call, waits for its memory.
var ErrMarkIncomplete = errors.New("the mark iterator could not mark every process (task storage not created): marking each by pidfd instead")

// countedIter runs an iterator program once and returns how far it
// moved its counter; ErrMissing where the program did not load.
func (g *Gate) countedIter(p *ebpf.Program, slot gateCounter, name string) (int, error) {
	if p == nil {
		return 0, fmt.Errorf("%s: %w", name, ErrMissing)
	}
	before, err := g.counter(slot)
	if err != nil {
		return 0, err
	}
	if err := runIter(p); err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	after, err := g.counter(slot)
	return int(after - before), err
}

// counter reads one slot of the counters, by its name in gate.bpf.c.
func (g *Gate) counter(slot gateCounter) (uint64, error) {
	var v uint64
	if err := g.counters.Lookup(uint32(slot), &v); err != nil {
		return 0, fmt.Errorf("gate counters: %w", err)
	}
	return v, nil
}

// runIter runs an iterator program once over every task.
func runIter(p *ebpf.Program) error {
	l, err := link.AttachIter(link.IterOptions{Program: p})
	if err != nil {
		return err
	}
	defer l.Close()
	r, err := l.Open()
	if err != nil {
		return err
	}
	defer r.Close()
	_, err = io.Copy(io.Discard, r)
	return err
}

// KillAll sends SIGKILL to every process of the chain, by the gate's
// own test, in one pass of a task iterator in the kernel, and returns how
// many it signalled: one system call for the whole chain, where a kill
// by pidfd costs several per process. Freeze, its ancestors, PID 1 and
// kernel threads are never in the chain. ErrMissing where the kill
// iterator did not load (LoadExtras).
func (g *Gate) KillAll() (int, error) {
	return g.countedIter(g.kill, gateCounterC_KILLED, "the kill iterator")
}

// Counters reads the counters.
func (g *Gate) Counters() (Counters, error) {
	var c Counters
	for slot, field := range map[gateCounter]*uint64{
		gateCounterC_FORK_STOPPED:   &c.ForksStopped,
		gateCounterC_EXEC_STOPPED:   &c.ExecsStopped,
		gateCounterC_TARGET_EXEC:    &c.TargetExecs,
		gateCounterC_LINEAGE:        &c.Lineage,
		gateCounterC_KILLED:         &c.Killed,
		gateCounterC_FORK_REFUSED:   &c.ForksRefused,
		gateCounterC_EXEC_REFUSED:   &c.ExecsRefused,
		gateCounterC_KILL_UNNOTED:   &c.KillUnnoted,
		gateCounterC_MARK_FAILED:    &c.MarkFailed,
		gateCounterC_LINEAGE_FAILED: &c.LineageFailed,
	} {
		v, err := g.counter(slot)
		if err != nil {
			return Counters{}, err
		}
		*field = v
	}
	return c, nil
}

// Detach switches the gate off; the processes it stopped stay stopped.
func (g *Gate) Detach() error {
	var errs []error
	g.Settle() // its links are then closed below; its error is the attach's
	for _, l := range g.links {
		errs = append(errs, l.Close())
	}
	g.links = nil
	return errors.Join(errs...)
}

// Close detaches and unloads.
func (g *Gate) Close() error {
	errs := []error{g.scan.close(), g.Detach()}
	for _, p := range append(g.core, g.kill, g.mark, g.ident, g.scan.prog) {
		if p != nil {
			errs = append(errs, p.Close())
		}
	}
	g.core, g.kill, g.mark, g.ident, g.scan.prog = nil, nil, nil, nil, nil
	if g.ld != nil {
		errs = append(errs, g.ld.close())
	}
	return errors.Join(errs...)
}

// Exempt returns the pid of the calling process and of each ancestor up
// to PID 1: what the gate must never stop.
func Exempt(fs proc.FS) []int {
	var out []int
	for pid := os.Getpid(); pid > 1; {
		out = append(out, pid)
		st, err := fs.ReadStat(pid)
		if err != nil {
			break
		}
		pid = st.PPID
	}
	return out
}

// StillLoaded waits up to within for the programs ids to be gone from the
// kernel (it frees them from a work queue after the last reference) and
// returns those still loaded: after a run, none must be.
func StillLoaded(ids []uint32, within time.Duration) []uint32 {
	end := time.Now().Add(within)
	var left []uint32
	for _, id := range ids {
		for {
			p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
			if err != nil {
				break // gone (ENOENT), or not ours to see
			}
			p.Close()
			if time.Now().After(end) {
				left = append(left, id)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return left
}

// ObjectHash is the SHA-256 of the gate's BPF object, as built into this
// binary (gen.go): what 'freeze version' names, so that two builds can be
// told apart by the programs they load.
func ObjectHash() string {
	sum := sha256.Sum256(_GateBytes)
	return hex.EncodeToString(sum[:])
}
