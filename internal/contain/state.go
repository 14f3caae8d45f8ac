package contain

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"freeze/internal/freeze"
	"freeze/internal/proc"
	"freeze/internal/runlock"
	"freeze/internal/safedir"
	"freeze/internal/show"
)

// state is what a live run leaves in StateDir/runs, so that a run whose
// freeze was killed (SIGKILL, the OOM killer) can be ended: its groups
// outlive it, with whatever the command left running in them.
type state struct {
	path string
	// What the file holds.
	Name       string   `json:"name"`
	FreezePID  int      `json:"freeze_pid"`
	FreezeTick uint64   `json:"freeze_start_ticks"`
	Cap        string   `json:"cap"`
	Pids       string   `json:"pids_group"`
	V2         string   `json:"v2_group,omitempty"`
	Freezer    string   `json:"freezer_group,omitempty"`
	Command    []string `json:"command"`

	fd int // holds the flock while the run lives
}

// newState writes the state file of a run and holds an exclusive flock
// on it for the run's life; a run that cannot write one goes on (Reap
// just cannot find it). The lock, not the pid in the file, is what says
// the run lives: a freeze run in a PID namespace of its own records a pid
// that means another process, or none, to a reaper outside it (the
// second audit: the host's --reap read a live run as gone and killed its
// command). The descriptor is close-on-exec, so the lock goes with
// freeze, however it ends, and never with the command.
func newState(dir, name string, cp *capped, command []string) *state {
	s := &state{Name: name, FreezePID: os.Getpid(), Cap: cp.kind, Pids: cp.pids, V2: cp.v2, Freezer: cp.freezer, Command: command, fd: -1}
	if st, err := proc.Default.ReadStat(os.Getpid()); err == nil {
		s.FreezeTick = st.Start
	}
	runs := filepath.Join(dir, "runs")
	if dir == "" || safedir.Ensure(runs) != nil {
		return s
	}
	b, _ := json.Marshal(s)
	// Written whole, locked, then renamed: a reaper never reads half a
	// file, nor finds the name unlocked while the run lives.
	p := filepath.Join(runs, name+".json")
	tmp := filepath.Join(runs, ".tmp-"+name)
	f, err := safedir.CreateNew(tmp, 0o600)
	if err != nil {
		return s
	}
	// The state keeps a descriptor of its own (close-on-exec) to hold
	// the lock: an *os.File would close it when collected.
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	f.Close()
	if err != nil {
		os.Remove(tmp)
		return s
	}
	if _, err = unix.Write(fd, b); err == nil {
		err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		unix.Close(fd)
		os.Remove(tmp)
		return s
	}
	s.path, s.fd = p, fd
	return s
}

func (s *state) remove() {
	if s.path != "" {
		os.Remove(s.path)
	}
	if s.fd >= 0 {
		unix.Close(s.fd)
	}
}

// locked reports whether a live run holds the state file at path: its
// flock cannot be taken. Taken, it is released at once.
func locked(path string) bool {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	return errors.Is(unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB), unix.EWOULDBLOCK)
}

// Reaped is one run Reap ended (or could not).
type Reaped struct {
	Name    string
	Command []string
	Left    int  // processes it found in the groups
	Gone    bool // its groups were gone already (an outer run ended them)
	Err     error
}

// Reap ends the groups of every run in dir whose freeze is gone: the
// same teardown as at a run's end. A run whose freeze still lives is
// left alone. Only groups named as freeze run names them, under the
// cgroup hierarchies, are touched.
func Reap(dir string) ([]Reaped, error) {
	runs := filepath.Join(dir, "runs")
	if err := safedir.Ensure(runs); err != nil {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(runs, "freeze-run-*.json"))
	if err != nil {
		return nil, err
	}
	var out []Reaped
	for _, f := range files {
		var s state
		b, err := os.ReadFile(f)
		if err == nil {
			err = json.Unmarshal(b, &s)
		}
		if err != nil {
			out = append(out, Reaped{Name: filepath.Base(f), Err: err})
			continue
		}
		if locked(f) {
			continue // its freeze still runs (in whatever PID namespace), and ends it itself
		}
		if st, err := proc.Default.ReadStat(s.FreezePID); err == nil && st.Start == s.FreezeTick {
			continue // a freeze of before the lock, still running
		}
		r := Reaped{Name: s.Name, Command: s.Command}
		cp, err := s.groups()
		if err == nil && cp.gone() {
			// An outer freeze run (or an operator) ended the groups
			// with the run: nothing is left to end.
			r.Gone = true
			os.Remove(f)
			removeNodePreload(dir, s.Name)
			out = append(out, r)
			continue
		}
		if err == nil {
			r.Left, _ = live(cp)
			_, err = teardown(cp)
			if err == nil {
				err = cp.remove()
			}
		}
		r.Err = err
		if err == nil {
			os.Remove(f)
			removeNodePreload(dir, s.Name)
		}
		out = append(out, r)
	}
	return out, nil
}

