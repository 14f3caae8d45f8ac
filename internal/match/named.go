package match

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/sys/unix"

	"freeze/internal/proc"
)

// Running is an executable that live processes run, and how many.
type Running struct {
	Path    string // as the exe link reads, without " (deleted)"
	Deleted bool   // the file was deleted or replaced since it started
	Count   int
}

// RunningNamed lists the executables whose file name is base that live
// processes run now, most processes first: what an operator who typed a
// bare name (freeze sleep) or a relative path meant. It reads each
// process's exe link and nothing else.
func RunningNamed(fs proc.FS, base string) []Running {
	return runningNamed(fs, base, nil)
}

// LookAlikes lists the executables named as t's file is that live
// processes run, other than t's file itself: the same name from another
// file. A target named through a process's view (a container's file)
// goes by its identity, since its processes' links read another text.
func LookAlikes(fs proc.FS, t Target) []Running {
	return runningNamed(fs, t.Basename, func(pid int, path string) bool {
		if !t.View {
			return path == t.Path
		}
		f, err := fs.ExeFile(pid)
		return err == nil && f.Dev == t.File.Dev && f.Ino == t.File.Ino
	})
}

func runningNamed(fs proc.FS, base string, same func(pid int, path string) bool) []Running {
	pids, err := fs.PIDs(nil)
	if err != nil {
		return nil
	}
	byPath := map[string]*Running{}
	for _, pid := range pids {
		p, deleted, err := fs.ExePath(pid)
		if err != nil || filepath.Base(p) != base || same != nil && same(pid, p) {
			continue
		}
		r := byPath[p]
		if r == nil {
			r = &Running{Path: p, Deleted: deleted}
			byPath[p] = r
		}
		r.Count++
	}
	var out []Running
	for _, r := range byPath {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Path < out[j].Path
	})
	return out
}

// ResolveDeleted is the target for a path whose file was deleted while
// processes still run it (a test cache removed under its chain): the
// identity comes from /proc/PID/exe of the processes whose exe link reads
// "PATH (deleted)", which still names the file. Where processes ran
// several deleted files at that path, the one most of them run is taken;
// others is how many processes run another. An error when none runs.
func ResolveDeleted(fs proc.FS, path string) (t Target, others int, err error) {
	t = Target{Given: path, Path: filepath.Clean(path), Basename: filepath.Base(path), Deleted: true}
	pids, err := fs.PIDs(nil)
	if err != nil {
		return t, 0, err
	}
	count := map[proc.File]int{}
	first := map[proc.File]int{}
	for _, pid := range pids {
		p, deleted, err := fs.ExePath(pid)
		if err != nil || !deleted || p != t.Path {
			continue
		}
		f, err := fs.ExeFile(pid)
		if err != nil {
			continue
		}
		f.Nlink = 0
		if count[f] == 0 {
			first[f] = pid
		}
		count[f]++
	}
	best, total := proc.File{}, 0
	for f, n := range count {
		total += n
		if n > count[best] {
			best = f
		}
	}
	if total == 0 {
		return t, 0, fmt.Errorf("%s: %w, and no live process runs a deleted file of that name", path, os.ErrNotExist)
	}
	exe := fmt.Sprintf("%s/%d/exe", fs.Root, first[best])
	st, err := os.Stat(exe)
	if err != nil {
		return t, 0, err
	}
	t.File, t.Mode, t.ExePID = best, st.Mode(), first[best]
	var stx unix.Statx_t
	if unix.Statx(unix.AT_FDCWD, exe, 0, unix.STATX_BTIME|unix.STATX_INO, &stx) == nil && stx.Mask&unix.STATX_BTIME != 0 && stx.Ino == best.Ino {
		t.Birth = stx.Btime.Sec*1e9 + int64(stx.Btime.Nsec)
	}
	return t, total - count[best], nil
}
