package contain

import (
	"fmt"
	"freeze/internal/safedir"
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

// Child is the helper's main: ChildArg [--join FILE]... [--nproc N] --
// CMD [ARGS...]. It returns only on failure, with 126 (cannot join or
// exec) or 127 (no such command), as a shell does.
func Child(args []string) int {
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
		return fail(127, "run: %v", err)
	}
	err = unix.Exec(path, cmd, os.Environ())
	return fail(126, "run: exec %s: %v", path, err)
}

func fail(code int, format string, a ...any) int {
	fmt.Fprintf(os.Stderr, "freeze: error: %s\n", fmt.Sprintf(format, a...))
	return code
}
