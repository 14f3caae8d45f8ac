package freeze

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"freeze/internal/safedir"
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

// underRoots are refused for --under besides systemRoots: where a
// machine keeps its own programs and state (/var, but for /var/tmp, which
// holds test caches), Nix's and snap's stores, and the kernel's views.
var underRoots = []string{"/var", "/nix", "/snap", "/proc", "/sys", "/dev", "/run"}

// SystemDir reports whether d (clean, absolute, symlinks resolved: the
// caller resolves it) is the root or lies in one of the machine's own
// program or state directories: --under there would match the machine's
// own programs.
func SystemDir(d string) bool {
	if d == "/" {
		return true
	}
	for _, s := range systemRoots {
		if under(d, s) {
			return true
		}
	}
	if d != "/var/tmp" && under(d, "/var/tmp") {
		return false
	}
	for _, s := range underRoots {
		if under(d, s) {
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

// ErrUntrusted means a restore record asks for what freeze never does:
// it was not written by a revocation of freeze's, or was altered.
var ErrUntrusted = errors.New("not a revocation freeze would have made")

// The owner of a test cache owns its files and directories: between a
// check and a change, a path can be swapped for a symlink to any file,
// or for another file. So a revocation and a restore each open the file
// once, following no symlink anywhere in the path (openat2(2),
// RESOLVE_NO_SYMLINKS), check what they opened with fstat, and change
// the mode of that inode through the descriptor: never by the path again.

// Revoke removes the execute bits, after checking the file is still the
// one that was checked, and returns r with the change time it then has.
func Revoke(r Revocation) (Revocation, error) {
	// The inode CheckRevoke checked (its links: CheckRevoke, --force).
	fd, _, err := openChecked(r, r.Mode)
	if err != nil {
		return r, err
	}
	defer unix.Close(fd)
	if err := fchmod(fd, r.NewMode); err != nil {
		return r, fmt.Errorf("chmod %s: %w", r.Path, err)
	}
	var after unix.Stat_t
	if err := unix.Fstat(fd, &after); err != nil {
		return r, err
	}
	r.Ctime = after.Ctim.Nano()
	return r, nil
}

// Restore puts the recorded mode back, only where the record is one a
// revocation of freeze's makes (CheckRevoke's rules, a mode that differs
// from the new one by execute bits only, no setuid or setgid, a change
// time) and the file is still that inode, with that owner, the mode
// freeze set and no change since; otherwise it returns an error saying
// why it left the file alone.
func Restore(r Revocation) error {
	if err := plausible(r); err != nil {
		return err
	}
	fd, st, err := openChecked(r, r.NewMode)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if st.Nlink != 1 {
		return fmt.Errorf("%s has %d hard links: restore its mode by hand if it is yours: %w", r.Path, st.Nlink, ErrUntrusted)
	}
	if st.Ctim.Nano() != r.Ctime {
		return fmt.Errorf("%s changed after freeze revoked it (same inode number, new change time): it was replaced or modified: %w", r.Path, ErrChanged)
	}
	return fchmod(fd, r.Mode)
}

// plausible checks a restore record against what Revoke writes.
func plausible(r Revocation) error {
	switch {
	case !filepath.IsAbs(r.Path) || filepath.Clean(r.Path) != r.Path:
		return fmt.Errorf("%q is not a clean absolute path: %w", r.Path, ErrUntrusted)
	case r.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 || r.NewMode&(unix.S_ISUID|unix.S_ISGID) != 0:
		return fmt.Errorf("%s: the record asks for setuid or setgid (mode %#o): %w", r.Path, r.Mode, ErrUntrusted)
	case r.Mode&^0o7777 != 0 || r.NewMode != r.Mode&^0o111 || r.Mode&0o111 == 0:
		return fmt.Errorf("%s: the record's modes %#o and %#o do not differ by execute bits alone: %w", r.Path, r.Mode, r.NewMode, ErrUntrusted)
	case r.Ctime == 0:
		return fmt.Errorf("%s: the record has no change time: %w", r.Path, ErrUntrusted)
	}
	for _, s := range systemRoots {
		if under(r.Path, s) {
			return fmt.Errorf("%s is under %s, which freeze never revokes: %w", r.Path, s, ErrUntrusted)
		}
	}
	return nil
}

// openChecked opens r.Path as a descriptor (O_PATH, no symlink in any
// component) and checks by fstat that it is the recorded regular file:
// device, inode, owner, group and mode.
func openChecked(r Revocation, mode uint32) (int, unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := openNoSymlinks(r.Path)
	if err != nil {
		return -1, st, err
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, st, fmt.Errorf("%s: %w", r.Path, err)
	}
	var why string
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		why = "is not a regular file now"
	case st.Dev != r.Dev || st.Ino != r.Ino:
		why = fmt.Sprintf("is another file now (inode %d, recorded %d): it was replaced", st.Ino, r.Ino)
	case int(st.Uid) != r.UID || int(st.Gid) != r.GID:
		why = fmt.Sprintf("belongs to %d:%d now, recorded %d:%d", st.Uid, st.Gid, r.UID, r.GID)
	case st.Mode&0o7777 != mode:
		why = fmt.Sprintf("has mode %#o, not %#o: someone changed it since", st.Mode&0o7777, mode)
	}
	if why != "" {
		unix.Close(fd)
		return -1, st, fmt.Errorf("%s %s: %w", r.Path, why, ErrChanged)
	}
	return fd, st, nil
}

// openNoSymlinks opens path O_PATH with no symlink in any component
// (safedir.OpenNoSymlinks), saying so when one was there.
func openNoSymlinks(path string) (int, error) {
	fd, err := safedir.OpenNoSymlinks(path)
	if errors.Is(err, unix.ELOOP) {
		return -1, fmt.Errorf("%s: a symbolic link in the path; freeze acts only on the file it resolved: %w", path, ErrChanged)
	}
	if err != nil {
		return -1, fmt.Errorf("%s: %w", path, err)
	}
	return fd, nil
}

// fchmod sets the mode of the inode fd holds. An O_PATH descriptor takes
// no fchmod(2); a chmod of its /proc/self/fd link reaches the inode the
// descriptor holds (proc(5)), not a path looked up again.
func fchmod(fd int, mode uint32) error {
	return unix.Fchmodat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), mode, 0)
}
