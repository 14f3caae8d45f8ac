package contain

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"freeze/internal/freeze"
	"freeze/internal/match"
	"freeze/internal/proc"
	"freeze/internal/runlock"
	"freeze/internal/safedir"
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
}

// newState writes the state file of a run; a run that cannot write one
// goes on (Reap just cannot find it).
func newState(dir, name string, cp *capped, command []string) *state {
	s := &state{Name: name, FreezePID: os.Getpid(), Cap: cp.kind, Pids: cp.pids, V2: cp.v2, Freezer: cp.freezer, Command: command}
	if st, err := proc.Default.ReadStat(os.Getpid()); err == nil {
		s.FreezeTick = st.Start
	}
	runs := filepath.Join(dir, "runs")
	if dir == "" || safedir.Ensure(runs) != nil {
		return s
	}
	b, _ := json.Marshal(s)
	// Written whole, then renamed: a guard reaping at the same moment
	// never reads half a file.
	p := filepath.Join(runs, name+".json")
	tmp := filepath.Join(runs, ".tmp-"+name)
	if os.WriteFile(tmp, b, 0o600) == nil && os.Rename(tmp, p) == nil {
		s.path = p
	} else {
		os.Remove(tmp)
	}
	return s
}

func (s *state) remove() {
	if s.path != "" {
		os.Remove(s.path)
	}
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
		if st, err := proc.Default.ReadStat(s.FreezePID); err == nil && st.Start == s.FreezeTick {
			continue // its freeze still runs, and ends it itself
		}
		r := Reaped{Name: s.Name, Command: s.Command}
		cp, err := s.groups()
		if err == nil && cp.gone() {
			// An outer freeze run (or an operator) ended the groups
			// with the run: nothing is left to end.
			r.Gone = true
			os.Remove(f)
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
			return nil, fmt.Errorf("state file names %s, which is not a group of freeze run's: left alone", match.ShellQuote(d))
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
