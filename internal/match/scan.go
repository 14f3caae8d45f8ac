package match

import (
	"errors"
	"io/fs"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"freeze/internal/container"
	"freeze/internal/proc"
)

// Reason says why a process is in the set.
type Reason uint8

const (
	ByPath       Reason = iota + 1 // runs a target file
	ByDeleted                      // runs a target path that was since replaced or removed
	ByUnder                        // runs an executable under an --under directory
	ByDescendant                   // a descendant of a matched process
)

func (r Reason) String() string {
	switch r {
	case ByPath:
		return "path"
	case ByDeleted:
		return "deleted"
	case ByUnder:
		return "under"
	case ByDescendant:
		return "descendant"
	}
	return "?"
}

// Spec says what to match.
type Spec struct {
	Targets []Target
	Under   []string // absolute directories
	Args    []string // an argv element must equal one of these
	// UIDs, if any, limit the matches by file (path, deleted, under) to
	// processes whose owner (the effective uid /proc/PID belongs to) is
	// one of these: the guard's automatic hold of one user's chain must
	// not reach another user's process of the same file (--uid).
	UIDs []int
	// Scope, if set, limits the matches by file to processes in one
	// container or pod (--container, --pod): the same program on the
	// host, or in another container, is not the chain.
	Scope container.Scope
	// Cgroup, if set, limits the matches by file to processes in one
	// cgroup or below it (--cgroup), as /proc/PID/cgroup names it
	// ("/system.slice/app.service"): the chain of one group whose cap
	// refused a fork (the guard's --auto-on-cap), not the same file's
	// processes elsewhere.
	Cgroup        string
	NoDescendants bool
}

// Proc is a matched live process.
type Proc struct {
	proc.ID
	PPID   int
	State  byte
	Reason Reason
	Exe    string // the file it runs; empty for descendants
	// OfFile: it runs a target file (its owner and place allowed),
	// whatever its Reason: with --arg, a process of the file below a
	// match is a descendant.
	OfFile bool
}

// Zombie is an exited process of the chain whose parent has not reaped it.
type Zombie struct {
	proc.ID
	PPID int
	Comm string
}

// Hidden is a live process that may belong to the chain but could not be
// inspected: reading its exe link was refused (another user's process,
// seen without root), and its name is a target's.
type Hidden struct {
	proc.ID
	UID  int
	Comm string
}

// Result is one scan.
type Result struct {
	Procs   []Proc
	Zombies []Zombie
	Hidden  []Hidden
	Scanned int // processes looked at
	Counts  map[Reason]int
	// Where the matches by file run, with how many: kept for a run in
	// a container's or pod's scope or of a file named through a
	// process's view (the record names each container it acted in).
	Where map[container.Place]int
	// Passed are the live processes that run a target by file but whose
	// argv matched no --arg (decoys), and their descendants outside the
	// set: with --arg the gate holds every process of the file first,
	// and these are the ones to let go.
	Passed []Proc
	// ArgsRead is how many argv the scan read for --arg, in ArgsTook.
	ArgsRead int
	ArgsTook time.Duration
	// ArgsRecorded is how many processes matched --arg by the argv
	// their exec recorded (UseRecords), with no read of /proc.
	ArgsRecorded int
	// ReadTook is how long reading the processes took (the task source
	// or /proc), before argv and the descendant pass.
	ReadTook time.Duration
}

// Live is the number of matched live processes.
func (r Result) Live() int { return len(r.Procs) }

// A Scanner scans /proc for a Spec. It never includes PID 1, kernel
// threads, the scanning process or any of its ancestors.
type Scanner struct {
	fs      proc.FS
	spec    Spec
	exclude map[int]bool
	comms   map[string]bool // comm names of targets, for zombies
	primed  *Result
	tasks   TaskSource // when set, what a scan reads instead of /proc
	taskBuf []proc.Task
	// TaskErr is the last error of the task source; the scan that met it
	// read /proc instead.
	TaskErr error
	places  bool // keep Result.Where
	// onPassed, if set, is told of each passed process as soon as it is
	// decided (OnPassed).
	onPassed func(Proc)
	// argsRead and argsTook count this scan's reads of argv.
	argsRead int
	argsTook time.Duration
	// records, when set, gives the argv a process's exec recorded
	// (UseRecords); argsRecorded counts the matches it made.
	records      ArgvRecords
	argsRecorded int
}

