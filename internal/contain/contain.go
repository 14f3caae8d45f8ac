// Package contain is freeze run: it runs one command so that nothing it
// starts can outlive it or grow past a cap. The command starts in groups
// made for it, capped by pids.max from outside (else RLIMIT_NPROC, said
// to be weaker), in its own process group, with freeze as the child
// subreaper of its whole tree. At every ending (the command exits, the
// timeout fires, freeze is signalled) the tree is frozen, killed, and
// zero is confirmed with the group empty; whatever outlived the command
// is reported first. A group whose freeze was itself killed is ended by
// Reap, from a state file that says what ran.
//
// It never signals a process outside the command's group (or, with the
// rlimit, outside freeze's own descendants), and it pins every process
// by a pidfd checked against its start time before signalling it.
package contain

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/interrupt"
	"freeze/internal/proc"
	"freeze/internal/show"
	"freeze/internal/timeline"
	"freeze/internal/version"
)

// Config is one command to run.
type Config struct {
	Command  []string
	MaxProcs int           // pids.max: tasks, threads included
	Timeout  time.Duration // 0: none
	// KillAfter is how long the command's group has after --timeout's
	// SIGTERM to end by itself (timeout -k's grace): a test runner writes
	// its report there. Then the group is torn down.
	KillAfter time.Duration
	WaitDelay time.Duration // after the command exits, for its descendants to exit
	// Self is freeze's own executable, which the child runs to join the
	// groups (ChildArg).
	Self string
	// StateDir holds a state file per live run, for Reap.
	StateDir string
	Rec      *timeline.Recorder
	// KeepEscaped leaves alive, reported, the descendants that moved
	// themselves out of the run's groups (--allow-leftovers); by default
	// they are killed with the rest.
	KeepEscaped bool
	// FailLeftovers makes a leftover fail the run (ExitLeftovers): --leaks
	// fail, without --allow-leftovers.
	FailLeftovers bool
	// Warn says what went wrong and did not stop the run (a record that
	// could not be kept).
	Warn func(string)
	// NodeTestNames has node's test runner say which test is running,
	// for the leftovers to name (nodeEnv): --node-test-names.
	NodeTestNames bool
}

// Report is how a run ended.
type Report struct {
	// Exit is freeze run's exit code (the command's status, or one of
	// run's own: ExitNotZero...), and Why says why, strongest reason
	// first.
	Exit     int
	Why      string
	Max      int    // the cap, pids.max
	Cap      string // CapCgroup2, CapCgroup1, CapRlimit
	CapWhy   string
	Group    string // the group that held the tree, "" for the rlimit
	Status   int    // the command's exit status (128+N for signal N), -1 if it never exited
	Signaled string // a signal freeze received and passed on, if any
	// NotStarted says why the command never started (not found, not
	// executable, the group could not be joined): Status is then the
	// helper's 127 or 126, as a shell's.
	NotStarted string
	TimedOut   bool
	// AtCap is what the group held when the cap first refused a fork:
	// its processes counted by executable, most first ("2043 x
	// /tmp/x/bomb"), from one look at the group.
	AtCap []string
	// AtCapMissed says what the looks saw when they named nothing.
	AtCapMissed string
	// LineageOff is empty where the process events connector recorded
	// who started whom (root only; each leftover then names who started
	// it), else why it did not.
	LineageOff string
	// Refused is how many forks the cap refused (pids.events); Peak the
	// most tasks the group held (-1 unknown). On a v1 host it counts the
	// thread of freeze's that forked CMD while CMD stopped at its exec:
	// a peak of 2 for a command that never forked (the helper's was 5,
	// its Go threads).
	Refused, Peak int
	Leftovers     []Leftover
	Zero          bool  // the teardown confirmed the group empty
	TeardownErr   error // why it could not
	Took          time.Duration
	// TeardownTook is from the freeze to zero confirmed; RemoveTook the
	// removal of the groups after it.
	TeardownTook, RemoveTook time.Duration
}

// capLookEvery is how often freeze run looks at pids.events while the
// command runs, to see the group as the cap first fires.
const capLookEvery = 100 * time.Millisecond

