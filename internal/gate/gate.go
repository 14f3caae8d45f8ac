// Package gate is freeze's kernel gate: three tp_btf programs that stop
// every process of a chain at its next fork, clone or exec, in one step,
// whatever the chain's size (gate.bpf.c says how); a task iterator that
// kills the gated chain in one pass (KillAll); and a count-only program
// for the guard (Counter). It lives only while
// freeze runs: nothing is pinned, so the links go when freeze exits,
// however it exits, and the processes it stopped stay stopped.
//
// Load compiles nothing: the object is checked in (gen.go).
package gate

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"freeze/internal/proc"
)

// Config is what the gate needs before it attaches.
type Config struct {
	// Files are the executables whose every process is in the chain: the
	// --path targets and the executables under --under. Empty with --arg,
	// where the file is an interpreter that runs much else: then only
	// the processes Mark marks, and their descendants, are gated.
	Files []proc.File
	// Exempt are tgids never gated: freeze and its ancestors.
	Exempt []int
	// BTF is the kernel type information to load against; empty for the
	// running kernel's (/sys/kernel/btf/vmlinux).
	BTF string
	// Kill answers a refused attempt with SIGKILL instead of SIGSTOP: the
	// chain then kills itself at its next fork, with no scan. Only for a
	// run that is going to kill the chain anyway (not --hold, not a dry
	// run).
	Kill bool
}

// MaxFiles is how many executables the gate can know by identity.
const MaxFiles = 8192

// ErrUnsupported means the gate cannot run on this architecture: its
// syscall numbers are x86_64's.
var ErrUnsupported = errors.New("the gate is built for x86_64 only")

// Gate is a loaded gate, attached or not.
type Gate struct {
	objs  gateObjects
	links []link.Link
	scan  taskIter // the scan iterator, attached at its first use
	// LoadTook and AttachTook are how long loading and attaching took.
	LoadTook, AttachTook time.Duration
	Files                int  // identities in the targets map
	Kill                 bool // refused attempts are answered with SIGKILL
}

// Load loads the programs and fills the maps; nothing runs until Attach.
// Its errors say which kernel feature is missing.
func Load(c Config) (*Gate, error) {
	if runtime.GOARCH != "amd64" {
		return nil, ErrUnsupported
	}
	t0 := time.Now()
	opts := &ebpf.CollectionOptions{}
	if c.BTF != "" {
		spec, err := btf.LoadSpec(c.BTF)
		if err != nil {
			return nil, fmt.Errorf("kernel BTF %s: %w", c.BTF, err)
		}
		opts.Programs.KernelTypes = spec
	}
	spec, err := loadGate()
	if err != nil {
		return nil, fmt.Errorf("the gate's object: %w", err)
	}
	action := uint32(unix.SIGSTOP)
	if c.Kill {
		action = uint32(unix.SIGKILL)
	}
	if err := spec.Variables["action"].Set(action); err != nil {
		return nil, fmt.Errorf("the gate's action: %w", err)
	}
	g := &Gate{Kill: c.Kill}
	if err := spec.LoadAndAssign(&g.objs, opts); err != nil {
		return nil, fmt.Errorf("load the gate's programs: %w", err)
	}
	g.scan.prog = g.objs.GateTasks
	if err := g.Fill(c.Files, c.Exempt); err != nil {
		g.Close()
		return nil, err
	}
	g.LoadTook = time.Since(t0)
	return g, nil
}

// Fill tells a loaded gate what the chain is: the files whose processes
// are in it, and the tgids never to gate. A guard loads a gate before
// any incident, with nothing in it, and fills it when asked: loading
// costs tens of milliseconds (seconds from an ordinary-priority process
// under a bomb), filling microseconds.
func (g *Gate) Fill(files []proc.File, exempt []int) error {
	if len(files) > MaxFiles {
		return fmt.Errorf("%d executables to gate, the gate holds %d: narrow --under", len(files), MaxFiles)
	}
	for _, f := range files {
		if err := g.objs.Targets.Put(fileID(f), uint8(1)); err != nil {
			return fmt.Errorf("gate: add file %d:%d: %w", f.Dev, f.Ino, err)
		}
	}
	g.Files += len(files)
	for _, pid := range exempt {
		if err := g.objs.Exempt.Put(uint32(pid), uint8(1)); err != nil {
			return fmt.Errorf("gate: exempt pid %d: %w", pid, err)
		}
	}
	return nil
}

