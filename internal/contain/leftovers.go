package contain

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/census"
	"freeze/internal/proc"
	"freeze/internal/show"
	"freeze/internal/timeline"
)

// Leftover is a process that outlived the command.
type Leftover struct {
	PID      int
	Exe      string
	Comm     string
	StartAge float64 // seconds since it started
	PPID     int
	// How says how it left the command's tree: a new session, a new
	// process group, re-parented to freeze; "" if it did none of these.
	How string
	// Pipes and Sockets it holds open: a pipe is how a leftover hangs a
	// caller that reads the command's output (go test, a CI runner).
	Pipes, Sockets int
	// Ports are the listening or bound sockets among them ("tcp
	// 127.0.0.1:8080"): a leftover server is what makes the next run's
	// bind fail.
	Ports []string
	// Args is its argv, as ps -f shows it; StartedBy who started it, from
	// the run's lineage: the Go test binary's package, or its ancestors'
	// argv ("" where the lineage could not be recorded).
	Args      []string
	StartedBy string
	// Test, Class and File name the test that started it where its
	// runner says (pytest: test_start, test_daemon, sub/test_daemon.py),
	// for CI's own reports: a JUnit case that merges with the runner's,
	// an annotation on the test's file.
	Test, Class, File string

	id proc.ID // pid and start time, as seen when it was listed
}

// name reads the leftover's argv and, from the lineage, who started it.
func (l *Leftover) name(lin *lineage) {
	if b, err := os.ReadFile(filepath.Join(pidDir(l.PID), "cmdline")); err == nil && len(b) > 0 {
		l.Args = strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	}
	chain := lin.chain(l.PID)
	// Not freeze itself, the root of the lineage.
	for i, a := range chain {
		if a.PID == os.Getpid() {
			chain = chain[:i]
			break
		}
	}
	l.StartedBy = startedBy(chain)
	// A Go test binary's leftover goes in its package's class, as
	// go-junit-report and gotestsum name a package's cases; and under
	// its test, where -test.run names one.
	for _, a := range chain {
		if goTestRE().MatchString(a.Exe) {
			l.Class = goImportPath(a.Dir)
			l.Test = oneGoTest(a.Args)
			break
		}
	}
	// A test runner that says which test is running in its environment,
	// which a helper it started inherits: pytest sets
	// PYTEST_CURRENT_TEST (and xdist PYTEST_XDIST_WORKER), node's
	// runner FREEZE_NODE_TEST where freeze's preload runs in it.
	if env, err := os.ReadFile(filepath.Join(pidDir(l.PID), "environ")); err == nil {
		var test, worker, node string
		for _, kv := range strings.Split(string(env), "\x00") {
			if v, ok := strings.CutPrefix(kv, "PYTEST_CURRENT_TEST="); ok {
				test = v
			}
			if v, ok := strings.CutPrefix(kv, "PYTEST_XDIST_WORKER="); ok {
				worker = v
			}
			if v, ok := strings.CutPrefix(kv, nodeTestVar+"="); ok {
				node = v
			}
		}
		// node's test runner, through freeze's preload (nodeEnv).
		if name, class, file, ok := nodeTest(node); ok && test == "" {
			l.Test, l.Class, l.File = name, class, file
			what := fmt.Sprintf("the node test %q in %s", name, file)
			if l.StartedBy != "" {
				what += ", through " + l.StartedBy
			}
			l.StartedBy = what
		}
		if test != "" {
			l.Test, l.Class, l.File = pytestID(test)
			what := "the pytest test " + test
			if worker != "" {
				what += " (xdist worker " + worker + ")"
			}
			if l.StartedBy != "" {
				what += ", through " + l.StartedBy
			}
			l.StartedBy = what
		}
	}
}

func (l Leftover) String() string {
	s := fmt.Sprintf("left behind: pid %d %s (%s), %s old, parent %d", l.PID, argvLine(l.Args, l.Exe), exeOf(l), show.Dur(time.Duration(l.StartAge*float64(time.Second))), l.PPID)
	if l.StartedBy != "" {
		s += "; started by " + l.StartedBy
	}
	if l.How != "" {
		s += "; " + l.How
	}
	if l.Pipes+l.Sockets > 0 {
		s += fmt.Sprintf("; holds %d pipe(s) and %d socket(s)", l.Pipes, l.Sockets)
	}
	if len(l.Ports) > 0 {
		s += "; listening on " + strings.Join(l.Ports, ", ")
	}
	return s
}

// Record is the leftover as the timeline and --json write it.
func (l Leftover) Record() timeline.RunLeftover {
	return timeline.RunLeftover{PID: l.PID, Exe: l.Exe, Comm: l.Comm, AgeS: l.StartAge, PPID: l.PPID, How: l.How, Pipes: l.Pipes, Sockets: l.Sockets, Ports: l.Ports,
		Args: l.Args, StartedBy: l.StartedBy}
}

// exeOf names a leftover's executable, or what it is without one: a
// process that has exited and is not yet reaped has none to read.
func exeOf(l Leftover) string {
	if l.Exe != "" {
		return l.Exe
	}
	return "no executable: exited, not yet reaped (" + l.Comm + ")"
}

