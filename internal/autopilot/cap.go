package autopilot

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"freeze/internal/container"
	"freeze/internal/gate"
	"freeze/internal/proc"

	"golang.org/x/sys/unix"
)

// The cap's own lever (--auto-on-cap): a process limit that refuses a
// fork (a unit's TasksMax, a container's --pids-limit, a pod's
// podPidsLimit, freeze run's --max-procs) counts it in the group's
// pids.events ("max N"). The guard reads those counts, and when one
// rises it judges the group's chain, as --auto judges a growing one, and
// holds it: no BPF is needed, and the limit that was hit is named.
//
// What it never acts on: a group that holds PID 1, the guard itself or
// an ancestor of the guard; a file the one judge refuses (PID 1's, the
// guard's own, a daemon's, an interpreter's); a pool (a group at its cap
// whose processes of one file are not Depth deep).

// CapEvery is how often the counts are looked at; CapRescan how often
// the hierarchies are walked again for groups made since (a container
// started, a unit). A group first seen in a walk after the guard armed
// counts from zero: a chain whose new group reached its cap between two
// walks is held at the next (at 2 s, a test's chain was seen 2,117
// refusals late).
//
// Which counts a look reads: on cgroup v2 the kernel notifies a change
// of pids.events, and a look reads only the files whose notice came
// (inotify, IN_MODIFY): a host of thousands of groups is not read ten
// times a second. v1's files are read at every look, a bounded poll: on
// this host's 6.18 a refusal raised v1's count and sent no notice. A v2 file whose watch could not be added (the user's watch
// limit) is polled as v1's are, and a lost notice (the queue's overflow)
// makes the next look read every file.
const (
	CapEvery  = 100 * time.Millisecond
	CapRescan = time.Second
)

// Cap watches every pids group's refusals.
type Cap struct {
	*Growth
	roots   []string
	files   []string       // the pids.events files of the last walk
	counts  map[string]int // "max" of each, as last read
	walked  time.Time
	spared  map[int]bool // PID 1, the guard and its ancestors
	held    map[gate.FileKey]time.Time
	logged  map[string]time.Time // when each group was last logged, when it was not acted on
	armed   bool                 // the first look (the baseline) is done
	ino     int                  // inotify of the groups' directories, -1 for none
	evIno   int                  // inotify of v2's pids.events files, -1 for none
	evWD    map[int32]string     // evIno's watches: descriptor to file
	polled  map[string]bool      // files read at every look (v1's, and v2's unwatched)
	noticed string               // the root whose files are read on the kernel's notice (v2's), "" for none
	reads   int                  // files the last look read
}

// StartCap finds the pids hierarchies and reads every group's count
// once: refusals before the guard started are not acted on.
func StartCap(kill bool, under []string) (*Cap, error) {
	roots := pidsRoots()
	if len(roots) == 0 {
		return nil, fmt.Errorf("no pids controller is mounted (neither cgroup v2 with pids enabled nor the v1 pids hierarchy): there is no cap to watch")
	}
	v2 := ""
	if roots[0] == "/sys/fs/cgroup" {
		v2 = roots[0]
	}
	return newCap(kill, under, roots, v2), nil
}

// newCap watches roots, reading the files under noticed (v2's root,
// or "") on the kernel's notice, and takes the baseline.
func newCap(kill bool, under []string, roots []string, noticed string) *Cap {
	self, _ := proc.Default.ExeFile(os.Getpid())
	c := &Cap{Growth: &Growth{N: 0, Kill: kill, Under: under, self: self, warned: map[gate.FileKey]time.Time{}},
		roots: roots, counts: map[string]int{}, spared: ancestry(os.Getpid()), held: map[gate.FileKey]time.Time{}, logged: map[string]time.Time{},
		evIno: -1}
	c.ino, _ = unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if noticed != "" {
		if fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC); err == nil {
			c.noticed, c.evIno = noticed, fd
		}
	}
	c.Look()
	c.armed = true
	return c
}

// Close releases the inotify descriptor.
func (c *Cap) Close() {
	if c.ino >= 0 {
		unix.Close(c.ino)
		c.ino = -1
	}
	if c.evIno >= 0 {
		unix.Close(c.evIno)
		c.evIno = -1
	}
}

// Reads says how the counts are read, for the guard's first line: per
// root, on the kernel's notice or polled.
func (c *Cap) Reads() string {
	var out []string
	for _, r := range c.roots {
		if r == c.noticed && c.evIno >= 0 {
			out = append(out, r+": on the kernel's notice (inotify)")
		} else {
			out = append(out, r+": read every "+CapEvery.String())
		}
	}
	return strings.Join(out, "; ")
}

