package contain

import (
	"errors"
	"fmt"
	"freeze/internal/safedir"
	"io/fs"
	"os"
	"os/exec"
	"strconv"

	"golang.org/x/sys/unix"
)

// ChildArg is the hidden subcommand that freeze run starts CMD through:
// freeze itself, which joins the cap's groups and sets the rlimit, then
// execs CMD. A v1 group cannot be cloned into (CLONE_INTO_CGROUP is v2
// only), so the child must join before its exec; nothing of CMD runs
// before it has. package early leaves this subcommand unlifted.
const ChildArg = "__run-child"

// startFD is the helper's descriptor for why CMD did not start: freeze
// run reads it to its end, which comes at the exec (it is close-on-exec)
// or at the helper's exit after it wrote why. A command that ran and
// exited 127 is then never read as one that never started.
const startFD = 3

// Child is the helper's main: ChildArg [--join FILE]... [--nproc N] --
// CMD [ARGS...]. It returns only on failure, with 126 (cannot join or
// exec) or 127 (no such command), as a shell does, after it wrote why to
// startFD.
func Child(args []string) int {
	unix.CloseOnExec(startFD)
	var join []string
	nproc := 0
	for len(args) > 0 && args[0] != "--" {
		if len(args) < 2 {
			return fail(126, "run: %s: %q needs a value", ChildArg, args[0])
		}
		switch args[0] {
		case "--join":
			join = append(join, args[1])
		case "--nproc":
			n, err := strconv.Atoi(args[1])
			if err != nil {
				return fail(126, "run: %s: --nproc %q", ChildArg, args[1])
			}
			nproc = n
		default:
			return fail(126, "run: %s: unknown %q", ChildArg, args[0])
		}
		args = args[2:]
	}
	if len(args) < 2 {
		return fail(126, "run: %s: no command", ChildArg)
	}
	cmd := args[1:]
	for _, f := range join {
		// "0" is the writer itself: the whole process, every thread.
		if err := safedir.Knob(f, "0"); err != nil {
			return fail(126, "run: joining %s: %v; CMD was not run", f, err)
		}
	}
	if nproc > 0 {
		lim := unix.Rlimit{Cur: uint64(nproc), Max: uint64(nproc)}
		if err := unix.Setrlimit(unix.RLIMIT_NPROC, &lim); err != nil {
			return fail(126, "run: RLIMIT_NPROC: %v; CMD was not run", err)
		}
	}
	path, err := exec.LookPath(cmd[0])
	if err != nil {
		// As a shell: 127 for a command not found, 126 for one found
		// that cannot run (not executable, a directory).
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return fail(127, "run: %v", err)
		}
		return fail(126, "run: %v", err)
	}
	err = unix.Exec(path, cmd, os.Environ())
	code := 126
	if errors.Is(err, unix.ENOENT) {
		code = 127 // a script whose interpreter is missing, as bash says
	}
	return fail(code, "run: exec %s: %v", path, err)
}

func fail(code int, format string, a ...any) int {
	msg := fmt.Sprintf(format, a...)
	fmt.Fprintf(os.Stderr, "freeze: error: %s\n", msg)
	unix.Write(startFD, []byte(msg))
	return code
}