// leftovers lists the command's live processes once it has exited (or
// timed out), with how each left its tree.
func leftovers(cp *capped, child int, timedOut bool, lin *lineage) []Leftover {
	sid, _ := unix.Getsid(0)
	self := os.Getpid()
	up := uptimeTicks()
	var out []Leftover
	nets := netTables{}
	for _, st := range stats(cp) {
		if st.PID == child && timedOut {
			// Not a leftover: the timeout is the verdict, and the
			// teardown ends it (it was listed as its own leftover, and
			// as having outlived a command that never ended).
			continue
		}
		l := Leftover{PID: st.PID, Comm: st.Comm, PPID: st.PPID}
		l.Exe, _, _ = proc.Default.ExePath(st.PID)
		l.name(lin)
		if up > 0 && st.Start <= up {
			l.StartAge = float64(up-st.Start) / 100
		}
		var how []string
		switch {
		case st.PID == child:
			how = append(how, "the command itself, still running")
		case st.Session != sid:
			how = append(how, "left its session (setsid)")
		case st.PGRP != child:
			how = append(how, "left the command's process group")
		}
		if st.PPID == self && st.PID != child {
			how = append(how, "re-parented to freeze (its parent exited)")
		}
		l.How = strings.Join(how, ", ")
		var socks []uint64
		l.Pipes, socks = held(st.PID)
		l.Sockets = len(socks)
		l.Ports = nets.ports(st.PID, socks)
		out = append(out, l)
	}
	return out
}

// escaped lists freeze's live descendants that are not in the run's
// groups: they moved themselves (or were moved) into another cgroup.
// With the rlimit there is no group, and every descendant is the set.
func escaped(cp *capped, child int, lin *lineage) []Leftover {
	if cp.pids == "" {
		return nil
	}
	members, _ := cp.members()
	in := map[int]bool{}
	for _, pid := range members {
		in[pid] = true
	}
	var out []Leftover
	for _, st := range descendants() {
		if in[st.PID] {
			continue
		}
		cg, _ := os.ReadFile(filepath.Join(pidDir(st.PID), "cgroup"))
		l := Leftover{PID: st.PID, Comm: st.Comm, PPID: st.PPID, id: st.ID()}
		l.Exe, _, _ = proc.Default.ExePath(st.PID)
		l.name(lin)
		l.How = "left the run's group for another cgroup (" + capLines(cg) + "): outside the cap and the group's teardown"
		var socks []uint64
		l.Pipes, socks = held(st.PID)
		l.Sockets = len(socks)
		out = append(out, l)
	}
	return out
}

// capLines are the lines of /proc/PID/cgroup that say where its cap
// would be: the pids hierarchy (v1) and the unified one.
func capLines(cg []byte) string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(cg)), "\n") {
		if f := strings.SplitN(l, ":", 3); len(f) == 3 && (f[1] == "pids" || f[1] == "") {
			out = append(out, l)
		}
	}
	return strings.Join(out, " ")
}

// killEscaped kills the escaped descendants, each pinned by pidfd and
// checked to be the same process (pid and start time).
func killEscaped(esc []Leftover) {
	for _, l := range esc {
		if h, err := proc.Default.Open(l.id); err == nil {
			h.Signal(unix.SIGKILL)
			h.Close()
		}
	}
}

// held counts the pipes among a process's descriptors and lists its
// sockets' inodes.
func held(pid int) (pipes int, sockets []uint64) {
	ents, _ := os.ReadDir(filepath.Join(pidDir(pid), "fd"))
	for _, e := range ents {
		t, err := os.Readlink(filepath.Join(pidDir(pid), "fd", e.Name()))
		switch {
		case err != nil:
		case strings.HasPrefix(t, "pipe:"):
			pipes++
		case strings.HasPrefix(t, "socket:["):
			ino, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(t, "socket:["), "]"), 10, 64)
			if err == nil {
				sockets = append(sockets, ino)
			}
		}
	}
	return pipes, sockets
}

// netTables holds the listening sockets of each network namespace the
// leftovers are in, read once per namespace: thousands of leftovers
// usually share one.
type netTables map[string]map[uint64]census.Port

// ports names the listening sockets among socks, which pid holds.
func (n netTables) ports(pid int, socks []uint64) []string {
	if len(socks) == 0 {
		return nil
	}
	ns, err := os.Readlink(filepath.Join(pidDir(pid), "ns", "net"))
	if err != nil {
		return nil
	}
	t, ok := n[ns]
	if !ok {
		t = census.Listening(pid)
		n[ns] = t
	}
	var out []string
	for _, ino := range socks {
		if p, ok := t[ino]; ok {
			out = append(out, p.String())
		}
	}
	return out
}

// uptimeTicks is the time since boot in clock ticks (USER_HZ, 100).
func uptimeTicks() uint64 {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0
	}
	var s float64
	fmt.Sscanf(string(b), "%f", &s)
	return uint64(s * 100)
}

// pytestID splits PYTEST_CURRENT_TEST ("sub/test_x.py::TestC::test_m
// (call)") into the test's name, the classname pytest's own JUnit gives
// it ("sub.test_x.TestC") and its file.
func pytestID(current string) (test, class, file string) {
	id, _, _ := strings.Cut(current, " (")
	parts := strings.Split(id, "::")
	file = parts[0]
	class = strings.ReplaceAll(strings.TrimSuffix(file, ".py"), "/", ".")
	if len(parts) > 2 {
		class += "." + strings.Join(parts[1:len(parts)-1], ".")
	}
	if len(parts) > 1 {
		test = parts[len(parts)-1]
	}
	return test, class, file
}