// capWatch takes one look at the group when the cap first refuses a fork
// and the group lists a process.
type capWatch struct {
	held []string
	done bool
	// What the looks saw, for a run whose cap fired and whose looks named
	// nothing (seen once, on 5.10 beside a second load, cause not found):
	// how many looks, and the last one's refusals and listed processes.
	looks, lastRefused, lastListed int
}

// missed says what the looks saw when they named nothing.
func (w *capWatch) missed() string {
	if w.done {
		return ""
	}
	return fmt.Sprintf("%d looks at the group named nothing; the last saw %d refused forks in pids.events and %d processes in cgroup.procs", w.looks, w.lastRefused, w.lastListed)
}

func (w *capWatch) look(cp *capped) {
	if w.done {
		return
	}
	w.looks++
	w.lastRefused, w.lastListed = cp.refused(), 0
	if w.lastRefused == 0 {
		return
	}
	pids, _ := cp.members()
	w.lastListed = len(pids)
	if len(pids) == 0 {
		// A group at its cap may hold only zombies for a moment (its
		// forkers exited, freeze has not reaped them yet): the pids
		// still count, and cgroup.procs lists none of them. Seen on
		// 6.1 under TCG: the one look named nothing. The next look
		// names what the cap holds.
		return
	}
	w.done = true
	by := map[string]int{}
	for _, pid := range pids {
		exe, _ := os.Readlink(pidDir(pid) + "/exe")
		if exe == "" {
			exe = "(exited, or a kernel thread)"
		}
		by[exe]++
	}
	for exe, n := range by {
		w.held = append(w.held, fmt.Sprintf("%d x %s", n, exe))
	}
	sort.Slice(w.held, func(i, j int) bool {
		var a, b int
		fmt.Sscanf(w.held[i], "%d", &a)
		fmt.Sscanf(w.held[j], "%d", &b)
		return a > b || a == b && w.held[i] < w.held[j]
	})
	if len(w.held) > 5 {
		w.held = append(w.held[:5], fmt.Sprintf("and %d more executables", len(w.held)-5))
	}
}

// CapHit reports whether the cap refused a fork.
func (r Report) CapHit() bool { return r.Refused > 0 }

