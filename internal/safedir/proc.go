package safedir

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// procView matches a path that names a file as another process sees it:
// /proc/PID/exe (the file it runs) and /proc/PID/root/REST (REST inside
// its root, which is a container's root for a container's process).
var procView = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^/proc/([1-9][0-9]*)/(exe|root)(/.*)?$`) })

// IsProcView reports whether path names a file through a process's own
// view (/proc/PID/exe, /proc/PID/root/...): its text is not a path of
// this mount namespace, and must never be resolved as one.
func IsProcView(path string) bool {
	m := procView().FindStringSubmatch(path)
	return m != nil && (m[2] == "root" || m[3] == "")
}

// OpenProcView opens, O_PATH, the file path names through a process's
// own view, as the kernel holds it:
//   - /proc/PID/exe: the magic link opened, which is the very file the
//     process runs (in its own mount namespace; the link's text names a
//     path there, and resolved here it names another file: a container's
//     /opt/app/worker and the host's);
//   - /proc/PID/root/REST: REST resolved beneath the process's root with
//     openat2(RESOLVE_IN_ROOT), so that its symlinks, absolute ones too,
//     stay inside that root, never reaching this host's /.
//
// The process is pinned while its view is opened: a pidfd of it is
// taken first, and the open counts only if the pidfd's process still
// lives after it, so the view is that process's, never that of another
// that got its pid meanwhile (the third audit: /proc/PID/root was opened
// by a pid number read earlier). The caller, who knows which container
// the process was in, checks that again after the open.
//
// The caller fstats the descriptor and acts on it, never on the text.
func OpenProcView(path string) (int, error) {
	m := procView().FindStringSubmatch(path)
	if m == nil || (m[2] == "exe" && m[3] != "") {
		return -1, fmt.Errorf("%s is not /proc/PID/exe or /proc/PID/root/PATH", path)
	}
	pid, _ := strconv.Atoi(m[1])
	pin, err := unix.PidfdOpen(pid, 0)
	if err != nil && !errors.Is(err, unix.ENOSYS) {
		return -1, &os.PathError{Op: "pidfd_open", Path: path, Err: err}
	}
	if err == nil {
		defer unix.Close(pin)
	} else {
		pin = -1 // before 5.3: the pid alone, as before
	}
	fd, err := openView(m)
	if err != nil {
		return -1, err
	}
	if pin >= 0 {
		// Signal 0 checks only that the process lives: EPERM (another
		// user's, for a non-root caller) says it does.
		if err := unix.PidfdSendSignal(pin, 0, nil, 0); errors.Is(err, unix.ESRCH) {
			unix.Close(fd)
			return -1, &os.PathError{Op: "open", Path: path, Err: fmt.Errorf("process %d ended while its view was opened: %w", pid, unix.ESRCH)}
		}
	}
	return fd, nil
}

func openView(m []string) (int, error) {
	if m[2] == "exe" {
		return unix.Open("/proc/"+m[1]+"/exe", unix.O_PATH|unix.O_CLOEXEC, 0)
	}
	root, err := unix.Open("/proc/"+m[1]+"/root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(root)
	rest := strings.TrimPrefix(m[3], "/")
	if rest == "" {
		rest = "."
	}
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	return unix.Openat2(root, rest, &how)
}
