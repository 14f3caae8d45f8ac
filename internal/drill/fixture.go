package drill

import (
	"os"
	"os/exec"
	"os/signal"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
)

// FixtureArg is the hidden first argument that makes the freeze binary
// act as the drill's runaway chain. The drill runs a copy of the binary
// from its own test cache, so the chain's exact path is unique to it.
const FixtureArg = "__chain"

// Fixture exit codes: distinct from freeze's own.
const (
	exitHopCap   = 42
	exitExecFail = 43
	exitGate     = 44
	exitNoCap    = 45
)

// uncapped says why this process runs under no process-count cap the
// kernel enforces, or "": a pids cgroup (its own or an ancestor's, v1 or
// v2) whose pids.max is a number, or, not as root, a finite RLIMIT_NPROC.
func uncapped() string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return err.Error()
	}
	var lim unix.Rlimit
	finite := unix.Getrlimit(unix.RLIMIT_NPROC, &lim) == nil && lim.Cur != unix.RLIM_INFINITY
	return uncappedAt(b, "/sys/fs/cgroup", os.Geteuid() != 0 && finite)
}

// uncappedAt is uncapped on a /proc/self/cgroup's text and a cgroup root
// (a fixture tree in the tests); nproc is whether RLIMIT_NPROC binds.
func uncappedAt(cgroup []byte, sys string, nproc bool) string {
	for _, l := range strings.Split(strings.TrimSpace(string(cgroup)), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		var roots []string
		switch {
		case slices.Contains(strings.Split(f[1], ","), "pids"):
			roots = []string{sys + "/pids"}
		case f[0] == "0" && f[1] == "":
			roots = []string{sys, sys + "/unified"}
		}
		for _, root := range roots {
			for d := path.Join(root, f[2]); strings.HasPrefix(d, root) && d != root; d = path.Dir(d) {
				if m, err := os.ReadFile(d + "/pids.max"); err == nil && strings.TrimSpace(string(m)) != "max" {
					return ""
				}
			}
		}
	}
	if nproc {
		return ""
	}
	return "no pids cgroup with a pids.max holds it, and RLIMIT_NPROC does not bind it"
}

// RunFixture is one process of the drill's chain. Each hop execs this
// binary again (a Go program cannot fork without exec), so the chain
// hands off the way a test runner that re-runs itself does. It obeys a
// hop cap and a deadline of its own, whatever the drill does.
func RunFixture(args []string) int {
	fl := pflag.NewFlagSet(FixtureArg, pflag.ContinueOnError)
	shape := fl.String("shape", "tree", "")
	hop := fl.Int("hop", 0, "")
	hopCap := fl.Int("hop-cap", 1000, "")
	deadline := fl.Int64("deadline", 0, "")
	interval := fl.Duration("interval", 200*time.Millisecond, "")
	gate := fl.Bool("gate", false, "")
	if fl.Parse(args) != nil {
		return 2
	}
	self, err := os.Executable()
	if err != nil {
		return exitExecFail
	}
	if *gate {
		var b [1]byte
		if n, _ := os.Stdin.Read(b[:]); n != 1 {
			return exitGate // the drill gave up: start nothing
		}
	}
	// After the gate: the drill puts the gated leader under its cap, then
	// opens the gate.
	if why := uncapped(); why != "" {
		// Run by hand, the fixture would be a runaway chain with nothing
		// to stop it (the first audit): it starts only under a cap.
		os.Stderr.WriteString("freeze: error: " + FixtureArg + " is the drill's runaway chain, and runs only under a kernel-enforced process cap: " + why + "\nfreeze: hint: run 'freeze drill', which starts it capped\n")
		return exitNoCap
	}

	if *deadline > 0 {
		left := time.Until(time.Unix(*deadline, 0))
		if left <= 0 {
			return 0
		}
		time.AfterFunc(left, func() { os.Exit(0) })
	}
	h := hopper{self: self, shape: *shape, hopCap: *hopCap, deadline: *deadline, interval: *interval}
	return h.run(*hop)
}

// hopper starts the fixture's next hops.
type hopper struct {
	self, shape string
	hopCap      int
	deadline    int64
	interval    time.Duration
}

// start starts hop next; false where the fork was refused (the cap),
// which is retried after the interval, as a real runaway's would be.
func (h hopper) start(next int) (*exec.Cmd, bool) {
	if next >= h.hopCap {
		os.Stderr.WriteString("chain: hop cap " + strconv.Itoa(h.hopCap) + " reached\n")
		os.Exit(exitHopCap)
	}
	cmd := exec.Command(h.self, FixtureArg, "--shape", h.shape, "--hop", strconv.Itoa(next),
		"--hop-cap", strconv.Itoa(h.hopCap), "--deadline", strconv.FormatInt(h.deadline, 10),
		"--interval", h.interval.String())
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1", "GOGC=400")
	cmd.Stderr = os.Stderr
	return cmd, cmd.Start() == nil
}

// run is hop's life in its shape: a line hands off and waits, a churn
// starts two and exits, a tree keeps forking.
func (h hopper) run(hop int) int {
	switch h.shape {
	case "line":
		for {
			cmd, ok := h.start(hop + 1)
			if ok {
				cmd.Wait()
				if cmd.ProcessState != nil {
					return cmd.ProcessState.ExitCode()
				}
				return exitExecFail
			}
			time.Sleep(h.interval)
		}
	case "churn":
		signal.Ignore(unix.SIGCHLD) // children reap themselves
		for started := 0; started < 2; {
			if cmd, ok := h.start(hop + 1); ok {
				cmd.Process.Release()
				started++
			} else {
				time.Sleep(h.interval)
			}
		}
		time.Sleep(h.interval)
		return 0
	default: // tree
		signal.Ignore(unix.SIGCHLD)
		for {
			if cmd, ok := h.start(hop + 1); ok {
				cmd.Process.Release()
			}
			time.Sleep(h.interval)
		}
	}
}
