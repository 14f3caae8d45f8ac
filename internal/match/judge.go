package match

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/proc"
)

// The one judge: the files freeze refuses by what they are. The stop
// order (Refuse) and the guard's automatic judge both ask it, so a chain
// the judge would act on is never refused by the order, and the other
// way round. Before, the order refused by name and the judge by
// identity: a user's /tmp/.../bin/cron chain was judged worth holding,
// and the order it queued was refused as "a system daemon (cron)", 40
// times in 8 s, and never held (the third audit's S6).

// systemBins are where a system keeps its daemons and interpreters.
var systemBins = []string{"/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/local/sbin", "/usr/local/bin", "/usr/lib/systemd", "/lib/systemd"}

type fileKey struct{ dev, ino uint64 }

// systemTable is the identities of the system's daemons and
// interpreters, read from its program directories and read again when
// one of them changed: a guard reads it when armed and may live for
// months, and a package upgrade renames a new file over a daemon's name,
// which the table read before would not know (the upgraded cron judged a
// user's chain). A directory changed in the second before a read may
// change again with the same time (the clock a file system stamps with
// is coarse): then the next look reads it again, as git does with a
// racily clean index.
type systemTable struct {
	mu     sync.Mutex
	dirs   []string
	stamps []dirStamp
	racy   bool
	byFile map[fileKey]string // replaced whole, never changed: read without mu
}

// dirStamp is what changes when a directory's entries change.
type dirStamp struct {
	dev, ino     uint64
	mtime, ctime int64 // ns
}

var system = &systemTable{dirs: systemBins}

// load returns the table, read again if a directory changed since.
func (s *systemTable) load() map[fileKey]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now().UnixNano()
	st, newest := stampsOf(s.dirs)
	if s.byFile == nil || s.racy || !slices.Equal(st, s.stamps) {
		s.byFile, s.stamps = systemIdentities(s.dirs), st
		// Within a second either way: a directory stamped ahead of
		// the clock (a skewed clock at install, a touch) is changed
		// next with the time then, so it is not racy, and is not read
		// again at every look.
		s.racy = now-newest < int64(time.Second) && newest-now < int64(time.Second)
	}
	return s.byFile
}

func stampsOf(dirs []string) (st []dirStamp, newest int64) {
	for _, d := range dirs {
		var x unix.Stat_t
		if unix.Stat(d, &x) != nil {
			st = append(st, dirStamp{})
			continue
		}
		s := dirStamp{dev: x.Dev, ino: x.Ino, mtime: x.Mtim.Nano(), ctime: x.Ctim.Nano()}
		newest = max(newest, s.mtime) // what an entry's change sets
		st = append(st, s)
	}
	return st, newest
}

// SystemFile names the system daemon or interpreter that f is, by
// identity (device and inode): one of Daemons or Interpreters (or a
// versioned name, python3.11) installed in the system's program
// directories, read again whenever one of them changed. A file elsewhere
// that happens to have such a name is not one.
func SystemFile(f proc.File) (string, bool) {
	name, ok := system.load()[fileKey{f.Dev, f.Ino}]
	return name, ok
}

// LoadSystem reads the system's program directories now, where
// SystemFile would at its first call: an armed guard reads them before
// its first request, which is the incident's (its start-up was 4.8-6.1
// ms against 1.1-1.6 for the requests after it, on an idle machine).
// Later calls cost a stat of each directory.
func LoadSystem() { system.load() }

// SystemLoaded reports whether the system's program directories were
// read already.
func SystemLoaded() bool {
	system.mu.Lock()
	defer system.mu.Unlock()
	return system.byFile != nil
}

func systemIdentities(dirs []string) map[fileKey]string {
	out := map[fileKey]string{}
	for _, d := range dirs {
		ents, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range ents {
			name := e.Name()
			if !IsInterpreter(name) && !slices.Contains(Daemons, name) {
				continue
			}
			if f, err := proc.StatFile(filepath.Join(d, name)); err == nil {
				if _, seen := out[fileKey{f.Dev, f.Ino}]; !seen {
					out[fileKey{f.Dev, f.Ino}] = name
				}
			}
		}
	}
	return out
}

// isDaemon says whether the system's file name is one of Daemons.
func isDaemon(name string) bool {
	return slices.Contains(Daemons, strings.TrimSuffix(name, ".exe"))
}
