package autopilot

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"freeze/internal/container"
	"freeze/internal/freeze"
	"freeze/internal/gate"
	"freeze/internal/match"
	"freeze/internal/proc"
)

// Growth is the guard's automatic mode (--auto N): it holds a chain that
// nobody asked it to, when all of these are true of one executable (one
// file identity):
//
//  1. its processes tried at least Attempts forks within one look
//     (Every), counted in the kernel by the gate's counter: a chain
//     that is growing, or spinning at a cap that /proc shows as flat;
//  2. more than N of its processes are alive;
//  3. it is its own ancestor three deep: a process of it whose parent and
//     grandparent run it too. A server's pool (a master that forks its
//     workers) is two deep however many workers it has; a recursive build
//     is deep but small; a loop that runs a tool many times is one
//     process at a time.
//
// Holding is the stop order with --hold: growth frozen, nothing killed,
// reversible. With --auto-kill the run goes on to kill, but only for a
// file that --revoke-exec would also accept as disposable. Never: the
// guard's own executable, PID 1's, a daemon's, or an interpreter's
// (match.Refuse without --arg: the guard cannot narrow its chain).
type Growth struct {
	N    int
	Kill bool
	// Method, if set, is the stop order's method for the automatic
	// requests (--auto-method: their words gain --method METHOD).
	Method string
	// Under, if set, limits the automatic mode to executables under these
	// directories (--auto-under): the CI runners' caches, say.
	Under   []string
	counter *gate.Counter
	last    map[gate.FileKey]uint64
	self    proc.File
	// warned is when each declined chain was last warned of.
	warned map[gate.FileKey]time.Time
}

// Every is how often the counter is read; Attempts the fork
// attempts of one executable within one look that make it worth a /proc
// scan (1,000 a second); Depth how deep a chain must be its own
// ancestor.
const (
	Every    = 20 * time.Millisecond
	Attempts = 20
	Depth    = 3
)

// StartGrowth attaches the counter.
func StartGrowth(n int, kill bool, under []string) (*Growth, error) {
	c, err := gate.StartCounter()
	if err != nil {
		return nil, err
	}
	self, _ := proc.Default.ExeFile(os.Getpid())
	return &Growth{N: n, Kill: kill, Under: under, counter: c, last: map[gate.FileKey]uint64{}, self: self,
		warned: map[gate.FileKey]time.Time{}}, nil
}

// Scope says whose forks the counter counts: the machine's, or, for a
// guard in a pid namespace of its own, that namespace's alone.
func (a *Growth) Scope() string {
	if proc.HostPidNS() {
		return "forks counted on the whole machine"
	}
	return "forks counted in this pid namespace alone (freeze runs in a pid namespace of its own, and sees only its processes)"
}

// Close detaches the counter.
func (a *Growth) Close() error {
	if a.counter == nil {
		return nil
	}
	return a.counter.Close()
}

// Suspect is an executable the counter saw forking hard.
type Suspect struct {
	Key      gate.FileKey
	Attempts uint64 // fork attempts since the last look
}

// Look reads the counter and returns the executables over Attempts
// since the last look.
func (a *Growth) Look() []Suspect {
	now, err := a.counter.Read()
	if err != nil {
		return nil
	}
	var out []Suspect
	for k, v := range now {
		d := v - a.last[k]
		if v < a.last[k] {
			d = v // evicted from the LRU map and counted anew
		}
		if d >= Attempts {
			out = append(out, Suspect{k, d})
		}
	}
	a.last = now
	return out
}

// RepeatEvery bounds how often one chain is said again: its looks come
// every Every (or CapEvery), its operator needs one line a minute.
const RepeatEvery = time.Minute

// Due says whether the chain of key is to be said now: not within
// RepeatEvery of the last time Due said so.
func (a *Growth) Due(key gate.FileKey) bool {
	if t, ok := a.warned[key]; ok && time.Since(t) < RepeatEvery {
		return false
	}
	if a.warned == nil {
		a.warned = map[gate.FileKey]time.Time{}
	}
	a.warned[key] = time.Now()
	return true
}