// ArgvRecords returns the argv a process was exec'd with, as recorded in
// the kernel at its exec (an armed guard's recorder, gate.Recorder), or
// nil where there is no record of it.
type ArgvRecords func(id proc.ID) []string

// UseRecords makes --arg match a process whose exec recorded an argv
// that names an --arg, without reading its /proc/PID/cmdline: that read
// waits for the process's address-space lock, which a fork bomb's root
// holds through each fork's copy (90-430 ms, one match in five: issue
// #51). A process the records do not match (none, or one that names no
// --arg: it may have rewritten its argv since) is read from /proc as
// before.
func (s *Scanner) UseRecords(r ArgvRecords) { s.records = r }

// TaskSource lists every process with what a scan reads of it, appended
// to buf: the BPF gate's task iterator (gate.Tasks) does it in one pass,
// in milliseconds where /proc takes tens or hundreds.
type TaskSource func(buf []proc.Task) ([]proc.Task, error)

// UseTasks makes every later scan read the processes from src instead of
// /proc (the exe link's text and cmdline still come from /proc, for the
// few processes that need them). A scan whose src fails reads /proc.
func (s *Scanner) UseTasks(src TaskSource) { s.tasks = src }

// ReadFrom says where the last scan read the processes: "/proc", or "the
// gate's task iterator".
func (s *Scanner) ReadFrom() string {
	if s.tasks != nil && s.TaskErr == nil {
		return "the gate's task iterator"
	}
	return "/proc"
}

// Prime makes the next Scan return res instead of reading /proc: the
// caller knows res is still what a scan would find for its purpose (the
// stop order hands the match's scan to the first freeze round, and the
// fixed set's to the first kill round, each of which acts on what it
// finds and is followed by fresh scans). A scan of 3,000 processes costs
// 40-80 ms here; against a chain the gate already holds, that was most of
// the distance to the kernel's floor.
func (s *Scanner) Prime(res Result) { s.primed = &res }

// NewScanner prepares a scanner; it reads the ancestry of the calling
// process once, since that does not change during a run.
func NewScanner(fs proc.FS, spec Spec) *Scanner {
	s := &Scanner{fs: fs, spec: spec, exclude: map[int]bool{1: true, 0: true}, comms: map[string]bool{}}
	for pid := os.Getpid(); pid > 1 && !s.exclude[pid]; {
		s.exclude[pid] = true
		st, err := fs.ReadStat(pid)
		if err != nil {
			break
		}
		pid = st.PPID
	}
	s.places = !spec.Scope.Zero()
	for _, t := range spec.Targets {
		s.places = s.places || t.View
		c := t.Basename
		if len(c) > 15 { // TASK_COMM_LEN - 1
			c = c[:15]
		}
		s.comms[c] = true
	}
	return s
}

// Excluded reports whether pid is never to be touched: PID 1, freeze
// itself or one of its ancestors.
func (s *Scanner) Excluded(pid int) bool { return s.exclude[pid] }

type node struct {
	pid, ppid int
	start     uint64
	state     byte
	reason    Reason // 0: not (yet) in the set
	in        bool   // in the set: matched, or a descendant (zombies too)
	passed    bool   // runs a target by file, but its argv matched no --arg
	ofFile    bool   // runs a target by file, its owner and place allowed
	// cand: runs a target by file (this reason), its argv not read yet:
	// with --arg and descendants, argv is read only where no ancestor
	// matched (decideArgs).
	cand Reason
	comm string // only kept for zombies
	exe  string
}

func (n *node) zombie() bool { return n.state == 'Z' || n.state == 'X' }

