package match

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"freeze/internal/proc"
	"freeze/internal/safedir"
)

// A Target is one executable file, resolved to its device and inode.
type Target struct {
	Path     string // absolute, symlinks resolved
	Given    string // as the operator wrote it
	File     proc.File
	Symlink  bool // Given was a symlink to Path
	Mode     os.FileMode
	Basename string
	// Birth is the file's creation time in nanoseconds (statx btime),
	// 0 where the filesystem does not keep one: with the device and
	// inode it names the file, whose inode number a filesystem reuses
	// after a deletion.
	Birth int64
	// Deleted: the file is gone from Path, and the identity is the one
	// its live processes still run (ResolveDeleted). Nothing can open it
	// by its path.
	Deleted bool
	// ExePID, for a deleted file, is a process that ran it when it was
	// resolved: the gate opens the file through its /proc/PID/exe (a
	// pinned open, checked against File), since no path names it.
	ExePID int
	// View: Path names the file through a process's own view
	// (/proc/PID/exe, /proc/PID/root/PATH), in what may be another mount
	// namespace: open it only with safedir.OpenProcView, never as a
	// path of this host.
	View bool
}

// Sentinels for bad targets: the CLI turns them into usage errors.
var (
	ErrRelative   = errors.New("not an absolute path")
	ErrNotRegular = errors.New("not a regular file")
)

// Resolve checks path and returns its Target. The path must be absolute;
// a symlink is followed (and Symlink set, so the caller can say so).
func Resolve(path string) (Target, error) {
	t := Target{Given: path}
	if !filepath.IsAbs(path) {
		return t, fmt.Errorf("%q: %w", path, ErrRelative)
	}
	if safedir.IsProcView(path) {
		return resolveView(path)
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return t, err
	}
	t.Path, t.Symlink = real, real != filepath.Clean(path)
	st, err := os.Stat(real)
	if err != nil {
		return t, err
	}
	if !st.Mode().IsRegular() {
		return t, fmt.Errorf("%s: %w (it is a %s)", real, ErrNotRegular, kind(st.Mode()))
	}
	t.Mode = st.Mode()
	if t.File, err = proc.StatFile(real); err != nil {
		return t, err
	}
	var stx unix.Statx_t
	if unix.Statx(unix.AT_FDCWD, real, 0, unix.STATX_BTIME|unix.STATX_INO, &stx) == nil && stx.Mask&unix.STATX_BTIME != 0 && stx.Ino == t.File.Ino {
		t.Birth = stx.Btime.Sec*1e9 + int64(stx.Btime.Nsec)
	}
	t.Basename = filepath.Base(real)
	return t, nil
}

// resolveView is Resolve of a file named through a process's own view
// (/proc/PID/exe, /proc/PID/root/PATH): the identity is the file the
// kernel opens there, never the link's text resolved on this host. A
// container's process reads /opt/app/worker in its exe link; resolved
// here, that text named the host's copy of the program, and freeze
// killed the host's processes and left the container's chain (#33).
// Path stays as given (View is set): it names the file only through
// that process, while it lives.
func resolveView(path string) (Target, error) {
	t := Target{Given: path, Path: path, View: true}
	fd, err := safedir.OpenProcView(path)
	if err != nil {
		return t, fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return t, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return t, fmt.Errorf("%s: %w", path, ErrNotRegular)
	}
	t.File = proc.File{Dev: st.Dev, Ino: st.Ino, Nlink: uint64(st.Nlink)}
	t.Mode = os.FileMode(st.Mode & 0o777)
	var stx unix.Statx_t
	if unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_BTIME|unix.STATX_INO, &stx) == nil && stx.Mask&unix.STATX_BTIME != 0 && stx.Ino == st.Ino {
		t.Birth = stx.Btime.Sec*1e9 + int64(stx.Btime.Nsec)
	}
	// The name the process sees, for the rules that go by name and for
	// what freeze says.
	name := path
	if strings.HasSuffix(path, "/exe") {
		if l, err := os.Readlink(path); err == nil {
			name = strings.TrimSuffix(l, " (deleted)")
		}
	}
	t.Basename = filepath.Base(name)
	return t, nil
}

func kind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&os.ModeDevice != 0:
		return "device"
	case m&os.ModeNamedPipe != 0:
		return "named pipe"
	case m&os.ModeSocket != 0:
		return "socket"
	}
	return "special file"
}

