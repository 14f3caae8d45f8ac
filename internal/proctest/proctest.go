// Package proctest gives the stop order's logic a fixture /proc tree and
// a fixture frozen group, so Grow's fixed point and the kill rounds can be
// tested without root, step by step, with events no live chain produces on
// cue: a set that keeps growing for N rounds, a member that dies mid-move,
// a reused pid, a survivor in state D.
//
// It is for tests only. Its tree holds no real process: signals go to the
// tree (proc.FS.Signals), never to the kernel, so a fixture pid that
// happens to be a real process's is never touched. The live-chain tests
// stay the proof against the real kernel.
package proctest

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/freeze"
	"freeze/internal/match"
	"freeze/internal/proc"
)

// firstPID is well above anything a test machine's own pids reach in a
// test's lifetime; nothing depends on it but readability.
const firstPID = 40000

// A Tree is a fixture /proc with its processes.
type Tree struct {
	Root   string // the fixture /proc
	Target string // an executable file the chain runs
	Other  string // another executable, for strangers
	FS     proc.FS

	mu      sync.Mutex
	procs   map[int]*Proc
	next    int
	tick    uint64
	groups  []*Group
	Signals []string // "pid:SIGNAME", in order
}

// Proc is one fixture process.
type Proc struct {
	PID, PPID int
	Start     uint64
	State     byte
	Exe       string
	Wchan     string
}

// New makes an empty tree in a temporary directory.
func New(t testing.TB) *Tree {
	t.Helper()
	dir := t.TempDir()
	tr := &Tree{Root: filepath.Join(dir, "proc"), Target: filepath.Join(dir, "bin", "chain"), Other: filepath.Join(dir, "bin", "other"),
		procs: map[int]*Proc{}, next: firstPID, tick: 1000}
	for _, p := range []string{tr.Root, filepath.Dir(tr.Target)} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i, p := range []string{tr.Target, tr.Other} {
		if err := os.WriteFile(p, []byte(fmt.Sprintf("#!/bin/false %d\n", i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tr.FS = proc.FS{Root: tr.Root, Signals: tr.signal}
	return tr
}

// Spec matches the tree's Target.
func (tr *Tree) Spec(t testing.TB) match.Spec {
	t.Helper()
	tg, err := match.Resolve(tr.Target)
	if err != nil {
		t.Fatal(err)
	}
	return match.Spec{Targets: []match.Target{tg}}
}

// Add starts a process running exe as a child of ppid (0: an orphan of
// PID 1). A child of a group's member is born in that group.
func (tr *Tree) Add(ppid int, exe string) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.add(ppid, exe)
}

func (tr *Tree) add(ppid int, exe string) int {
	if ppid == 0 {
		ppid = 1
	}
	pid := tr.next
	tr.next++
	tr.tick++
	p := &Proc{PID: pid, PPID: ppid, Start: tr.tick, State: 'S', Exe: exe}
	tr.procs[pid] = p
	for _, g := range tr.groups {
		if g.members[ppid] {
			g.members[pid] = true
		}
	}
	tr.write(p)
	return pid
}

// Fork gives every live process of exe outside every group a child: what
// a chain does between a scan and its parent's stop.
func (tr *Tree) Fork(exe string) []int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var parents []int
	for pid, p := range tr.procs {
		if p.Exe == exe && p.State != 'T' && p.State != 'Z' && !tr.inGroup(pid) {
			parents = append(parents, pid)
		}
	}
	sort.Ints(parents)
	var kids []int
	for _, pid := range parents {
		kids = append(kids, tr.add(pid, exe))
	}
	return kids
}

// SetState changes a process's state (D for uninterruptible sleep, with
// wchan).
func (tr *Tree) SetState(pid int, state byte, wchan string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	p := tr.procs[pid]
	p.State, p.Wchan = state, wchan
	tr.write(p)
}

// Exit removes a process, as if it died and was reaped.
func (tr *Tree) Exit(pid int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.exit(pid)
}

func (tr *Tree) exit(pid int) {
	delete(tr.procs, pid)
	for _, g := range tr.groups {
		delete(g.members, pid)
	}
	os.RemoveAll(filepath.Join(tr.Root, strconv.Itoa(pid)))
}

// Reuse makes pid a new process running exe: the old one died and the
// pid went to a stranger, with another start time.
func (tr *Tree) Reuse(pid int, exe string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.exit(pid)
	tr.tick++
	p := &Proc{PID: pid, PPID: 1, Start: tr.tick, State: 'S', Exe: exe}
	tr.procs[pid] = p
	tr.write(p)
}

// Live lists the live processes running exe, sorted.
func (tr *Tree) Live(exe string) []int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []int
	for pid, p := range tr.procs {
		if p.Exe == exe && p.State != 'Z' {
			out = append(out, pid)
		}
	}
	sort.Ints(out)
	return out
}

// Get returns a copy of a process, and whether it exists.
func (tr *Tree) Get(pid int) (Proc, bool) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	p, ok := tr.procs[pid]
	if !ok {
		return Proc{}, false
	}
	return *p, true
}

func (tr *Tree) inGroup(pid int) bool {
	for _, g := range tr.groups {
		if g.members[pid] {
			return true
		}
	}
	return false
}