// Run runs c.Command to its end, then tears down what is left, and
// records the verdict (run-end) with its exit code. ctx ended (the
// command's SIGINT, SIGTERM or SIGHUP) passes its signal on to the
// command's process group, as a shell would, and ends the run.
func Run(ctx context.Context, c Config) (Report, error) {
	rep, err := run(ctx, c)
	if err != nil {
		return rep, err
	}
	rep.Exit, rep.Why = c.verdict(rep)
	c.Rec.RecordOf(timeline.StageRecord, timeline.StepRunEnd, rep.Why, timeline.RunEnd{Exit: rep.Exit, Why: rep.Why, Leftovers: len(rep.Leftovers),
		Refused: rep.Refused, Peak: max(rep.Peak, 0), Max: c.MaxProcs, AtCap: rep.AtCap, Zero: rep.Zero, TookMS: msOf(rep.Took),
		TeardownMS: msOf(rep.TeardownTook), RemoveMS: msOf(rep.RemoveTook)})
	return rep, nil
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// run runs the command and tears its tree down.
func run(ctx context.Context, c Config) (Report, error) {
	t0 := time.Now()
	rep := Report{Status: -1, Peak: -1, Max: c.MaxProcs}
	if len(c.Command) == 0 {
		return rep, errors.New("no command")
	}
	// The command catches signals before anything is made (ctx): one
	// that came after the command's start and before the wait killed
	// freeze (Go's default for SIGTERM) and left the command running and
	// the groups in place (CI, kernel matrix, 6.12). One that came before
	// the start is passed on to the command's group as soon as there is
	// one, and the run ends as any signalled run does.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return rep, fmt.Errorf("PR_SET_CHILD_SUBREAPER: %w", err)
	}
	name := fmt.Sprintf("freeze-run-%d-%d", os.Getpid(), time.Now().UnixNano())
	cp, err := newCap(name, c.MaxProcs)
	if err != nil {
		return rep, err
	}
	rep.Cap, rep.CapWhy, rep.Group = cp.kind, cp.why, cp.pids
	st := newState(c.StateDir, name, cp, c.Command)
	defer st.remove()
	// Who starts whom, from before the command's first fork: rooted at
	// freeze itself, whose one child is the command.
	var lin *lineage
	switch {
	case os.Getenv("FREEZE_RUN_LINEAGE") == "off": // to measure what it costs
		rep.LineageOff = "FREEZE_RUN_LINEAGE=off"
	case !proc.HostPidNS():
		// The connector takes the listen and sends nothing: a run here
		// named its leftovers without their starters, and did not say why.
		rep.LineageOff = "freeze runs in a pid namespace of its own, and the kernel's process events connector reports to the host's only"
	default:
		if lin = startLineage(os.Getpid()); lin == nil {
			rep.LineageOff = "the kernel's process events connector refused freeze's listen (it needs root: CAP_NET_ADMIN)"
		}
	}
	defer lin.stop()
	lineage := "on"
	if rep.LineageOff != "" {
		lineage = "off: " + rep.LineageOff
	}
	env := os.Environ()
	if c.NodeTestNames {
		e, done, err := nodeEnv(env, c.StateDir, name)
		if err != nil && c.Warn != nil {
			c.Warn(fmt.Sprintf("run: a node test's leftovers will name its file, not its test: %v (or give --node-test-names=false)", err))
		}
		defer done()
		env = e
	}
	cmd, why, how, err := start(c, cp, env)
	if err != nil {
		cp.remove()
		return rep, err
	}
	c.Rec.RecordOf(timeline.StageNone, timeline.StepRunStart, fmt.Sprintf("started %s as pid %d, capped by %s", show.ShellJoin(c.Command), cmd.Process.Pid, cp.why),
		timeline.RunStart{HostInfo: timeline.Host(), Version: version.Get().String(), Command: c.Command, PID: cmd.Process.Pid, Cap: cp.kind, CapWhy: cp.why, Group: cp.pids, MaxProcs: c.MaxProcs, Start: how, Lineage: lineage})
	r := newReaper(cmd.Process.Pid)
	defer r.stop()
	var atCap capWatch
	rep.Status, rep.Signaled, rep.TimedOut = wait(ctx, c, cmd.Process.Pid, r, func() { atCap.look(cp) })
	atCap.look(cp) // a command that exited at once: its tree is still there
	if rep.Status >= 0 {
		rep.NotStarted = notStarted(why)
	}
	c.Rec.RecordOf(timeline.StageNone, timeline.StepRunExit, rep.ExitWords(), timeline.RunExit{Status: rep.Status, Signal: rep.Signaled, TimedOut: rep.TimedOut})
	// A signal the wait passed on to the command has had its grace; one
	// that came after the wait (even before the grace began) ends it.
	passedOn := rep.Signaled != "" && !rep.TimedOut
	settle(ctx, c, cp, passedOn, func() { atCap.look(cp) })
	atCap.look(cp)
	rep.Leftovers = leftovers(cp, cmd.Process.Pid, rep.TimedOut, lin)
	// A root command can always leave the groups (a write of its pid to
	// another cgroup.procs): the cap and the teardown then miss it. freeze
	// is the subreaper of the whole tree, so it still sees it below
	// itself.
	esc := escaped(cp, cmd.Process.Pid, lin)
	rep.Leftovers = append(rep.Leftovers, esc...)
	for _, l := range rep.Leftovers {
		c.Rec.RecordOf(timeline.StageMatch, timeline.StepLeftover, l.String(), l.Record())
	}
	if !c.KeepEscaped {
		killEscaped(esc)
	}
	// The last look, with the count of refusals, just before the
	// teardown: the cap can first fire after the grace, while the
	// leftovers are read. A bomb that grew slowly (5.10 under TCG beside
	// a second load: the command exited at 714 ms, and the cap had only
	// just fired when its 54 leftovers were listed, 110-180 ms old, with
	// four of bash's "fork: retry" lines) was reported with 60 refusals
	// and no look that saw one. The refusals are counted first: the look reads them again (the
	// count only grows), so a count above zero is one the look saw.
	rep.Refused, rep.Peak = cp.refused(), cp.peak()
	atCap.look(cp)
	rep.AtCap, rep.AtCapMissed = atCap.held, atCap.missed()
	tearDown(c, cp, cmd.Process.Pid, lin, &rep)
	rep.Took = time.Since(t0)
	return rep, nil
}

