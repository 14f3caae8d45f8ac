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
//
// One stat of each process's exe settles it: a file with links left is
// not deleted, and a deleted file's link is read until one of its
// processes names path, not for every process (#51: reading every link,
// then stat'ing each match, took 30 ms for a chain of 3,000, warm). A file that still has
// another link (a hard link) but whose exec'd name was removed reads
// "(deleted)" too: where no unlinked file is found, every link is read.
func ResolveDeleted(fs proc.FS, path string) (t Target, others int, err error) {
	return ResolveDeletedFrom(fs, nil, path)
}

// ResolveDeletedFrom is ResolveDeleted with the processes and their
// executables' identities listed by tasks (the guard's spare gate: one
// pass of its task iterator) where tasks is set and answers, and /proc
// read as ResolveDeleted reads it where not. The stat of every process's
// exe was the start-up of a replaced binary's run from the guard: 31 ms
// before its first event for a chain of 3,000, where other shapes took 4.
// Only the deleted file's first process is read through /proc (its
// link's text, and a stat for the identity the match compares).
func ResolveDeletedFrom(fs proc.FS, tasks TaskSource, path string) (t Target, others int, err error) {
	t = Target{Given: path, Path: filepath.Clean(path), Basename: filepath.Base(path), Deleted: true}
	var pids []int
	var count, first map[proc.File]int
	if tasks != nil {
		if ts, terr := tasks(nil); terr == nil {
			for _, task := range ts {
				pids = append(pids, task.PID)
			}
			count, first = deletedByRecord(fs, ts, t.Path)
		}
	}
	if pids == nil {
		if pids, err = fs.PIDs(nil); err != nil {
			return t, 0, fmt.Errorf("%s: listing the processes that may run it: %v", path, err)
		}
		count, first = deletedByFile(fs, pids, t.Path)
	}
	if len(count) == 0 {
		count, first = deletedByLink(fs, pids, t.Path)
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
	// The identity stat(2) gives, which the match compares: a record's
	// device is the kernel's, another on btrfs subvolumes and overlays.
	// A process gone since it was counted is not "no process runs it"
	// (fs.ErrNotExist, which the order says so): its error says to run
	// freeze again, and wraps nothing.
	f, err := fs.ExeFile(first[best])
	if err != nil {
		return t, 0, fmt.Errorf("%s: process %d, which ran it, exited while freeze read it (%v); run freeze again", path, first[best], err)
	}
	if f.Ino != best.Ino {
		return t, 0, fmt.Errorf("%s: process %d, which ran it, is gone and its pid taken again; run freeze again", path, first[best])
	}
	exe := fmt.Sprintf("%s/%d/exe", fs.Root, first[best])
	st, err := os.Stat(exe)
	if err != nil {
		return t, 0, fmt.Errorf("%s: process %d, which ran it, exited while freeze read it (%v); run freeze again", path, first[best], err)
	}
	t.File, t.Mode, t.ExePID = f, st.Mode(), first[best]
	var stx unix.Statx_t
	if unix.Statx(unix.AT_FDCWD, exe, 0, unix.STATX_BTIME|unix.STATX_INO, &stx) == nil && stx.Mask&unix.STATX_BTIME != 0 && stx.Ino == best.Ino {
		t.Birth = stx.Btime.Sec*1e9 + int64(stx.Btime.Nsec)
	}
	return t, total - count[best], nil
}

// deletedByRecord is deletedByFile on the task iterator's records: the
// identity and link count come with each record, so only the first
// process of each unlinked file is read through /proc (its link's text).
func deletedByRecord(fs proc.FS, ts []proc.Task, path string) (count map[proc.File]int, first map[proc.File]int) {
	count, first = map[proc.File]int{}, map[proc.File]int{}
	for _, task := range ts {
		f := task.Exe
		if !task.HasExe || f.Nlink != 0 {
			continue
		}
		if count[f] == 0 {
			p, deleted, err := fs.ExePath(task.PID)
			if err != nil || !deleted || p != path {
				continue // gone, or another name: the file's next process is read
			}
			first[f] = task.PID
		}
		count[f]++
	}
	return count, first
}

// deletedByFile counts the processes of each unlinked file whose exe
// link names path, with the first process of each: a stat of every
// process's exe, and a read of the link until one names path, then no
// more for that file. A file is known by its identity, as the match
// knows it: one exec'd through two names of it that were both removed
// is one file, whichever name a process shows.
func deletedByFile(fs proc.FS, pids []int, path string) (count map[proc.File]int, first map[proc.File]int) {
	count, first = map[proc.File]int{}, map[proc.File]int{}
	for _, pid := range pids {
		f, err := fs.ExeFile(pid)
		if err != nil || f.Nlink != 0 {
			continue
		}
		if count[f] == 0 {
			p, deleted, err := fs.ExePath(pid)
			if err != nil || !deleted || p != path {
				continue // gone, or another name: the file's next process is read
			}
			first[f] = pid
		}
		count[f]++
	}
	return count, first
}

// deletedByLink is deletedByFile for a file that kept a link: every
// process's exe link is read, and each that names path is stat'ed.
func deletedByLink(fs proc.FS, pids []int, path string) (count map[proc.File]int, first map[proc.File]int) {
	count, first = map[proc.File]int{}, map[proc.File]int{}
	for _, pid := range pids {
		p, deleted, err := fs.ExePath(pid)
		if err != nil || !deleted || p != path {
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
	return count, first
}
