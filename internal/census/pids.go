package census

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"freeze/internal/proc"
)

// CgroupRoots are where pids cgroups are looked for: /sys/fs/cgroup on a
// pure v2 machine; else the v1 pids hierarchy and the unified (v2) one of
// a hybrid machine (not the other v1 controllers, which have no pids.max).
func CgroupRoots() []string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return []string{"/sys/fs/cgroup"}
	}
	return []string{"/sys/fs/cgroup/pids", "/sys/fs/cgroup/unified"}
}

// maxCgroupDepth bounds the walk: the chains a runaway lives in sit a few
// levels below a root (a service, a session, a container).
const maxCgroupDepth = 8

// PidsCgroup is a cgroup with a pids limit, and how much of it is used.
type PidsCgroup struct {
	Path    string `json:"path"`
	Current int    `json:"current"`
	Max     int    `json:"max"`
	// Holds are the census's rows with processes in the group (or below
	// it), most first: "EXE in PLACE: N" (#52: the cap line named the
	// group, and nothing tied it to a suspect).
	Holds []string `json:"holds,omitempty"`
	Ratio float64  `json:"ratio"`
}

// TightestPids walks roots for cgroups whose pids.max is a number, and
// returns the one using the largest share of it (on a tie, the one with
// the least room left), or nil when no cgroup has a limit. A chain
// spinning at its cap shows here at 1.0, while the machine's pid space
// looks calm.
func TightestPids(roots []string) *PidsCgroup {
	var best *PidsCgroup
	seen := map[string]bool{}
	for _, root := range roots {
		real, err := filepath.EvalSymlinks(root)
		if err != nil || seen[real] {
			continue
		}
		seen[real] = true
		filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			rel, _ := filepath.Rel(root, path)
			if rel != "." && strings.Count(rel, "/")+1 > maxCgroupDepth {
				return filepath.SkipDir
			}
			max, ok := readLimit(filepath.Join(path, "pids.max"))
			if !ok || max <= 0 {
				return nil
			}
			cur := readInt(filepath.Join(path, "pids.current"))
			c := &PidsCgroup{Path: path, Current: cur, Max: max, Ratio: float64(cur) / float64(max)}
			if best == nil || c.Ratio > best.Ratio || (c.Ratio == best.Ratio && c.Max-c.Current < best.Max-best.Current) {
				best = c
			}
			return nil
		})
	}
	return best
}

// readLimit reads a pids.max: a number, or "max" (no limit).
func readLimit(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return n, err == nil
}

// tasks is the number of tasks (threads) on the machine, from the fourth
// field of /proc/loadavg ("running/total").
func tasks(fs proc.FS) int {
	b, err := os.ReadFile(fs.Root + "/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 4 {
		return 0
	}
	_, total, ok := strings.Cut(f[3], "/")
	if !ok {
		return 0
	}
	n, _ := strconv.Atoi(total)
	return n
}

// tieToCap names the rows whose processes are in the tightest group when
// it is at or near its cap (nearCap), and marks them.
func tieToCap(t *PidsCgroup, rows []Row, procs map[int]snap) {
	if t == nil || t.Ratio < nearCap {
		return
	}
	in := map[rowKey]int{}
	filepath.WalkDir(t.Path, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		if err != nil {
			return nil
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				if s, ok := procs[pid]; ok {
					in[s.id]++
				}
			}
		}
		return nil
	})
	type held struct {
		what string
		n    int
	}
	var hs []held
	for i := range rows {
		k := rowKey{rows[i].Exe, rows[i].Dev, rows[i].Ino, rows[i].Place()}
		if n := in[k]; n > 0 {
			rows[i].InTightest = true
			what := rows[i].Exe
			if p := rows[i].Place(); !p.Host() {
				what += " in " + p.String()
			}
			hs = append(hs, held{what, n})
		}
	}
	sort.Slice(hs, func(i, j int) bool { return hs[i].n > hs[j].n })
	for _, h := range hs {
		t.Holds = append(t.Holds, fmt.Sprintf("%s: %d", h.what, h.n))
	}
}

// nearCap is the share of its pids.max past which a group is said to be
// near its cap.
const nearCap = 0.9