// Scan walks /proc once. It reads the directory, then looks at each
// process (its stat and one stat(2) of its exe link), and keeps a compact
// record of each (pid, parent, start, state), which is what the descendant
// pass needs. The descendant
// pass works on two sorted slices instead of maps (a map of child slices
// allocated one slice per parent): with the collector off during a run,
// whatever a scan allocates stays until the run ends.
//
// Measured here with 12,000 frozen processes on 2 CPUs: the directory
// read takes about 25 ms, the stat reads about 20 µs a process and the
// exe stats about 8 µs, nearly all of it in the kernel.
func (s *Scanner) Scan() (Result, error) {
	if p := s.primed; p != nil {
		s.primed = nil
		return *p, nil
	}
	res := Result{Counts: map[Reason]int{}}
	t0 := time.Now()
	s.argsRead, s.argsTook, s.argsRecorded = 0, 0, 0
	l, err := s.lookAll()
	if err != nil {
		return res, err
	}
	res.ReadTook = time.Since(t0) - s.argsTook // argv read in the pass counts apart
	nodes, matched := l.nodes, l.matched
	res.Hidden, res.Where = l.hidden, l.where
	res.Scanned = len(nodes)
	slices.SortFunc(nodes, func(a, b node) int { return a.pid - b.pid })
	if l.cands > 0 {
		s.decideArgs(nodes, &l)
		matched, res.Where = l.matched, l.where
	}
	res.ArgsRead, res.ArgsTook, res.ArgsRecorded = s.argsRead, s.argsTook, s.argsRecorded
	var byParent []int32
	if !s.spec.NoDescendants && matched > 0 {
		byParent = s.descendants(nodes)
	}
	if l.passed {
		res.Passed = s.passed(nodes, byParent)
	}
	inSet := func(pid int) bool {
		i := sort.Search(len(nodes), func(i int) bool { return nodes[i].pid >= pid })
		return i < len(nodes) && nodes[i].pid == pid && nodes[i].in
	}
	res.Procs = make([]Proc, 0, matched)
	for i := range nodes {
		n := &nodes[i]
		if n.zombie() {
			if n.in || s.comms[n.comm] || inSet(n.ppid) {
				res.Zombies = append(res.Zombies, Zombie{ID: proc.ID{PID: n.pid, Start: n.start}, PPID: n.ppid, Comm: n.comm})
			}
			continue
		}
		if n.reason != 0 {
			res.Procs = append(res.Procs, Proc{ID: proc.ID{PID: n.pid, Start: n.start}, PPID: n.ppid, State: n.state, Reason: n.reason, Exe: n.exe, OfFile: n.ofFile})
			res.Counts[n.reason]++
		}
	}
	return res, nil
}

// descendants adds every descendant of a matched process to the set:
// live ones as ByDescendant, zombies as in the set only. nodes is sorted
// by pid; children are found in a second order, by parent.
func (s *Scanner) descendants(nodes []node) []int32 {
	byParent := parentOrder(nodes)
	var queue []int32
	for i := range nodes {
		if nodes[i].in {
			queue = append(queue, int32(i))
		}
	}
	s.below(nodes, byParent, queue, func(c *node) bool {
		if c.in {
			return false
		}
		c.in = true
		if !c.zombie() {
			c.reason = ByDescendant
		}
		return true
	})
	return byParent
}

// parentOrder is the nodes' indexes sorted by parent pid.
func parentOrder(nodes []node) []int32 {
	byParent := make([]int32, len(nodes))
	for i := range byParent {
		byParent[i] = int32(i)
	}
	slices.SortFunc(byParent, func(a, b int32) int { return nodes[a].ppid - nodes[b].ppid })
	return byParent
}

// below visits the descendants of the queued nodes, never an excluded
// pid; take reports whether a child is taken, and only a taken child's
// children are visited.
func (s *Scanner) below(nodes []node, byParent, queue []int32, take func(*node) bool) {
	for len(queue) > 0 {
		pid := nodes[queue[len(queue)-1]].pid
		queue = queue[:len(queue)-1]
		k := sort.Search(len(byParent), func(k int) bool { return nodes[byParent[k]].ppid >= pid })
		for ; k < len(byParent) && nodes[byParent[k]].ppid == pid; k++ {
			c := &nodes[byParent[k]]
			if s.exclude[c.pid] || !take(c) {
				continue
			}
			queue = append(queue, byParent[k])
		}
	}
}