// fileID is a file's identity as the kernel holds it: the inode's
// super_block s_dev is MKDEV(major, minor) = major<<20 | minor, which is
// not stat(2)'s st_dev encoding.
func fileID(f proc.File) gateFileId {
	return gateFileId{Ino: f.Ino, Dev: unix.Major(f.Dev)<<20 | unix.Minor(f.Dev)}
}

// Attach switches the gate on. From its return, no process of the chain
// completes a fork, clone or exec.
func (g *Gate) Attach() error {
	t0 := time.Now()
	// Lineage first, then exec, then the refusal: a fork that slips
	// between two attaches is then already marked.
	for _, p := range []*ebpf.Program{g.objs.GateFork, g.objs.GateExec, g.objs.GateSysEnter} {
		l, err := link.AttachTracing(link.TracingOptions{Program: p})
		if err != nil {
			g.Detach()
			return fmt.Errorf("attach %s: %w", p, err)
		}
		g.links = append(g.links, l)
	}
	g.AttachTook = time.Since(t0)
	return nil
}

// ProgramIDs are the kernel's ids of the gate's programs, for the record:
// after the run, 'bpftool prog show id N' must find none of them.
func (g *Gate) ProgramIDs() []uint32 {
	var ids []uint32
	for _, p := range []*ebpf.Program{g.objs.GateSysEnter, g.objs.GateFork, g.objs.GateExec} {
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
	err := g.objs.Gated.Update(uint32(fd), uint32(1), ebpf.UpdateAny)
	if errors.Is(err, unix.ESRCH) || errors.Is(err, ebpf.ErrKeyNotExist) {
		// The task is exiting: its storage can no longer be created.
		return fmt.Errorf("pid %d: %w", h.PID, proc.ErrGone)
	}
	return err
}

// Counters are the gate's own counts.
type Counters struct {
	ForksStopped uint64 // clone-family calls of the chain answered with the action
	ExecsStopped uint64 // exec-family calls of the chain answered with the action
	TargetExecs  uint64 // execs of a target file by a process not yet gated, stopped
	Lineage      uint64 // children gated because their parent was
	Killed       uint64 // processes KillAll signalled, each counted once
}

// KillAll sends SIGKILL to every process of the chain, by the gate's
// own test, in one pass of a task iterator in the kernel, and returns how
// many it signalled: one system call for the whole chain, where a kill
// by pidfd costs several per process. Freeze, its ancestors, PID 1 and
// kernel threads are never in the chain.
func (g *Gate) KillAll() (int, error) {
	before, err := g.Counters()
	if err != nil {
		return 0, err
	}
	l, err := link.AttachIter(link.IterOptions{Program: g.objs.GateKill})
	if err != nil {
		return 0, fmt.Errorf("the kill iterator: %w", err)
	}
	defer l.Close()
	r, err := l.Open()
	if err != nil {
		return 0, fmt.Errorf("the kill iterator: %w", err)
	}
	defer r.Close()
	if _, err := io.Copy(io.Discard, r); err != nil {
		return 0, fmt.Errorf("the kill iterator: %w", err)
	}
	after, err := g.Counters()
	return int(after.Killed - before.Killed), err
}

// Counters reads the counters.
func (g *Gate) Counters() (Counters, error) {
	var v [5]uint64
	for i := range v {
		if err := g.objs.Counters.Lookup(uint32(i), &v[i]); err != nil {
			return Counters{}, fmt.Errorf("gate counters: %w", err)
		}
	}
	return Counters{ForksStopped: v[0], ExecsStopped: v[1], TargetExecs: v[2], Lineage: v[3], Killed: v[4]}, nil
}

// Detach switches the gate off; the processes it stopped stay stopped.
func (g *Gate) Detach() error {
	var errs []error
	for _, l := range g.links {
		errs = append(errs, l.Close())
	}
	g.links = nil
	return errors.Join(errs...)
}

// Close detaches and unloads.
func (g *Gate) Close() error {
	return errors.Join(g.scan.close(), g.Detach(), g.objs.Close())
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