// Verdict is the decision about one suspect.
type Verdict struct {
	Path     string
	Live     int
	Depth    int
	Attempts uint64
	Act      bool
	Why      string
	Words    []string // the request to run when Act
	// File is the judged file's identity, which the run must still find
	// at Path (Asked.Judged).
	File proc.File
	// UID is the owner of the judged chain (its deepest lineage); the run
	// holds that user's processes of the file (--uid) and none other's.
	// LeftOut counts the live processes of the file other users own.
	UID     int
	LeftOut int
	// Deleted: the file was deleted under its processes (a rebuilt test
	// cache); the run finds it through their /proc/PID/exe.
	Deleted bool
	// Place is where the judged chain runs: the host, or one container
	// (and pod). The chain is judged, and held, in that place alone: the
	// same file bound into another container, or run on the host, is not
	// its chain. Path is then the path inside the container.
	Place container.Place
	pid   int // a process of the chain's deepest lineage
}

// Judge scans /proc for the suspect's processes and applies the rule.
func (a *Growth) Judge(s Suspect) Verdict {
	v := Verdict{Attempts: s.Attempts}
	fam, err := familyOf(s.Key)
	if err != nil {
		v.Why = err.Error()
		return v
	}
	fam.chain(&v)
	a.decide(&v, s.Key)
	if v.Act {
		a.words(&v)
	}
	return v
}

// family is every live process of one file: its parent, owner and place.
type family struct {
	parent, uid map[int]int
	place       map[int]container.Place
}

// familyOf reads the live processes of the file key.
func familyOf(key gate.FileKey) (family, error) {
	fam := family{parent: map[int]int{}, uid: map[int]int{}, place: map[int]container.Place{}}
	pids, err := proc.Default.PIDs(nil)
	if err != nil {
		return fam, err
	}
	for _, pid := range pids {
		f, err := proc.Default.ExeFile(pid)
		if err != nil || gate.KeyOf(f) != key {
			continue
		}
		st, err := proc.Default.ReadStat(pid)
		if err != nil || st.Zombie() || st.Kernel() {
			continue
		}
		fam.parent[pid] = st.PPID
		if u, err := proc.Default.UID(pid); err == nil {
			fam.uid[pid] = u
		} else {
			fam.uid[pid] = -1
		}
		fam.place[pid], _ = container.Of(proc.Default, pid)
	}
	return fam, nil
}

// chain finds the chain in the family: its deepest lineage of one owner
// in one place. A process counts deeper only through a parent of the
// same file, the same user and the same container. Its processes are
// the chain; another user's processes of the same file (root running a
// shared tool, say), or the same file's in another container or on the
// host, are left out of the count and of the hold.
func (fam family) chain(v *Verdict) {
	mine := func(pid int) bool { _, ok := fam.parent[pid]; return ok }
	v.UID = -1
	for pid := range fam.parent {
		d := 1
		for p := fam.parent[pid]; mine(p) && fam.uid[p] == fam.uid[pid] && fam.place[p] == fam.place[pid] && d < Depth; p = fam.parent[p] {
			d++
		}
		if d > v.Depth {
			v.Depth, v.UID, v.Place, v.pid = d, fam.uid[pid], fam.place[pid], pid
		}
	}
	for pid := range fam.parent {
		if fam.uid[pid] == v.UID && fam.place[pid] == v.Place {
			v.Live++
		} else {
			v.LeftOut++
		}
	}
	if v.pid != 0 {
		v.Path, v.Deleted, _ = proc.Default.ExePath(v.pid)
	}
}

// decide says whether to act on the chain, and why (not).
func (a *Growth) decide(v *Verdict, key gate.FileKey) {
	switch {
	case v.Path != "" && !a.within(v.Path):
		v.Why = "outside --auto-under"
	case v.Path == "":
		v.Why = "no live process of it left"
	case v.Live <= a.N:
		v.Why = fmt.Sprintf("%d alive, not more than %d", v.Live, a.N)
	case v.Depth < Depth:
		v.Why = fmt.Sprintf("%d alive but only %d deep (a pool, not a chain)", v.Live, v.Depth)
	case v.UID < 0:
		v.Why = "the chain's owner could not be read"
	case !v.Place.Host() && v.Deleted:
		v.Why = v.Path + " was deleted inside " + v.Place.String() + ": never acted on automatically (by hand: freeze --path /proc/PID/exe)"
	default:
		t, act, why := a.allowed(v.Path, v.Deleted, key, v.Place, v.pid)
		switch {
		case act && !a.within(t.Path):
			v.Why = t.Path + " is outside --auto-under"
		case act:
			v.Act, v.Why, v.Path, v.File = true, why, t.Path, t.File
		default:
			v.Why = why
		}
	}
}