// passed lists the passed processes (a target's file, no --arg in its
// argv) and their live descendants outside the set, after the
// descendant pass: what a gate holding the file's every process lets go.
func (s *Scanner) passed(nodes []node, byParent []int32) []Proc {
	if byParent == nil {
		byParent = parentOrder(nodes)
	}
	var queue []int32
	for i := range nodes {
		if nodes[i].passed && !nodes[i].in {
			queue = append(queue, int32(i))
		}
	}
	s.below(nodes, byParent, queue, func(c *node) bool {
		if c.in || c.passed {
			return false
		}
		c.passed = true
		return true
	})
	var out []Proc
	for i := range nodes {
		if n := &nodes[i]; n.passed && !n.in && !n.zombie() {
			out = append(out, Proc{ID: proc.ID{PID: n.pid, Start: n.start}, PPID: n.ppid, State: n.state, Exe: n.exe})
		}
	}
	return out
}

// lookAll looks at every process: from the task source when there is one
// and it answers, else from /proc.
func (s *Scanner) lookAll() (looked, error) {
	if s.tasks != nil {
		tasks, err := s.tasks(s.taskBuf[:0])
		s.taskBuf, s.TaskErr = tasks, err
		if err == nil {
			l := looked{nodes: make([]node, 0, len(tasks))}
			for i := range tasks {
				t := &tasks[i]
				if s.exclude[t.PID] {
					continue
				}
				f, ferr := t.Exe, error(nil)
				if !t.HasExe {
					f, ferr = proc.File{}, fs.ErrNotExist
				}
				s.lookStat(t.Stat, f, ferr, &l)
			}
			return l, nil
		}
	}
	pids, err := s.pids()
	if err != nil {
		return looked{}, err
	}
	// One process after the other, on the calling goroutine. Two workers
	// took a warm scan of 12,000 frozen processes from 0.31 s to 0.21 s
	// here, but a second worker needs an OS thread of its own, and freeze
	// must run within its stated 12 task slots (pids.max counts threads);
	// on a machine out of pids that is the run that matters.
	l := looked{nodes: make([]node, 0, len(pids))}
	for _, pid := range pids {
		s.look(pid, &l)
	}
	return l, nil
}