// LogDue says whether a group that keeps refusing (a chain left alone,
// held already, or met while disarmed) is to be logged now: once
// within RepeatEvery, not at every look.
func (c *Cap) LogDue(group string, now time.Time) bool {
	if t, ok := c.logged[group]; ok && now.Sub(t) < RepeatEvery {
		return false
	}
	c.logged[group] = now
	return true
}

// Held notes that the chain of key was held (or in monitor mode, would
// have been) at now: a chain that refills its cap is held once within
// RepeatEvery.
func (c *Cap) Held(key gate.FileKey, now time.Time) { c.held[key] = now }

// pidsRoots are the mounted pids hierarchies: cgroup v2's root where the
// pids controller is enabled, and v1's pids hierarchy.
func pidsRoots() []string {
	var out []string
	if b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && hasWord(string(b), "pids") {
		out = append(out, "/sys/fs/cgroup")
	}
	if _, err := os.Stat("/sys/fs/cgroup/pids/cgroup.procs"); err == nil {
		out = append(out, "/sys/fs/cgroup/pids")
	}
	return out
}

func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}

// ancestry is pid and its ancestors, and PID 1.
func ancestry(pid int) map[int]bool {
	out := map[int]bool{1: true}
	for p := pid; p > 1 && !out[p]; {
		out[p] = true
		st, err := proc.Default.ReadStat(p)
		if err != nil {
			break
		}
		p = st.PPID
	}
	return out
}

// Hit is a group whose refusals rose since the last look.
type Hit struct {
	Group         string
	Max           string // its pids.max
	Before, After int    // its refusals at the last look and now
	Read          string // what read the rise: "notice", "poll" or "walk"
}

// Look reads every group's count and returns the groups whose count
// rose, deepest only: where the kernel counts a refusal in each group
// above the refusing one too, the ancestors' rise is the same refusal.
func (c *Cap) Look() []Hit {
	noticed, all := c.notices()
	c.reads = 0
	if time.Since(c.walked) > CapRescan || c.created() {
		c.files = c.files[:0]
		c.polled = map[string]bool{}
		c.evWD = map[int32]string{}
		for _, r := range c.roots {
			filepath.WalkDir(r, func(p string, d fs.DirEntry, err error) error {
				switch {
				case err != nil:
				case d.IsDir() && c.ino >= 0:
					// A group made below it wakes the next look's walk.
					unix.InotifyAddWatch(c.ino, p, unix.IN_CREATE|unix.IN_ONLYDIR)
				case d.Name() == "pids.events":
					c.files = append(c.files, p)
					c.polled[p] = !c.watch(r, p)
				}
				return nil
			})
		}
		c.walked = time.Now()
		// Counts of groups gone since are dropped (containers come and
		// go for months under one guard).
		kept := make(map[string]int, len(c.files))
		for _, f := range c.files {
			if n, ok := c.counts[f]; ok {
				kept[f] = n
			}
		}
		c.counts = kept
		for g := range c.logged {
			if _, ok := kept[filepath.Join(g, "pids.events")]; !ok {
				delete(c.logged, g)
			}
		}
	}
	var hits []Hit
	for _, f := range c.files {
		before, seen := c.counts[f]
		read := "poll"
		switch {
		case noticed[f]:
			read = "notice"
		case c.polled[f] || all:
		case !seen:
			// First seen in this walk: its baseline (or, after the
			// guard armed, a rise from zero).
			read = "walk"
		default:
			continue // watched, and no notice came
		}
		c.reads++
		n, ok := maxCount(f)
		if !ok {
			continue
		}
		c.counts[f] = n
		if (seen || c.armed) && n > before {
			hits = append(hits, Hit{Group: filepath.Dir(f), Before: before, After: n, Read: read})
		}
	}
	sort.Slice(hits, func(i, j int) bool { return len(hits[i].Group) > len(hits[j].Group) })
	var deepest []Hit
	for _, h := range hits {
		below := false
		for _, d := range deepest {
			if strings.HasPrefix(d.Group, h.Group+"/") {
				below = true
			}
		}
		if !below {
			deepest = append(deepest, h)
		}
	}
	// The limit that refused: the group or the nearest above it whose
	// pids.max is a number. Before hierarchical events (5.10) the kernel
	// counts a refusal in the forking task's own group, a leaf with no
	// limit of its own below the capped one (the harness's, a runtime's);
	// the capped group is what is named, judged and held.
	var out []Hit
	seen := map[string]bool{}
	for _, h := range deepest {
		h.Group, h.Max = c.limitOf(h.Group)
		if !seen[h.Group] {
			seen[h.Group] = true
			out = append(out, h)
		}
	}
	return out
}

// watch adds a notice of file's changes where its root is the noticed one, and
// says whether it did.
func (c *Cap) watch(root, file string) bool {
	if root != c.noticed || c.evIno < 0 {
		return false
	}
	wd, err := unix.InotifyAddWatch(c.evIno, file, unix.IN_MODIFY)
	if err != nil {
		return false
	}
	c.evWD[int32(wd)] = file
	return true
}

