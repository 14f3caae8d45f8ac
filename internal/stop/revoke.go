package stop

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/freeze"
	"freeze/internal/match"
	"freeze/internal/proc"
	"freeze/internal/safedir"
	"freeze/internal/timeline"
)

// checkRevocations applies the guard to every file to revoke: the targets,
// and the files under --under directories that matches run. It changes
// nothing. Each is revoked only as the identity that was matched: a
// target's file as match resolved it, an --under file as its processes'
// own /proc/PID/exe. CheckRevoke resolves the path again, and the chain's
// owner can swap a directory of the path for a symlink in between (the
// audit's RENAME_EXCHANGE loop made root revoke a root file nobody
// named): a file that resolves to another identity is refused, and so is
// one whose owner is neither root nor the owner of a process of the
// chain that runs it.
func checkRevocations(c Config, res match.Result) ([]freeze.Revocation, []error) {
	type file struct {
		path string
		want proc.File
	}
	var files []file
	seen := map[string]bool{}
	add := func(p string, want proc.File) {
		if p != "" && !seen[p] {
			seen[p] = true
			files = append(files, file{p, want})
		}
	}
	var refused []error
	for _, t := range c.Spec.Targets {
		if t.View {
			// Its path text is another mount namespace's: the file is
			// reachable only through the process, and a chmod there
			// changes a container's image layer, not a test cache.
			refused = append(refused, &freeze.GuardError{Path: t.Path, Rule: "names a file through a process's own view (another mount namespace, a container's)",
				Hint: "freeze without --revoke-exec; the container's own runtime can remove the binary"})
			continue
		}
		add(t.Path, t.File)
	}
	owners := ownersOf(c.FS, res, add)
	roots := freeze.DisposableRoots(c.Disposable)
	var revs []freeze.Revocation
	for _, f := range files {
		r, err := freeze.CheckRevoke(f.path, roots, c.Force)
		if err == nil {
			err = sameFile(r, f.want, owners[[2]uint64{r.Dev, r.Ino}])
		}
		if err != nil {
			refused = append(refused, err)
			continue
		}
		revs = append(revs, r)
	}
	return revs, refused
}

// ownersOf lists the uids that run each file the scan matched by path
// or --under (a chain has one owner, or a few: at most 8 are kept), and
// adds each --under file to the revocations' candidates.
func ownersOf(fs proc.FS, res match.Result, add func(string, proc.File)) map[[2]uint64]map[int]bool {
	owners := map[[2]uint64]map[int]bool{} // identity -> uids running it
	for _, p := range res.Procs {
		if p.Reason != match.ByPath && p.Reason != match.ByUnder {
			continue
		}
		f, err := fs.ExeFile(p.PID)
		if err != nil {
			continue
		}
		id := [2]uint64{f.Dev, f.Ino}
		if owners[id] == nil {
			owners[id] = map[int]bool{}
		}
		if len(owners[id]) < 8 {
			if uid, err := fs.UID(p.PID); err == nil {
				owners[id][uid] = true
			}
		}
		if p.Reason == match.ByUnder {
			add(p.Exe, f)
		}
	}
	return owners
}

// sameFile refuses a revocation of anything but the file that was
// matched, of a file no process of the chain runs (the third audit's S3:
// with 0 processes matched, a path swapped through a user's symlink had
// root revoke a root file under /tmp that nothing ran), and of a file
// neither root nor the chain's owner owns.
func sameFile(r freeze.Revocation, want proc.File, uids map[int]bool) error {
	if r.Dev != want.Dev || r.Ino != want.Ino {
		return &freeze.GuardError{Path: r.Path, Rule: fmt.Sprintf("is not the file that was matched (now device %d inode %d, matched device %d inode %d): its path changed between the match and the revocation", r.Dev, r.Ino, want.Dev, want.Ino),
			Hint: "a directory of the path was replaced (by its owner?): freeze without --revoke-exec, and look at who can write that path"}
	}
	if len(uids) == 0 {
		return &freeze.GuardError{Path: r.Path, Rule: "is run by no process of the chain: --revoke-exec acts only on a file the chain runs",
			Hint: "nothing to stop from starting: freeze without --revoke-exec"}
	}
	if r.UID != 0 && !uids[r.UID] {
		return &freeze.GuardError{Path: r.Path, Rule: fmt.Sprintf("belongs to uid %d, who runs no process of the chain", r.UID),
			Hint: "revoke only the chain's own binary: freeze without --revoke-exec"}
	}
	return nil
}

