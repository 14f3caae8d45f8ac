package container

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"freeze/internal/proc"
)

// A Scope limits a run to one container (--container) or one pod
// (--pod). The zero Scope is everywhere.
type Scope struct {
	ID  string // a container's full id, once Resolve found it
	Pod string // a pod's uid, with dashes
}

// Zero reports whether s limits nothing.
func (s Scope) Zero() bool { return s.ID == "" && s.Pod == "" }

// Holds reports whether a process at p is inside s.
func (s Scope) Holds(p Place) bool {
	switch {
	case s.ID != "":
		return p.ID == s.ID
	case s.Pod != "":
		return p.Pod == s.Pod
	}
	return true
}

func (s Scope) String() string {
	if s.ID != "" {
		return "container " + s.ID[:min(12, len(s.ID))]
	}
	if s.Pod != "" {
		return "pod " + s.Pod
	}
	return "everywhere"
}

// Of reads where process pid runs.
func Of(fs proc.FS, pid int) (Place, error) {
	b, err := os.ReadFile(fs.Root + "/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return Place{}, err
	}
	return FromCgroupFile(b), nil
}

// A Member is one container seen on the machine: where it is, and its
// processes, oldest first (the container's init is first while it lives).
type Member struct {
	Place
	PIDs []int
}

// Containers lists every container and pod the processes of fs run in.
func Containers(fs proc.FS) ([]Member, error) {
	pids, err := fs.PIDs(nil)
	if err != nil {
		return nil, err
	}
	type seen struct {
		m      *Member
		starts map[int]uint64
	}
	by := map[Place]*seen{}
	for _, pid := range pids {
		p, err := Of(fs, pid)
		if err != nil || p.Host() {
			continue
		}
		st, err := fs.ReadStat(pid)
		if err != nil || st.Zombie() {
			continue
		}
		s := by[p]
		if s == nil {
			s = &seen{m: &Member{Place: p}, starts: map[int]uint64{}}
			by[p] = s
		}
		s.m.PIDs = append(s.m.PIDs, pid)
		s.starts[pid] = st.Start
	}
	out := make([]Member, 0, len(by))
	for _, s := range by {
		sort.Slice(s.m.PIDs, func(i, j int) bool {
			a, b := s.m.PIDs[i], s.m.PIDs[j]
			if s.starts[a] != s.starts[b] {
				return s.starts[a] < s.starts[b]
			}
			return a < b
		})
		out = append(out, *s.m)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Pod != out[j].Pod {
			return out[i].Pod < out[j].Pod
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// A NotFound error lists the containers an id or uid could have meant.
type NotFound struct {
	What       string // "--container 3f25a1b2c3d4"
	Candidates []Member
	Several    bool // more than one container matched the id
}

func (e *NotFound) Error() string {
	if e.Several {
		return e.What + " matches several containers: give more of the id"
	}
	return e.What + " matches no container running here"
}

// Resolve finds the containers of a scope. id is a prefix from ParseID,
// pod a uid from ParsePod; exactly one of them is set. A container id
// must name exactly one container; a pod, at least one. The Scope
// returned carries the full id.
func Resolve(fs proc.FS, id, pod string) (Scope, []Member, error) {
	all, err := Containers(fs)
	if err != nil {
		return Scope{}, nil, err
	}
	var hit []Member
	ids := map[string]bool{}
	for _, m := range all {
		if id != "" && m.ID != "" && strings.HasPrefix(m.ID, id) || pod != "" && m.Pod == pod {
			hit = append(hit, m)
			ids[m.ID] = true
		}
	}
	what := "--container " + id
	if pod != "" {
		what = "--pod " + pod
	}
	switch {
	case len(hit) == 0:
		return Scope{}, nil, &NotFound{What: what, Candidates: all}
	case id != "" && len(ids) > 1:
		return Scope{}, nil, &NotFound{What: what, Candidates: hit, Several: true}
	case id != "":
		return Scope{ID: hit[0].ID}, hit, nil
	}
	return Scope{Pod: pod}, hit, nil
}

// Describe is one line per candidate, as a NotFound's refusal lists them.
func Describe(ms []Member, max int) []string {
	var lines []string
	for i, m := range ms {
		if i == max {
			lines = append(lines, fmt.Sprintf("... and %d more: 'freeze census' lists them", len(ms)-max))
			break
		}
		rt := m.Runtime
		if rt == "" {
			rt = "container"
		}
		line := fmt.Sprintf("%s %s (%d processes)", rt, m.ID, len(m.PIDs))
		if m.ID == "" {
			line = fmt.Sprintf("(no container id) (%d processes)", len(m.PIDs))
		}
		if m.Pod != "" {
			line += ", pod " + m.Pod
		}
		lines = append(lines, line)
	}
	return lines
}