// groups rebuilds the cap a state file names, refusing any group that is
// not one of freeze run's.
func (s *state) groups() (*capped, error) {
	cp := &capped{kind: s.Cap, name: s.Name, pids: s.Pids, v2: s.V2, freezer: s.Freezer, cgroupFD: -1}
	if s.Cap == CapRlimit {
		return nil, fmt.Errorf("run %s was capped by RLIMIT_NPROC only: its processes are in no group, and were re-parented when its freeze died; find them with freeze census", s.Name)
	}
	mount, _ := freeze.Cgroup2Mount()
	for _, d := range []string{s.Pids, s.V2, s.Freezer} {
		if d == "" {
			continue
		}
		ok := strings.HasPrefix(filepath.Base(d), "freeze-run-") && filepath.Base(d) == s.Name &&
			(strings.HasPrefix(d, v1Root+"/") || strings.HasPrefix(d, freezerV1+"/") || mount != "" && strings.HasPrefix(d, mount+"/"))
		if !ok || filepath.Clean(d) != d {
			return nil, fmt.Errorf("state file names %s, which is not a group of freeze run's: left alone", show.Shell(d))
		}
	}
	return cp, nil
}

// gone reports whether none of the run's groups exists any more.
func (c *capped) gone() bool {
	for _, d := range []string{c.pids, c.v2, c.freezer} {
		if d == "" {
			continue
		}
		if _, err := os.Lstat(d); err == nil {
			return false
		}
	}
	return true
}

// StateDir is where runs leave their state files: the run lock's
// directory (/run/freeze for root), which does not survive a reboot, as
// the groups do not.
func StateDir() string { return runlock.Dir() }

// Reaper is freeze run's hook for a guard: at each tick it ends the
// runs in StateDir whose freeze is gone (Reap), says once a run it
// cannot end and once that reaping fails, and hands each reaped run to
// Log.
type Reaper struct {
	StateDir string // "" reaps nothing
	Say      func(string)
	Log      func(Reaped)

	failed     bool
	unreapable map[string]bool // runs it could not end, said once
}

// Tick reaps once.
func (r *Reaper) Tick() {
	if r.StateDir == "" {
		return
	}
	reaped, err := Reap(r.StateDir)
	if err != nil {
		if !r.failed {
			r.say(fmt.Sprintf("warning: cannot reap freeze runs whose freeze is gone: %v", err))
		}
		r.failed = true
		return
	}
	r.failed = false
	for _, rr := range reaped {
		switch {
		case rr.Gone:
			// An outer run ended it: its state file is all that was left.
		case rr.Err != nil:
			if r.unreapable[rr.Name] {
				continue
			}
			if r.unreapable == nil {
				r.unreapable = map[string]bool{}
			}
			r.unreapable[rr.Name] = true
			r.say(fmt.Sprintf("warning: run %s, whose freeze is gone, was not ended: %v", rr.Name, rr.Err))
		default:
			r.say(fmt.Sprintf("reaped %s (%s): its freeze is gone; %d process(es) it left, killed; its groups removed", rr.Name, show.ShellJoin(rr.Command), rr.Left))
		}
		if r.Log != nil {
			r.Log(rr)
		}
	}
}

func (r *Reaper) say(s string) {
	if r.Say != nil {
		r.Say(s)
	}
}