// Daemons are executables freeze refuses without --force: stopping one
// takes the machine's own services down with the chain.
var Daemons = []string{
	"init", "systemd", "systemd-journald", "systemd-logind", "systemd-udevd",
	"systemd-networkd", "systemd-resolved", "udevd", "sshd", "dbus-daemon",
	"dbus-broker", "cron", "crond", "rsyslogd", "syslog-ng", "containerd",
	"containerd-shim", "dockerd", "kubelet", "NetworkManager", "polkitd",
	"agetty", "login", "sudo", "su", "chronyd", "ntpd",
}

// Interpreters are executables that run many unrelated programs: freeze
// refuses them without --arg, which narrows the match to one script.
var Interpreters = []string{
	"sh", "bash", "dash", "zsh", "ksh", "mksh", "fish", "csh", "tcsh", "busybox",
	"python", "python2", "python3", "perl", "ruby", "node", "nodejs", "php",
	"lua", "java", "env", "tclsh", "Rscript", "deno", "bun",
}

// A Refusal names the safety rule a target breaks and the way out.
type Refusal struct {
	Rule     string
	Hint     string
	Forcible bool // --force overrides it
}

func (r *Refusal) Error() string { return r.Rule }

// Refuse checks t against the safety rules. hasArg is whether --arg
// narrows the match; force is --force, which overrides every rule but
// "PID 1" and "freeze itself".
func Refuse(p proc.FS, t Target, hasArg, force bool) *Refusal {
	if f, err := p.ExeFile(1); err == nil && f.Dev == t.File.Dev && f.Ino == t.File.Ino {
		return &Refusal{Rule: t.Path + " is the executable of PID 1 (init): stopping it stops the machine", Hint: "no flag overrides this"}
	} else if err != nil && !force {
		// PID 1's executable cannot be read (here even root is refused:
		// PID 1 is in another user namespace's hands). The check does
		// not pass on that: by name, then, which is all that is left
		// (#24, finding 10: it failed open).
		if st, serr := p.ReadStat(1); serr == nil && st.Comm != "" && st.Comm == commOf(t.Basename) {
			return &Refusal{Rule: fmt.Sprintf("%s may be the executable of PID 1: PID 1's own cannot be read (%v), and its name is %q too", t.Path, err, st.Comm),
				Hint: "check with ls -l /proc/1/exe as root that PID 1 runs another file, then add --force", Forcible: true}
		}
	}
	if f, err := p.ExeFile(os.Getpid()); err == nil && f.Dev == t.File.Dev && f.Ino == t.File.Ino {
		return &Refusal{Rule: t.Path + " is the running freeze binary itself", Hint: "no flag overrides this; to practise, run 'freeze drill'"}
	}
	if force {
		return nil
	}
	base := strings.TrimSuffix(t.Basename, ".exe")
	// Daemons by identity (the one judge, judge.go): the system's cron
	// is refused; a user's test binary named cron is that user's chain.
	sys, isSys := SystemFile(t.File)
	if isSys && isDaemon(sys) {
		return &Refusal{Rule: t.Path + " is the system daemon " + sys + " (the very file the system runs)", Hint: "check that this is really the runaway chain, then add --force", Forcible: true}
	}
	// Interpreters by identity, and by name: any python runs every
	// script, the system's or a copy in a virtualenv.
	if isSys && !hasArg && IsInterpreter(sys) {
		base = sys
	}
	if !hasArg && IsInterpreter(base) {
		return &Refusal{Rule: t.Path + " is a shell or interpreter: every script it runs would match", Hint: "add --arg with the script path (for example --arg /path/to/loop.py), or --force to stop every " + base, Forcible: true}
	}
	return nil
}

// IsInterpreter reports whether an executable's base name is a shell or
// interpreter (python3.11 and the like included).
func IsInterpreter(base string) bool {
	for _, i := range Interpreters {
		if base == i {
			return true
		}
		// python3.11, perl5.36, ruby3.1 and the like
		if strings.HasPrefix(base, i) && strings.Trim(base[len(i):], "0123456789.") == "" {
			return true
		}
	}
	return false
}

// commOf is the name the kernel gives a process running a file named
// base: its first 15 bytes (TASK_COMM_LEN - 1).
func commOf(base string) string {
	if len(base) > 15 {
		return base[:15]
	}
	return base
}
