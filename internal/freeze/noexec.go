package freeze

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Revoking exec: the incident behind freeze was ended by removing the
// execute bits of the disposable test-cache copies of a binary that
// handed off to itself at every hop. That kills nothing, but no new hop
// can start (execve(2) fails with EACCES), so what runs becomes a fixed
// set. It does nothing against a chain that only forks. It is safe only
// on disposable copies, hence the guard.

// A Revocation is one file's mode change, with what identifies the file.
type Revocation struct {
	Path    string
	Dev     uint64
	Ino     uint64
	Mode    uint32 // permission bits before (with setuid, setgid, sticky)
	NewMode uint32 // after: Mode without any execute bit
	UID     int
	GID     int
	// Ctime is the file's change time, in nanoseconds, right after the
	// revocation. An inode number can be reused by a replacement file;
	// a change time cannot come back, so Restore checks both.
	Ctime int64
}

// A GuardError is a refusal to revoke: the rule broken and the way out.
type GuardError struct {
	Path, Rule, Hint string
}

func (e *GuardError) Error() string { return e.Path + ": " + e.Rule }

// systemRoots are never revoked, even under a disposable root that points
// there.
var systemRoots = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/boot"}

// SystemDir reports whether d (clean, absolute) is the root or lies in
// one of the machine's own program directories: --under there would
// match the machine's own programs.
func SystemDir(d string) bool {
	if d == "/" {
		return true
	}
	for _, s := range systemRoots {
		if d == s || strings.HasPrefix(d, s+"/") {
			return true
		}
	}
	return false
}

// DisposableRoots lists where a disposable test-cache binary may live:
// the temporary directory, the user's cache (Go's build and test cache by
// default), $GOCACHE, and any root the operator names.
func DisposableRoots(extra []string) []string {
	roots := []string{os.Getenv("TMPDIR"), "/tmp", "/var/tmp", os.Getenv("GOCACHE")}
	if x := os.Getenv("XDG_CACHE_HOME"); x != "" {
		roots = append(roots, x)
	} else if h, err := os.UserHomeDir(); err == nil {
		roots = append(roots, filepath.Join(h, ".cache"))
	}
	roots = append(roots, extra...)
	var out []string
	for _, r := range roots {
		if r == "" || !filepath.IsAbs(r) {
			continue
		}
		if real, err := filepath.EvalSymlinks(r); err == nil {
			r = real
		}
		out = append(out, filepath.Clean(r))
	}
	return out
}

func under(path, root string) bool {
	return root == "/" || path == root || strings.HasPrefix(path, root+"/")
}

// CheckRevoke applies the guard to path and returns the revocation it
// would make. It changes nothing. force allows a file with other hard
// links (a mode change hits every link); nothing allows the other rules.
func CheckRevoke(path string, roots []string, force bool) (Revocation, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return Revocation{}, err
	}
	var st unix.Stat_t
	if err := unix.Stat(real, &st); err != nil {
		return Revocation{}, err
	}
	r := Revocation{Path: real, Dev: st.Dev, Ino: st.Ino, Mode: st.Mode & 0o7777, UID: int(st.Uid), GID: int(st.Gid)}
	r.NewMode = r.Mode &^ 0o111
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return r, &GuardError{real, "not a regular file", "revoke exec only on the runaway binary itself"}
	}
	for _, s := range systemRoots {
		if under(real, s) {
			return r, &GuardError{real, "is under " + s + ", where the machine's own programs live", "never revoke a system binary: freeze without --revoke-exec"}
		}
	}
	if st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
		return r, &GuardError{real, "is setuid or setgid", "freeze without --revoke-exec"}
	}
	disposable := false
	for _, root := range roots {
		if under(real, root) {
			disposable = true
			break
		}
	}
	if !disposable {
		return r, &GuardError{real, "is not under a disposable root (" + strings.Join(roots, ", ") + ")", "if it is a disposable test-cache copy, name its root with --disposable DIR"}
	}
	if st.Nlink != 1 && !force {
		return r, &GuardError{real, fmt.Sprintf("has %d hard links: the mode change would hit every one", st.Nlink), "check the other links (find / -xdev -inum " + fmt.Sprint(st.Ino) + "), then add --force"}
	}
	return r, nil
}

// ErrChanged means the file is no longer the one a revocation recorded.
var ErrChanged = errors.New("file changed since it was recorded")

// Revoke removes the execute bits, after checking the file is still the
// one that was checked, and returns r with the change time it then has.
func Revoke(r Revocation) (Revocation, error) {
	if err := same(r, r.Mode); err != nil {
		return r, err
	}
	if err := os.Chmod(r.Path, os.FileMode(r.NewMode&0o777)|modeBits(r.NewMode)); err != nil {
		return r, err
	}
	var st unix.Stat_t
	if err := unix.Lstat(r.Path, &st); err != nil {
		return r, err
	}
	r.Ctime = st.Ctim.Nano()
	return r, nil
}

// Restore puts the recorded mode back, only where the file is still the
// same inode and still has the mode freeze set; otherwise it returns an
// error saying why it left the file alone.
func Restore(r Revocation) error {
	if err := same(r, r.NewMode); err != nil {
		return err
	}
	return os.Chmod(r.Path, os.FileMode(r.Mode&0o777)|modeBits(r.Mode))
}

func same(r Revocation, mode uint32) error {
	var st unix.Stat_t
	if err := unix.Lstat(r.Path, &st); err != nil {
		return fmt.Errorf("%s: %w", r.Path, err)
	}
	if st.Dev != r.Dev || st.Ino != r.Ino {
		return fmt.Errorf("%s is another file now (inode %d, recorded %d): it was replaced: %w", r.Path, st.Ino, r.Ino, ErrChanged)
	}
	if st.Mode&0o7777 != mode {
		return fmt.Errorf("%s has mode %#o, not %#o: someone changed it since: %w", r.Path, st.Mode&0o7777, mode, ErrChanged)
	}
	if mode == r.NewMode && r.Ctime != 0 && st.Ctim.Nano() != r.Ctime {
		return fmt.Errorf("%s changed after freeze revoked it (same inode number, new change time): it was replaced or modified: %w", r.Path, ErrChanged)
	}
	return nil
}

// modeBits maps setuid, setgid and sticky bits to os.FileMode.
func modeBits(m uint32) os.FileMode {
	var fm os.FileMode
	if m&unix.S_ISUID != 0 {
		fm |= os.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		fm |= os.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		fm |= os.ModeSticky
	}
	return fm
}
