package census

import (
	"io/fs"
	"os"
	"path/filepath"
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
	Path    string  `json:"path"`
	Current int     `json:"current"`
	Max     int     `json:"max"`
	Ratio   float64 `json:"ratio"`
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