// notices drains the notices of changed pids.events files: the files, and
// whether one was lost (the queue overflowed: read every file).
func (c *Cap) notices() (map[string]bool, bool) {
	out := map[string]bool{}
	if c.evIno < 0 {
		return out, false
	}
	var buf [16 * (unix.SizeofInotifyEvent + unix.NAME_MAX + 1)]byte
	lost := false
	for {
		n, err := unix.Read(c.evIno, buf[:])
		if n <= 0 || err != nil {
			return out, lost
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
				lost = true
			}
			if f, ok := c.evWD[ev.Wd]; ok && ev.Mask&unix.IN_MODIFY != 0 {
				out[f] = true
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
}

// limitOf is group, or its nearest ancestor within its hierarchy, whose
// pids.max is a number, with that number; group and "max" if none is.
func (c *Cap) limitOf(group string) (string, string) {
	root := ""
	for _, r := range c.roots {
		if group == r || strings.HasPrefix(group, r+"/") {
			root = r
		}
	}
	for g := group; root != "" && (g == root || strings.HasPrefix(g, root+"/")); g = filepath.Dir(g) {
		b, err := os.ReadFile(filepath.Join(g, "pids.max"))
		if m := strings.TrimSpace(string(b)); err == nil && m != "max" {
			return g, m
		}
		if g == root {
			break
		}
	}
	return group, "max"
}

// created reports whether a group was made since the last walk (inotify
// on every group's directory; without it, the walk every CapRescan).
func (c *Cap) created() bool {
	if c.ino < 0 {
		return false
	}
	var buf [4096]byte
	made := false
	for {
		n, err := unix.Read(c.ino, buf[:])
		if n <= 0 || err != nil {
			return made
		}
		made = true
	}
}

// maxCount is the "max N" line of a pids.events file.
func maxCount(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "max" {
			n, err := strconv.Atoi(f[1])
			return n, err == nil
		}
	}
	return 0, false
}

// members are the pids of group and of the groups below it.
func members(group string) []int {
	var out []int
	filepath.WalkDir(group, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
		return nil
	})
	return out
}

// JudgeGroup judges the chain of a group at its cap: the executable with
// the most processes in it, by identity, then the rule --auto applies to
// it (its deepest lineage of one owner in one place, the refusals).
func (c *Cap) JudgeGroup(h Hit) Verdict {
	pids := members(h.Group)
	in := make(map[int]bool, len(pids))
	by := map[gate.FileKey]int{}
	for _, pid := range pids {
		in[pid] = true
		if c.spared[pid] {
			return Verdict{Why: fmt.Sprintf("the group holds pid %d (PID 1, the guard or an ancestor of the guard): never acted on automatically", pid)}
		}
		if f, err := proc.Default.ExeFile(pid); err == nil {
			by[gate.KeyOf(f)]++
		}
	}
	var top gate.FileKey
	most := 0
	for k, n := range by {
		if n > most || n == most && (k.Dev < top.Dev || k.Dev == top.Dev && k.Ino < top.Ino) {
			top, most = k, n
		}
	}
	if most == 0 {
		return Verdict{Why: "the group lists no process whose executable could be read"}
	}
	v := Verdict{}
	fam, err := familyOf(top)
	if err != nil {
		v.Why = err.Error()
		return v
	}
	// The chain is the group's: the same file's processes elsewhere (a
	// decoy on the host, another container) are left out of the judging
	// and of the hold (--cgroup).
	outside := 0
	for pid := range fam.parent {
		if !in[pid] {
			delete(fam.parent, pid)
			outside++
		}
	}
	fam.chain(&v)
	c.decide(&v, top)
	if v.Act {
		if t, ok := c.held[top]; ok && time.Since(t) < RepeatEvery {
			v.Act, v.Why = false, "held already within the last minute: a chain that refills its cap is held once"
			return v
		}
		c.words(&v)
		v.Words = append([]string{"--cgroup", h.Group}, v.Words...)
		if outside > 0 {
			v.Why += fmt.Sprintf("; the group's chain only: %d process(es) of the file outside %s are left alone", outside, h.Group)
		}
	}
	return v
}

// Owner names who set the group's limit, from its path: a systemd unit,
// a container or a pod, or the group itself.
func Owner(group string) string {
	if p := container.Parse(group); !p.Host() {
		return p.String()
	}
	for d := group; d != "/" && d != "."; d = filepath.Dir(d) {
		if b := filepath.Base(d); strings.HasSuffix(b, ".service") || strings.HasSuffix(b, ".scope") {
			return "unit " + b
		}
	}
	return "group " + group
}
