package order

import (
	"os"
	"path/filepath"
	"strings"

	"freeze/internal/match"
)

// DefaultRunDir is a guard's directory, where a request is handed over.
const DefaultRunDir = "/run/freeze"

// RunDirEnv names another default for --run-dir, for every command that
// takes one: a guard and the runs that ask it, moved together (a
// container whose /run is not the host's; a test suite, whose runs must
// never reach a guard of the machine's).
const RunDirEnv = "FREEZE_RUN_DIR"

// RunDir is --run-dir's default: $FREEZE_RUN_DIR where it names an
// absolute path, else DefaultRunDir.
func RunDir() string {
	if d := os.Getenv(RunDirEnv); filepath.IsAbs(d) {
		return filepath.Clean(d)
	}
	return DefaultRunDir
}

// Commands are freeze's subcommands in the order the help lists them,
// "" being freeze itself (the stop order).
var Commands = []string{"", "run", "guard", "census", "drill", "timeline", "runbook", "restore", "node", "version", "help", "completion", "man"}

// usage is the stop order's usage text, freeze's own.
const usage = `Usage:
    freeze --path PATH [--path PATH ...] [options]
    freeze --under DIR [options]
    freeze census [--sample 1s] [--top N] [--format text|json|prometheus]
    freeze drill [--size N] [--shape tree|line|churn]
    freeze runbook [NAME | --list]
    freeze timeline FILE [--format markdown|text|svg|json|jsonl]
    freeze timeline --fleet DIR [--format markdown|json]
    freeze restore --timeline FILE
    freeze guard [--run-dir DIR]
    freeze run [--max-procs N] [--timeout D] -- CMD [ARGS...]
    freeze node [--root DIR] -- FREEZE-ARGS...   (from a container: on the node)
    freeze version | help [CMD] | completion bash|zsh|fish | man

freeze run runs a test suite, a mutation run or an agent's command so
that nothing it starts can outlive it or grow past a cap (see 'freeze
run --help'). The rest of freeze stops a runaway process chain in the
order that works:
  1/4 match      every live process running PATH (the file itself: its
                 device and inode, not its name), and their descendants
  2/4 freeze     where the kernel allows, attach a BPF gate first: from
                 then on no process of the chain can fork or exec (each
                 is stopped at its next try), so the set is fixed at
                 once; else move every match into a cgroup that is
                 already frozen (cgroup v2, else the v1 freezer, else
                 SIGSTOP), repeating until a scan finds none outside
  3/4 kill       kill the now fixed set in rounds until none remain
  4/4 record     confirm zero with two empty scans; the timeline of every
                 step is written as it happens

Options:
    -p, --path PATH          absolute path of the runaway executable
                             (repeatable); a copy at another path is
                             another file and is never touched; a
                             container's: /proc/PID/exe, or
                             /proc/PID/root/PATH (as that process sees it)
    -u, --under DIR          every executable running from under DIR,
                             such as a test cache (repeatable)
    -a, --arg STRING         only processes with an argv element equal to
                             STRING: needed for interpreters (repeatable)
        --container ID       only processes in this container, and --path
                             is a path inside it (ID as 'podman ps',
                             'docker ps' or 'crictl ps' print it: 12 hex
                             characters or all 64); read from cgroups
        --pod UID            only processes in this Kubernetes pod, and
                             --path is found inside each of its
                             containers (kubectl get pod NAME -o
                             jsonpath='{.metadata.uid}')
        --cgroup GROUP       only processes in this cgroup or below it,
                             as /proc/PID/cgroup names it
                             (/system.slice/app.service) or its directory
                             under /sys/fs/cgroup: the chain of one unit
                             or group, not the same file's elsewhere
        --uid UID            only processes of user UID (repeatable): one
                             user's chain, where others run the same file
        --no-descendants     leave say.Out the descendants of matches
    -m, --method METHOD      auto (default: bpf where it loads, else the
                             first of cgroup2, cgroup1, sigstop), bpf,
                             cgroup2, cgroup1 or sigstop; none (with
                             --revoke-exec): kill rounds only
        --no-guard           run here even if a guard is armed (by
                             default a request goes to the running
                             'freeze guard', which is already lifted)
        --run-dir DIR        where to find the guard (default /run/freeze, or
                             $FREEZE_RUN_DIR)
        --btf FILE           kernel BTF the gate loads against (default
                             /sys/kernel/btf/vmlinux); for kernels that
                             ship it apart
        --revoke-exec        before freezing, remove the execute bits of
                             each --path file (and of files under --under
                             that matches run), so no new hop can start;
                             only on a disposable copy: regular, not
                             setuid, one link, under $TMPDIR, /tmp,
                             /var/tmp, ~/.cache, $GOCACHE or --disposable,
                             never under /usr /bin /sbin /lib* /etc /opt
                             /boot. The bits stay off after the run:
                             'freeze restore --timeline FILE' puts them back
        --disposable DIR     another root for --revoke-exec (repeatable)
        --hold               stop after freezing: leave the chain frozen
                             for inspection, print how to finish or thaw
    -n, --dry-run            show what would match and which method would
                             be used here; change nothing
        --rounds N           at most N kill rounds (default 20)
        --timeout DURATION   give up after DURATION (default 60s)
    -t, --timeline FILE      write the timeline here (default
                             /var/tmp/freeze/GROUP-TIME.jsonl)
    -f, --format FORMAT      text (default): progress on stderr; json: also
                             a summary as JSON on stdout
        --json               the same as --format json
        --force              allow targets refused as daemons or bare
                             interpreters (never PID 1 or freeze itself),
                             and --revoke-exec on a file with other links
    -h, --help               this text

Never touched: PID 1, freeze itself, its ancestors, kernel threads.
Refused (exit 3) without --force:
    the system's own daemons, by identity (a file of that name
    elsewhere is not one):
        DAEMONS
    shells and interpreters without --arg: INTERPRETERS
Refused always: the executable of PID 1, the running freeze binary.

Exit codes:
    0   zero remain (or nothing matched, which freeze says)
    1   survivors remain: they are listed with their state
    2   usage: a flag or argument is wrong
    3   refused by a safety rule
    4   interrupted (SIGINT, SIGTERM, SIGHUP) between two steps: what was frozen
        stays frozen; freeze prints how to finish or thaw
    5   a running guard refused the hand-over as busy: nothing was run

Examples:
    freeze --path /home/ci/.cache/go-build/ab/runner.test
    freeze --dry-run --path /tmp/TestX123/cache/tool
    freeze --hold --path /tmp/TestX123/cache/tool     # inspect, then rerun
    freeze --under /tmp/TestX123/cache
    freeze --revoke-exec --path /tmp/TestX123/cache/tool
    freeze restore --timeline /var/tmp/freeze/freeze-tool-1a2b3c4d-20261129T200000Z.jsonl
    freeze --path /usr/bin/python3 --arg /srv/jobs/loop.py
    freeze --container 3f25a1b2c3d4 --path /opt/app/worker   # inside a container
    freeze --pod 1234abcd-0000-1111-2222-333344445555 --path /opt/app/worker
    exec freeze --path /tmp/x/tool    # when the shell cannot fork
    freeze census                      # what holds the machine, and the command
    freeze drill                       # practise on a chain of its own
`

// Usage is the stop order's usage text, with the lists it names.
func Usage() string {
	r := strings.NewReplacer(
		"DAEMONS", wrap(match.Daemons, 8),
		"INTERPRETERS", wrap(match.Interpreters, 8))
	return r.Replace(usage)
}

// wrap lists words, n a line, indented to sit under the heading.
func wrap(words []string, n int) string {
	var b strings.Builder
	for i, w := range words {
		if i > 0 {
			if i%n == 0 {
				b.WriteString(",\n        ")
			} else {
				b.WriteString(", ")
			}
		}
		b.WriteString(w)
	}
	return b.String()
}