// pids lists the processes in /proc, less the excluded ones.
func (s *Scanner) pids() ([]int, error) {
	all, err := s.fs.PIDs(make([]int, 0, 1024))
	if err != nil {
		return nil, err
	}
	pids := all[:0]
	for _, pid := range all {
		if !s.exclude[pid] {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// looked is what the pass over the pids found.
type looked struct {
	nodes   []node
	matched int
	passed  bool // a node is passed
	cands   int  // nodes whose argv is still to read (decideArgs)
	candAt  map[int]container.Place
	hidden  []Hidden
	where   map[container.Place]int
}

// look reads one process's stat and exe link from /proc.
func (s *Scanner) look(pid int, l *looked) {
	st, err := s.fs.ReadStat(pid)
	if err != nil || st.Kernel() {
		return
	}
	var f proc.File
	var ferr error
	if !st.Zombie() {
		f, ferr = s.fs.ExeFile(pid)
	}
	s.lookStat(st, f, ferr, l)
}

// lookStat decides, for a live process, by its executable's identity f
// (and cmdline for --arg) whether it is a target.
func (s *Scanner) lookStat(st proc.Stat, f proc.File, ferr error, l *looked) {
	if st.Kernel() {
		return
	}
	pid := st.PID
	n := node{pid: pid, ppid: st.PPID, start: st.Start, state: st.State}
	if st.Zombie() {
		n.comm = st.Comm
		l.nodes = append(l.nodes, n)
		return
	}
	r, exe, err := s.matchExe(pid, f, ferr)
	if r != 0 && s.matchUID(pid) {
		place, in := s.matchScope(pid)
		n.ofFile = in
		switch {
		case !in:
		case s.deferArgs():
			n.cand, n.exe = r, exe
			l.cands++
			if s.places {
				if l.candAt == nil {
					l.candAt = map[int]container.Place{}
				}
				l.candAt[pid] = place
			}
		case !s.matchArgs(proc.ID{PID: pid, Start: st.Start}):
			n.passed, n.exe = true, exe
		default:
			n.reason, n.exe, n.in = r, exe, true
			l.matched++
			if s.places {
				if l.where == nil {
					l.where = map[container.Place]int{}
				}
				l.where[place]++
			}
		}
	}
	l.passed = l.passed || n.passed
	l.nodes = append(l.nodes, n)
	if r == 0 && errors.Is(err, fs.ErrPermission) && s.comms[st.Comm] {
		l.hidden = append(l.hidden, Hidden{ID: proc.ID{PID: pid, Start: st.Start}, UID: s.owner(pid), Comm: st.Comm})
	}
}

// matchExe decides by the exe link. One stat(2) of /proc/PID/exe settles
// almost every process: a different device and inode with a link count
// above zero cannot be a target. Only deleted files and --under need the
// link's text.
func (s *Scanner) matchExe(pid int, f proc.File, err error) (Reason, string, error) {
	if err != nil {
		return 0, "", err
	}
	for _, t := range s.spec.Targets {
		if f.Dev == t.File.Dev && f.Ino == t.File.Ino {
			return ByPath, t.Path, nil
		}
	}
	if f.Nlink > 0 && len(s.spec.Under) == 0 {
		return 0, "", nil
	}
	path, deleted, err := s.fs.ExePath(pid)
	if err != nil {
		return 0, "", err
	}
	if deleted {
		for _, t := range s.spec.Targets {
			if path == t.Path {
				return ByDeleted, path, nil
			}
		}
	}
	for _, d := range s.spec.Under {
		if strings.HasPrefix(path, strings.TrimSuffix(d, "/")+"/") {
			if deleted {
				return ByUnder, "", nil // the file is gone: nothing to revoke
			}
			return ByUnder, path, nil
		}
	}
	return 0, "", nil
}

// owner is the uid that owns /proc/PID: the process's effective uid
// (proc(5)), or -1.
func (s *Scanner) owner(pid int) int {
	uid, err := s.fs.UID(pid)
	if err != nil {
		return -1
	}
	return uid
}

// matchUID checks the owner of a process that already passed the
// executable filter against --uid: one stat(2) of /proc/PID.
func (s *Scanner) matchUID(pid int) bool {
	if len(s.spec.UIDs) == 0 {
		return true
	}
	return slices.Contains(s.spec.UIDs, s.owner(pid))
}

// matchScope reads, once, the cgroup of a process that already passed
// the executable filter, where the scan keeps places (Result.Where), and
// checks it against --container or --pod; without a scope every place is
// in.
func (s *Scanner) matchScope(pid int) (container.Place, bool) {
	if s.spec.Cgroup != "" && !InCgroup(s.fs, pid, s.spec.Cgroup) {
		return container.Place{}, false
	}
	if !s.places {
		return container.Place{}, true
	}
	p, err := container.Of(s.fs, pid)
	if s.spec.Scope.Zero() {
		return p, true
	}
	return p, err == nil && s.spec.Scope.Holds(p)
}

// deferArgs reports whether argv is read after the pass over the
// processes, and only where needed: with --arg and descendants, a
// process of the file below a match is in the set whatever its argv.
// Against a fork bomb of an interpreter that is one read (its root)
// instead of one per process: 2,000 reads of cmdline took 466 ms here,
// the chain and its decoys held by the gate meanwhile (#34).
func (s *Scanner) deferArgs() bool { return len(s.spec.Args) > 0 && !s.spec.NoDescendants }

// OnPassed has every later scan call f, as soon as it is decided, for a
// process of the file whose argv names no --arg and that descends from
// no match: with --arg the gate holds the file's every process, and
// such a one can be let go at once rather than after the whole scan.
func (s *Scanner) OnPassed(f func(Proc)) { s.onPassed = f }

// decideArgs decides the candidates, each after its ancestors (a parent
// starts before its child): one below a match is left to the descendant
// pass; the others are matched by argv, or passed over. Candidates with
// no candidate among their ancestors (tops) are independent of each
// other, and the small families go first: a decoy is then let go before
// the argv of a bomb's root is read, which can wait hundreds of
// milliseconds on the root's address-space lock (decoys were held up to
// 375 ms behind it).
func (s *Scanner) decideArgs(nodes []node, l *looked) {
	var idx []int
	for i := range nodes {
		if nodes[i].cand != 0 {
			idx = append(idx, i)
		}
	}
	tops := topsOf(nodes)
	top := make(map[int]int, len(idx)) // a candidate's topmost candidate ancestor, or itself
	family := map[int]int{}            // candidates per top
	for _, i := range idx {
		top[i] = tops[i]
		family[top[i]]++
	}
	sort.Slice(idx, func(a, b int) bool {
		fa, fb := family[top[idx[a]]], family[top[idx[b]]]
		if fa != fb {
			return fa < fb
		}
		if top[idx[a]] != top[idx[b]] {
			return top[idx[a]] < top[idx[b]]
		}
		return nodes[idx[a]].start < nodes[idx[b]].start
	})
	for _, i := range idx {
		n := &nodes[i]
		r := n.cand
		n.cand = 0
		switch {
		case ancestorIn(nodes, i):
			// The descendant pass takes it.
		case s.matchArgs(proc.ID{PID: n.pid, Start: n.start}):
			n.reason, n.in = r, true
			l.matched++
			if p, ok := l.candAt[n.pid]; ok {
				if l.where == nil {
					l.where = map[container.Place]int{}
				}
				l.where[p]++
			}
		default:
			n.passed, l.passed = true, true
			if s.onPassed != nil {
				s.onPassed(Proc{ID: proc.ID{PID: n.pid, Start: n.start}, PPID: n.ppid, State: n.state, Exe: n.exe})
			}
		}
	}
}

// topsOf gives each node the index of its topmost candidate (argv to
// read) among itself and its ancestors, or -1: one walk up per node,
// each ending at the first node already known (a line of 2,000 is not
// walked 2,000 times).
func topsOf(nodes []node) []int {
	const unknown = -2
	tops := make([]int, len(nodes))
	for i := range tops {
		tops[i] = unknown
	}
	var path []int
	for i := range nodes {
		path = path[:0]
		above := -1 // the topmost candidate above the path
		for k := i; k >= 0 && len(path) < 4096; k = parentOf(nodes, nodes[k]) {
			if tops[k] != unknown {
				above = tops[k]
				break
			}
			path = append(path, k)
		}
		for j := len(path) - 1; j >= 0; j-- {
			if k := path[j]; nodes[k].cand != 0 && above < 0 {
				above = k
			}
			tops[path[j]] = above
		}
	}
	return tops
}

// parentOf is the index of n's parent in nodes (sorted by pid), or -1: a
// parent that started after its child is a reused pid, not the parent.
func parentOf(nodes []node, n node) int {
	if n.ppid == n.pid {
		return -1
	}
	k := sort.Search(len(nodes), func(k int) bool { return nodes[k].pid >= n.ppid })
	if k == len(nodes) || nodes[k].pid != n.ppid || nodes[k].start > n.start {
		return -1
	}
	return k
}

// ancestorIn reports whether an ancestor of nodes[i] is in the set.
// nodes is sorted by pid; a parent that started after its child is a
// reused pid, not the parent.
func ancestorIn(nodes []node, i int) bool {
	cur := nodes[i]
	for range 4096 {
		k := parentOf(nodes, cur)
		if k < 0 {
			return false
		}
		if nodes[k].in {
			return true
		}
		cur = nodes[k]
	}
	return false
}

// matchArgs looks, only for a process that already passed the
// executable filter, for an argv element equal to an --arg: in the argv
// its exec recorded (UseRecords), then in its cmdline.
func (s *Scanner) matchArgs(id proc.ID) bool {
	if len(s.spec.Args) == 0 {
		return true
	}
	if s.records != nil && s.namesArg(s.records(id)) {
		s.argsRecorded++
		return true
	}
	t0 := time.Now()
	args, err := s.fs.Args(id.PID)
	s.argsRead++
	s.argsTook += time.Since(t0)
	return err == nil && s.namesArg(args)
}

// namesArg reports whether an element of args equals an --arg.
func (s *Scanner) namesArg(args []string) bool {
	for _, a := range args {
		for _, want := range s.spec.Args {
			if a == want {
				return true
			}
		}
	}
	return false
}

// InCgroup reports whether pid runs in group or below it, in any of its
// hierarchies (a line of /proc/PID/cgroup: "ID:CONTROLLERS:PATH").
func InCgroup(fs proc.FS, pid int, group string) bool {
	b, err := os.ReadFile(fs.Root + "/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.SplitN(line, ":", 3); len(f) == 3 && (f[2] == group || strings.HasPrefix(f[2], group+"/")) {
			return true
		}
	}
	return false
}
