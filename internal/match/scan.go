package match

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"

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
	Targets       []Target
	Under         []string // absolute directories
	Args          []string // an argv element must equal one of these
	NoDescendants bool
}

// Proc is a matched live process.
type Proc struct {
	proc.ID
	PPID   int
	State  byte
	Reason Reason
	Exe    string // the file it runs; empty for descendants
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
}

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
	for _, t := range spec.Targets {
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
	comm      string // only kept for zombies
}

// Scan walks /proc once. It streams the directory and keeps a compact
// record of each process (pid, parent, start, state), which is what the
// descendant pass needs.
func (s *Scanner) Scan() (Result, error) {
	res := Result{Counts: map[Reason]int{}}
	dir, err := os.Open(s.fs.Root)
	if err != nil {
		return res, fmt.Errorf("open %s: %w", s.fs.Root, err)
	}
	defer dir.Close()
	var nodes []node
	matched := map[int]hit{}
	for {
		names, err := dir.Readdirnames(1024)
		for _, name := range names {
			if name[0] < '0' || name[0] > '9' {
				continue
			}
			pid, err := strconv.Atoi(name)
			if err != nil || s.exclude[pid] {
				continue
			}
			st, err := s.fs.ReadStat(pid)
			if err != nil || st.Kernel() {
				continue
			}
			res.Scanned++
			n := node{pid: pid, ppid: st.PPID, start: st.Start, state: st.State}
			if st.Zombie() {
				n.comm = st.Comm
				nodes = append(nodes, n)
				continue
			}
			nodes = append(nodes, n)
			r, exe, err := s.matchExe(pid)
			if r != 0 && s.matchArgs(pid) {
				matched[pid] = hit{r, exe}
			} else if errors.Is(err, fs.ErrPermission) && s.comms[st.Comm] {
				res.Hidden = append(res.Hidden, Hidden{ID: proc.ID{PID: pid, Start: st.Start}, UID: s.owner(pid), Comm: st.Comm})
			}
		}
		if err != nil || len(names) == 0 {
			break
		}
	}
	inSet := make(map[int]bool, len(matched))
	for pid := range matched {
		inSet[pid] = true
	}
	if !s.spec.NoDescendants && len(matched) > 0 {
		children := make(map[int][]int, len(nodes))
		for _, n := range nodes {
			children[n.ppid] = append(children[n.ppid], n.pid)
		}
		queue := make([]int, 0, len(matched))
		for pid := range matched {
			queue = append(queue, pid)
		}
		state := make(map[int]byte, len(nodes))
		for _, n := range nodes {
			state[n.pid] = n.state
		}
		for len(queue) > 0 {
			pid := queue[len(queue)-1]
			queue = queue[:len(queue)-1]
			for _, c := range children[pid] {
				if inSet[c] || s.exclude[c] {
					continue
				}
				inSet[c] = true
				if state[c] != 'Z' && state[c] != 'X' {
					matched[c] = hit{reason: ByDescendant}
				}
				queue = append(queue, c)
			}
		}
	}
	for _, n := range nodes {
		if n.state == 'Z' || n.state == 'X' {
			if inSet[n.ppid] || s.comms[n.comm] || inSet[n.pid] {
				res.Zombies = append(res.Zombies, Zombie{ID: proc.ID{PID: n.pid, Start: n.start}, PPID: n.ppid, Comm: n.comm})
			}
			continue
		}
		if h, ok := matched[n.pid]; ok {
			res.Procs = append(res.Procs, Proc{ID: proc.ID{PID: n.pid, Start: n.start}, PPID: n.ppid, State: n.state, Reason: h.reason, Exe: h.exe})
			res.Counts[h.reason]++
		}
	}
	sort.Slice(res.Procs, func(i, j int) bool { return res.Procs[i].PID < res.Procs[j].PID })
	return res, nil
}

// matchExe decides by the exe link. One stat(2) of /proc/PID/exe settles
// almost every process: a different device and inode with a link count
// above zero cannot be a target. Only deleted files and --under need the
// link's text.
func (s *Scanner) matchExe(pid int) (Reason, string, error) {
	f, err := s.fs.ExeFile(pid)
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
	fi, err := os.Stat(s.fs.Root + "/" + strconv.Itoa(pid))
	if err != nil {
		return -1
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}

type hit struct {
	reason Reason
	exe    string
}

// matchArgs reads cmdline, only for a process that already passed the
// executable filter, and looks for an argv element equal to an --arg.
func (s *Scanner) matchArgs(pid int) bool {
	if len(s.spec.Args) == 0 {
		return true
	}
	b, err := os.ReadFile(s.fs.Root + "/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	for _, a := range bytes.Split(bytes.TrimRight(b, "\x00"), []byte{0}) {
		for _, want := range s.spec.Args {
			if string(a) == want {
				return true
			}
		}
	}
	return false
}