// words are the request the guard makes of a chain it acts on: a hold,
// or with --auto-kill a kill where the file is disposable.
func (a *Growth) words(v *Verdict) {
	uidWord := strconv.Itoa(v.UID)
	v.Words = append(scopeWords(v.Place), "--path", v.Path, "--uid", uidWord, "--hold")
	if v.LeftOut > 0 {
		v.Why += fmt.Sprintf("; uid %d's chain in %s only: %d process(es) of the file that other users run, or that run elsewhere, are left alone", v.UID, v.Place, v.LeftOut)
	}
	if a.Kill && !v.Place.Host() {
		v.Why += "; held, not killed: in a container (a disposable copy is a file of this host)"
	} else if a.Kill {
		if _, err := freeze.CheckRevoke(v.Path, freeze.DisposableRoots(nil), false); err == nil {
			v.Words = []string{"--path", v.Path, "--uid", uidWord}
			v.Why += "; disposable, so killed (--auto-kill)"
		} else {
			v.Why += fmt.Sprintf("; held, not killed: %v", err)
		}
	}
	if a.Method != "" {
		v.Words = append(v.Words, "--method", a.Method)
	}
}

func (a *Growth) within(path string) bool {
	if len(a.Under) == 0 {
		return true
	}
	for _, d := range a.Under {
		if rel, err := filepath.Rel(d, path); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return true
		}
	}
	return false
}

// allowed applies the rules no automatic run may break, to the file the
// exe link's text names now, and returns that file's resolved path. The
// chain was judged by the identity of the file its processes run (key);
// its owner can swap the path for a symlink to a program root runs, and
// the run would act on that program: a path that no longer resolves to
// the judged file is refused (#24, finding 4).
func (a *Growth) allowed(path string, deleted bool, key gate.FileKey, place container.Place, pid int) (match.Target, bool, string) {
	var t match.Target
	var err error
	if !place.Host() {
		// The path is the container's: resolved in its root, through
		// the chain's own process, as the run will resolve it.
		t, err = match.Resolve("/proc/" + strconv.Itoa(pid) + "/root" + path)
		if err == nil {
			t.Given = path
			// Pinned while opened; in the chain's place still after.
			if pl, perr := container.Of(proc.Default, pid); perr != nil || pl != place {
				return t, false, fmt.Sprintf("process %d left %s while its root was read: never acted on automatically", pid, place)
			}
		}
	} else if deleted {
		// The README's own incident: the test cache rebuilt or removed
		// under its chain. Its processes' exe links still hold the file.
		t, _, err = match.ResolveDeleted(proc.Default, path)
	} else {
		t, err = match.Resolve(path)
	}
	if err != nil {
		return t, false, err.Error()
	}
	if gate.KeyOf(t.File) != key {
		return t, false, fmt.Sprintf("%s no longer resolves to the file its processes run (now %s): never acted on automatically", path, t.Path)
	}
	ok, why := a.rules(t)
	if !place.Host() {
		t.Path = path // the run names it so, with --container or --pod
	}
	return t, ok, why
}

// scopeWords are the flags that keep a run in the chain's place.
func scopeWords(p container.Place) []string {
	switch {
	case p.ID != "":
		return []string{"--container", p.ID}
	case p.Pod != "":
		return []string{"--pod", p.Pod}
	}
	return nil
}

// rules are the refusals of an automatic run.
func (a *Growth) rules(t match.Target) (bool, string) {
	if t.File.Dev == a.self.Dev && t.File.Ino == a.self.Ino {
		return false, "it is the guard's own executable"
	}
	// The one judge (match.Refuse, as the order it queues applies it,
	// without --arg or --force): PID 1's file and freeze's own, the
	// system's daemons by identity, interpreters. What it refuses, the
	// order would refuse; what it allows, the order runs.
	if r := match.Refuse(proc.Default, t, false, false); r != nil {
		return false, r.Rule + " (never acted on automatically: " + r.Hint + ", by hand)"
	}
	return true, "a growing chain"
}

// Explain says why the growth trigger could not start: it needs the
// gate's fork counter.
func Explain(err error) string { return gate.Explain(err) }