// revFields records a revocation, with all that Revocations needs to put
// the mode back.
func revFields(r freeze.Revocation) timeline.Revoked {
	return timeline.Revoked{Path: r.Path, Dev: r.Dev, Ino: r.Ino, Mode: fmt.Sprintf("%#o", r.Mode),
		NewMode: fmt.Sprintf("%#o", r.NewMode), UID: r.UID, GID: r.GID, CtimeNS: strconv.FormatInt(r.Ctime, 10)}
}

// Revocations reads the revocations a run recorded in its timeline. A
// record that lacks what restore needs to check the file is an error:
// restore acts on nothing it cannot check.
func Revocations(events []timeline.Event) ([]freeze.Revocation, error) {
	var out []freeze.Revocation
	for i, e := range events {
		if e.Step != timeline.StepRevoke {
			continue
		}
		var v timeline.Revoked
		err := e.Decode(&v)
		m, err1 := strconv.ParseUint(v.Mode, 0, 32)
		nm, err2 := strconv.ParseUint(v.NewMode, 0, 32)
		if err != nil || v.Path == "" || v.Ino == 0 || err1 != nil || err2 != nil {
			return out, fmt.Errorf("event %d (revoke): incomplete record", i+1)
		}
		r := freeze.Revocation{Path: v.Path, Dev: v.Dev, Ino: v.Ino, Mode: uint32(m), NewMode: uint32(nm), UID: v.UID, GID: v.GID}
		r.Ctime, _ = strconv.ParseInt(v.CtimeNS, 10, 64)
		out = append(out, r)
	}
	return out, nil
}

// earlierScanned bounds how many of the newest timelines a rerun reads
// for the mode an earlier run revoked.
const earlierScanned = 200

// earlier finds the revocation an earlier run of freeze made of the file
// v names, where exec is off already (a rerun after a crash, or after
// --hold): the newest record, in a trusted timeline of this run's
// directory or the state directory, of that inode with the mode it has
// now and its change time unchanged since (so nothing touched the file
// after that run). Its original mode is what a restore must put back;
// the rerun's own check saw only the revoked one.
func (r *run) earlier(v freeze.Revocation) (freeze.Revocation, string, bool) {
	var st unix.Stat_t
	if unix.Stat(v.Path, &st) != nil || st.Dev != v.Dev || st.Ino != v.Ino {
		return freeze.Revocation{}, "", false
	}
	var dirs []string
	if p := r.rec.Path(); p != "" {
		dirs = append(dirs, filepath.Dir(p))
	}
	if d := timeline.StateDir(); !slices.Contains(dirs, d) {
		dirs = append(dirs, d)
	}
	type file struct {
		path string
		mod  time.Time
	}
	var files []file
	for _, d := range dirs {
		if safedir.Check(d) != nil {
			continue // a directory someone else can write: its records prove nothing
		}
		paths, _ := filepath.Glob(filepath.Join(d, "*.jsonl"))
		for _, p := range paths {
			if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() && p != r.rec.Path() {
				files = append(files, file{p, fi.ModTime()})
			}
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].mod.After(files[j].mod) })
	for _, f := range files[:min(len(files), earlierScanned)] {
		events, err := timeline.ReadTrusted(f.path, os.Geteuid())
		if err != nil {
			continue
		}
		revs, _ := Revocations(events)
		for i := len(revs) - 1; i >= 0; i-- {
			e := revs[i]
			if e.Dev == v.Dev && e.Ino == v.Ino && e.NewMode == v.Mode && e.Ctime == st.Ctim.Nano() && e.UID == v.UID && e.GID == v.GID {
				return e, f.path, true
			}
		}
	}
	return freeze.Revocation{}, "", false
}

// runByChain reports whether a process the scan matched by path or
// --under still runs v's file, as the same process (pid and start
// time): revoke checks it just before the chmod and just after, so the
// chmod lands only on a file the chain runs at that moment.
func runByChain(fs proc.FS, res match.Result, v freeze.Revocation) bool {
	for _, p := range res.Procs {
		if p.Reason != match.ByPath && p.Reason != match.ByUnder {
			continue
		}
		f, err := fs.ExeFile(p.PID)
		if err != nil || f.Dev != v.Dev || f.Ino != v.Ino {
			continue
		}
		if st, err := fs.ReadStat(p.PID); err == nil && st.Start == p.ID.Start {
			return true
		}
	}
	return false
}