// tearDown ends the run's groups: the teardown to zero, the escapes it
// raced, the groups' removal.
func tearDown(c Config, cp *capped, pid int, lin *lineage, rep *Report) {
	t1 := time.Now()
	rep.Zero, rep.TeardownErr = teardown(cp)
	// Once more after the teardown: a process that was moving itself out
	// while the group was torn down escaped both the first look and the
	// kill (seen under load: it wrote its pid to another cgroup.procs
	// between the two).
	if late := escaped(cp, pid, lin); len(late) > 0 {
		seen := map[int]bool{}
		for _, l := range rep.Leftovers {
			seen[l.PID] = true
		}
		for _, l := range late {
			if !seen[l.PID] {
				rep.Leftovers = append(rep.Leftovers, l)
				c.Rec.RecordOf(timeline.StageMatch, timeline.StepLeftover, l.String(), l.Record())
			}
		}
		if !c.KeepEscaped {
			killEscaped(late)
		}
	}
	t2 := time.Now()
	if err := cp.remove(); err != nil && rep.TeardownErr == nil {
		rep.TeardownErr = err
	}
	rep.TeardownTook, rep.RemoveTook = t2.Sub(t1), time.Since(t2)
}

// start starts the command directly where it can (startDirect), else
// through freeze's helper, which joins the groups and execs the command;
// in a process group of its own, inheriting freeze's
// stdin, stdout and stderr (freeze reads none of them, so a descendant
// that holds one cannot hang it). why gives, once the helper has exec'd
// or exited, why the command did not start ("" if it did); how says
// which way it started, for the record.
func start(c Config, cp *capped, env []string) (cmd *exec.Cmd, why <-chan string, how string, err error) {
	cmd, err = startDirect(c, cp, env)
	switch {
	case err == nil:
		started := make(chan string)
		close(started) // it started: nothing to say
		return cmd, started, "direct", nil
	case errors.Is(err, errThreadStayed):
		return nil, nil, "", err
	}
	how = "helper: " + err.Error()
	args := []string{ChildArg}
	for _, j := range cp.join {
		args = append(args, "--join", j)
	}
	if cp.kind == CapRlimit {
		// The count is the user's: the cap sits above what it runs now.
		args = append(args, "--nproc", strconv.Itoa(userTasks(os.Getuid())+c.MaxProcs))
	}
	args = append(append(args, "--"), c.Command...)
	cmd = exec.Command(c.Self, args...)
	cmd.Env = env // the helper passes its own on to the command
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	rd, wr, err := os.Pipe()
	if err != nil {
		return nil, nil, "", err
	}
	defer wr.Close()
	cmd.ExtraFiles = []*os.File{wr} // the helper's startFD
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if cp.cgroupFD >= 0 {
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, cp.cgroupFD
	}
	if err := cmd.Start(); err != nil {
		rd.Close()
		return nil, nil, "", fmt.Errorf("start %s: %w", c.Command[0], err)
	}
	said := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(rd, 4096))
		rd.Close()
		said <- strings.TrimPrefix(string(b), "run: ")
	}()
	return cmd, said, how, nil
}

// notStarted is why the command never started, "" if it did: asked once
// the command has exited, when the helper's descriptor has closed.
func notStarted(why <-chan string) string {
	select {
	case s := <-why:
		return s
	case <-time.After(time.Second):
		return ""
	}
}