// signal is the tree's kernel: SIGSTOP stops, SIGCONT resumes, SIGKILL
// ends a process unless it sleeps uninterruptibly (state D).
func (tr *Tree) signal(id proc.ID, sig unix.Signal) error {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	p, ok := tr.procs[id.PID]
	if !ok || p.Start != id.Start {
		return fmt.Errorf("pid %d: %w", id.PID, proc.ErrGone)
	}
	tr.Signals = append(tr.Signals, fmt.Sprintf("%d:%s", id.PID, unix.SignalName(sig)))
	switch {
	case p.State == 'D':
	case sig == unix.SIGKILL:
		tr.exit(id.PID)
		return nil
	case sig == unix.SIGSTOP:
		p.State = 'T'
	case sig == unix.SIGCONT && p.State == 'T':
		p.State = 'S'
	}
	tr.write(p)
	return nil
}

// write lays out /proc/PID/stat (the 52 fields of proc(5)), the exe link
// and wchan.
func (tr *Tree) write(p *Proc) {
	dir := filepath.Join(tr.Root, strconv.Itoa(p.PID))
	os.MkdirAll(dir, 0o755)
	stat := fmt.Sprintf("%d (%s) %c %d %d %d 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
		p.PID, filepath.Base(p.Exe), p.State, p.PPID, p.PID, p.PID, p.Start)
	os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644)
	os.WriteFile(filepath.Join(dir, "wchan"), []byte(p.Wchan), 0o644)
	os.Remove(filepath.Join(dir, "exe"))
	os.Symlink(p.Exe, filepath.Join(dir, "exe"))
}

// A Group is a fixture frozen group over a Tree, with the behaviour of a
// cgroup: children of members are born inside, Kill ends every member
// not in state D, and a group with members cannot be removed.
type Group struct {
	tree    *Tree
	members map[int]bool
	// OnSnapshot runs at each Snapshot, once a round's scan is done and
	// before its stops and moves: where a test makes the chain grow,
	// die or reuse a pid between a scan and the action on it.
	OnSnapshot func(round int)
	// OnPopulated runs at each Populated, with the answer about to be
	// given: a kill round asks it right after its scan.
	OnPopulated func(populated bool)
	// MoveErr, if set, decides a move's error before the move.
	MoveErr func(pid int) error
	// OnKill runs at each Kill, before the group's kill: where a test
	// starts what the kill sets off (the deaths of the killed).
	OnKill func()
	// Loose makes the group hold nothing, as the gate's set is in no
	// group: its kill still reaches every member, but it never says it
	// is populated, and a round waits for each member one by one, not
	// for the group to empty.
	Loose  bool
	rounds int
	method freeze.Method
}

// NewGroup makes an empty group over tr, as a cgroup2 group.
func (tr *Tree) NewGroup() *Group { return tr.NewGroupAs(freeze.Cgroup2) }

// NewGroupAs makes an empty group over tr that says it is a group of
// method m (cgroup2 or cgroup1: both hold and move processes in).
func (tr *Tree) NewGroupAs(m freeze.Method) *Group {
	g := &Group{tree: tr, members: map[int]bool{}, method: m}
	tr.mu.Lock()
	tr.groups = append(tr.groups, g)
	tr.mu.Unlock()
	return g
}

// Put makes pids members, as a finished Grow leaves them.
func (g *Group) Put(pids ...int) {
	g.tree.mu.Lock()
	defer g.tree.mu.Unlock()
	for _, pid := range pids {
		g.members[pid] = true
	}
}

// Members lists the group's members, sorted.
func (g *Group) Members() []int {
	g.tree.mu.Lock()
	defer g.tree.mu.Unlock()
	var out []int
	for pid := range g.members {
		out = append(out, pid)
	}
	sort.Ints(out)
	return out
}

func (g *Group) Method() freeze.Method   { return g.method }
func (g *Group) Where() string           { return "fixture group" }
func (g *Group) Freezes() bool           { return true }
func (g *Group) Holds() bool             { return !g.Loose }
func (g *Group) StopFirst() bool         { return true }
func (g *Group) KillReachesAll() bool    { return true }
func (g *Group) ThawHint() string        { return "nothing: a fixture" }
func (g *Group) Reused() bool            { return false }
func (g *Group) Notes() []string         { return nil }
func (g *Group) Terms() (string, string) { return "moved in", "in the group" }

func (g *Group) Snapshot() (func(match.Proc) bool, error) {
	g.rounds++
	if g.OnSnapshot != nil {
		g.OnSnapshot(g.rounds)
	}
	in := map[int]bool{}
	for _, pid := range g.Members() {
		in[pid] = true
	}
	return func(p match.Proc) bool { return in[p.PID] }, nil
}

func (g *Group) Move(h *proc.Handle) error {
	if g.MoveErr != nil {
		if err := g.MoveErr(h.PID); err != nil {
			return err
		}
	}
	g.tree.mu.Lock()
	defer g.tree.mu.Unlock()
	p, ok := g.tree.procs[h.PID]
	if !ok || p.Start != h.Start {
		return fmt.Errorf("pid %d: %w", h.PID, proc.ErrGone)
	}
	g.members[h.PID] = true
	return nil
}

func (g *Group) WaitFrozen(time.Time) error { return nil }

func (g *Group) Kill() error {
	if g.OnKill != nil {
		g.OnKill()
	}
	g.tree.mu.Lock()
	defer g.tree.mu.Unlock()
	for pid := range g.members {
		if p := g.tree.procs[pid]; p != nil && p.State != 'D' {
			g.tree.exit(pid)
		}
	}
	return nil
}

func (g *Group) Populated() (bool, error) {
	populated := len(g.Members()) > 0 && !g.Loose
	if g.OnPopulated != nil {
		g.OnPopulated(populated)
	}
	return populated, nil
}

func (g *Group) Remove() error {
	if len(g.Members()) > 0 {
		return fmt.Errorf("fixture group: %w", unix.EBUSY)
	}
	return nil
}
