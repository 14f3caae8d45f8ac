package containtest

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The sentinel: nothing a test binary started outlives it. go test's
// -timeout, a SIGKILL or a crash ends a test binary without its cleanups,
// and its chains (in their capped groups, perhaps frozen in a group of
// freeze's) would run on, re-parented to init. So Main starts, as root, a
// copy of the test binary as a sentinel in a session of its own, holding
// the read end of a pipe whose write end only the test binary has. The
// pipe reads EOF when the test binary is gone, however it went (or when
// Main closes it at the end); the sentinel then kills and removes what
// the ledger names: the groups the harness made and the processes that
// run a chain's file (each in the test's own temporary directory). At a
// normal end they are gone already, and it does nothing.

const (
	sentinelEnv = "CONTAINTEST_SENTINEL" // the ledger's path, in the sentinel
	// sentinelGrace bounds the sentinel's work: a group of 3,000 at its
	// cap took over 10 s to empty here (killDeadline).
	sentinelGrace = 60 * time.Second
)

var ledger struct {
	sync.Mutex
	f *os.File
}

// startSentinel starts the sentinel and returns what ends it at a
// normal end. Not root: no group to remove, and none is started.
func startSentinel() (stop func()) {
	if os.Geteuid() != 0 {
		return func() {}
	}
	f, err := os.CreateTemp("", "containtest-ledger-")
	if err != nil {
		return func() {}
	}
	r, w, err := os.Pipe()
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return func() {}
	}
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), sentinelEnv+"="+f.Name())
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		f.Close()
		os.Remove(f.Name())
		return func() {}
	}
	r.Close()
	ledger.Lock()
	ledger.f = f
	ledger.Unlock()
	return func() {
		ledger.Lock()
		ledger.f = nil
		ledger.Unlock()
		f.Close()
		w.Close() // EOF: the sentinel looks, finds nothing, and exits
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(sentinelGrace):
			cmd.Process.Kill()
		}
	}
}

// note writes a line to the ledger: "group DIR" or "exe PATH".
func note(kind, v string) {
	ledger.Lock()
	defer ledger.Unlock()
	if ledger.f != nil {
		ledger.f.WriteString(kind + " " + v + "\n")
		ledger.f.Sync()
	}
}

// runSentinel is the sentinel's life: wait for EOF, then clean up what
// the ledger names.
func runSentinel(path string) {
	io.Copy(io.Discard, os.Stdin)
	defer os.Remove(path)
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	var groups, exes []string
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		kind, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || !filepath.IsAbs(v) {
			continue
		}
		switch kind {
		case "group":
			if strings.HasPrefix(v, "/sys/fs/cgroup/") {
				groups = append(groups, v)
			}
		case "exe":
			exes = append(exes, v)
		}
	}
	sweep(groups, exes, time.Now().Add(sentinelGrace))
}

// sweep kills, until none is left or the deadline, every process in the
// groups (and the groups below them) and every process that runs one of
// the files; thaws a v1 freezer group of freeze's that holds one; then
// removes the groups, and the groups of freeze's the chain was held in.
func sweep(groups, exes []string, deadline time.Time) {
	held := map[string]bool{}
	for {
		n := 0
		for _, g := range groups {
			for _, d := range walkDeepFirst(g) {
				os.WriteFile(filepath.Join(d, "cgroup.kill"), []byte("1"), 0)
				for _, pid := range readProcs(d) {
					unix.Kill(pid, unix.SIGKILL)
					n++
				}
			}
		}
		for _, pid := range runningAny(exes) {
			for _, g := range freezeGroups(pid) {
				held[g] = true
				os.WriteFile(filepath.Join(g, "freezer.state"), []byte("THAWED"), 0)
			}
			unix.Kill(pid, unix.SIGKILL)
			n++
		}
		if n == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, g := range groups {
		for _, d := range walkDeepFirst(g) {
			unix.Rmdir(d)
		}
	}
	for g := range held {
		for _, d := range walkDeepFirst(g) {
			unix.Rmdir(d)
		}
	}
	// A group freeze made for a chain whose processes were gone before
	// the sweep looked (killed by the freeze under test, which had not
	// yet removed its group): found by its name, which is freeze's
	// GroupName of the chain's file (freeze-BASENAME-HASH; a chain's
	// basename is unique to its test binary), and removed if empty.
	for _, x := range exes {
		for _, g := range namedFor(x) {
			for _, d := range walkDeepFirst(g) {
				unix.Rmdir(d)
			}
		}
	}
}

// groupRoots are where freeze makes its groups: the v1 freezer, the
// hybrid layout's v2 tree, and a pure v2 tree.
var groupRoots = []string{"/sys/fs/cgroup/freezer", "/sys/fs/cgroup/unified", "/sys/fs/cgroup"}

// namedFor lists the top-level groups whose name is freeze's for a chain
// of the file exe: freeze-BASENAME-XXXXXXXX (eight hex digits).
func namedFor(exe string) []string {
	base := filepath.Base(exe)
	if base == "" || strings.ContainsAny(base, "*?[\\") {
		return nil
	}
	var out []string
	for _, root := range groupRoots {
		m, _ := filepath.Glob(filepath.Join(root, "freeze-"+base+"-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]"))
		out = append(out, m...)
	}
	return out
}

// freezeGroups are the groups of freeze's (named freeze-…) that pid is
// in, as directories.
func freezeGroups(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return nil
	}
	v1, v2 := ownCgroups(b)
	var out []string
	if strings.HasPrefix(filepath.Base(v2), "freeze-") {
		for _, m := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
			if isDir(filepath.Join(m, v2)) {
				out = append(out, filepath.Join(m, v2))
				break
			}
		}
	}
	if g := v1["freezer"]; strings.HasPrefix(filepath.Base(g), "freeze-") {
		out = append(out, filepath.Join("/sys/fs/cgroup/freezer", g))
	}
	return out
}

// runningAny lists the processes whose executable is one of exes.
func runningAny(exes []string) []int {
	if len(exes) == 0 {
		return nil
	}
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink("/proc/" + e.Name() + "/exe")
		if err != nil {
			continue
		}
		exe = strings.TrimSuffix(exe, " (deleted)")
		for _, x := range exes {
			if exe == x {
				out = append(out, pid)
			}
		}
	}
	return out
}

// walkDeepFirst lists dir and the groups below it, deepest first.
func walkDeepFirst(dir string) []string { return (&pidsCap{dir: dir}).dirs() }

func readProcs(dir string) []int {
	b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out
}