// wait waits for the command to exit, the timeout, or a signal to
// freeze (ctx's end), which is passed on to the command's process group
// as a shell would. It returns the command's status (-1 if it did not exit).
func wait(ctx context.Context, c Config, pid int, r *reaper, every func()) (status int, signaled string, timedOut bool) {
	tick := time.NewTicker(capLookEvery)
	defer tick.Stop()
	var timeout <-chan time.Time
	if c.Timeout > 0 {
		t := time.NewTimer(c.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	for {
		select {
		case <-tick.C:
			every()
		case ws := <-r.exited:
			return statusOf(ws), signaled, false
		case <-timeout:
			// As timeout(1): SIGTERM to the group, then the grace, then
			// the teardown. It was killed outright before, and a pytest
			// under --timeout wrote no report.
			unix.Kill(-pid, unix.SIGTERM)
			signaled = "SIGTERM (--timeout)"
			select {
			case ws := <-r.exited:
				return statusOf(ws), signaled, true
			case <-time.After(c.KillAfter):
				return -1, signaled, true
			}
		case <-ctx.Done():
			sig := interrupt.Signal(ctx)
			signaled = interrupt.Name(sig)
			unix.Kill(-pid, sig)
			// The command gets WaitDelay to end on it; then the group goes.
			select {
			case ws := <-r.exited:
				return statusOf(ws), signaled, false
			case <-time.After(c.WaitDelay):
				return -1, signaled, false
			}
		}
	}
}

func statusOf(ws unix.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// settle gives the command's descendants WaitDelay to exit by
// themselves once the command has. A signal to freeze meanwhile ends the
// grace: the teardown follows at once. If the wait already passed a
// signal on to the command (passedOn), a further one does. (A signal
// that came between the wait and the grace ends the grace at once: taken
// for the wait's, it left freeze run in its whole grace, 60 s in a test
// of the kernel matrix.)
func settle(ctx context.Context, c Config, cp *capped, passedOn bool, every func()) {
	ended := ctx.Done()
	var again <-chan syscall.Signal
	if passedOn {
		ended = nil
		if cause, ok := interrupt.Of(ctx); ok {
			again = cause.Later
		}
	}
	grace := func(sig syscall.Signal) {
		name := interrupt.Name(sig)
		c.Rec.RecordOf(timeline.StageNone, timeline.StepSignal, name+" while the command's descendants had their grace: tearing down now", timeline.SignalCaught{Signal: name})
	}
	next := time.Now()
	for end := time.Now().Add(c.WaitDelay); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(next) {
			every()
			next = time.Now().Add(capLookEvery)
		}
		if n, _ := live(cp); n == 0 {
			return
		}
		select {
		case <-ended:
			grace(interrupt.Signal(ctx))
			return
		case sig := <-again:
			grace(sig)
			return
		default:
		}
	}
}

// ExitWords says how the command ended, in a phrase: the record's and
// the operator's words alike.
func (r Report) ExitWords() string {
	switch {
	case r.TimedOut && r.Status >= 0:
		return fmt.Sprintf("the command timed out, was sent SIGTERM, and exited %d within its grace", r.Status)
	case r.TimedOut:
		return "the command timed out, and did not exit within its grace after SIGTERM"
	case r.Status < 0:
		return "the command did not exit after " + r.Signaled
	case r.NotStarted != "":
		return fmt.Sprintf("the command did not start (%s; exit %d, as a shell gives)", r.NotStarted, r.Status)
	case r.Status > 128:
		return fmt.Sprintf("the command was killed by %s", unix.SignalName(syscall.Signal(r.Status-128)))
	}
	return fmt.Sprintf("the command exited %d", r.Status)
}

// userTasks counts the tasks of uid (RLIMIT_NPROC counts threads).
func userTasks(uid int) int {
	pids, _ := proc.Default.PIDs(nil)
	n := 0
	for _, pid := range pids {
		var st unix.Stat_t
		if unix.Stat("/proc/"+strconv.Itoa(pid), &st) == nil && int(st.Uid) == uid {
			tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
			n += max(1, len(tasks))
		}
	}
	return n
}
