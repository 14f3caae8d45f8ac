package contain

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/proc"
	"freeze/internal/safedir"
)

// Bounds of the teardown: each a wait for the kernel, not for the
// command. cgroup.kill of 12,000 processes empties a group in about
// 1.4 s here (README, Benchmarks).
const (
	frozenWait = 5 * time.Second // for the group to report frozen
	roundWait  = 3 * time.Second // per kill round, for the deaths
	rounds     = 10
)

// teardown freezes what is left of the command's tree, kills it, and
// confirms zero by two empty looks at the group: the stop order, on a
// set that is known from the start (the group). The reaper, if any,
// reaps what dies.
func teardown(cp *capped) (bool, error) {
	switch cp.kind {
	case CapCgroup2:
		return teardownV2(cp, cp.pids)
	case CapCgroup1:
		if cp.v2 != "" {
			ok, err := teardownV2(cp, cp.v2)
			if ok {
				// The v2 group is empty: so is the pids group, which
				// holds the same processes; confirm it too.
				ok = poll(roundWait, func() bool { n, _ := live(cp); return n == 0 })
				if !ok {
					err = fmt.Errorf("%s still lists processes once %s is empty", cp.pids, cp.v2)
				}
			}
			return ok, err
		}
		return teardownV1(cp)
	}
	return teardownSignals(cp)
}

// teardownV2: cgroup.freeze, pids.max 0, then cgroup.kill until empty;
// before 5.14, where there is no cgroup.kill (Debian 11's 5.10: the
// write failed with "permission denied", and freeze run exited 121 with
// the group already frozen), each member of cp is killed by pidfd, round
// by round: a frozen task still dies of SIGKILL (cgroup-v2.rst, "fatal
// signals").
func teardownV2(cp *capped, dir string) (bool, error) {
	write(dir, "pids.max", "0")
	// Frozen first, then killed at once: cgroup.kill does not wait for
	// the freeze to settle, and kills a child born mid-kill too (it marks
	// the group, and fork checks the mark: cgroup-v2.rst, cgroup.kill),
	// so waiting for "frozen" would only add the freeze's own time.
	if err := write(dir, "cgroup.freeze", "1"); err != nil {
		return false, err
	}
	_, err := os.Stat(filepath.Join(dir, "cgroup.kill"))
	noKill := os.IsNotExist(err)
	empty := 0
	for n := 0; n < rounds && empty < 2; n++ {
		if events(dir)["populated"] == 0 {
			empty++
			continue
		}
		empty = 0
		if noKill {
			killPinned(cp, stats(cp))
		} else if err := write(dir, "cgroup.kill", "1"); err != nil {
			return false, err
		}
		poll(roundWait, func() bool { return events(dir)["populated"] == 0 })
	}
	if empty < 2 {
		return false, fmt.Errorf("%s still holds processes after %d kill rounds", dir, rounds)
	}
	return true, nil
}

// teardownV1: the freezer group FROZEN (or SIGSTOP without one),
// pids.max 0, then each member pinned by pidfd and killed, round by
// round until the pids group is empty.
func teardownV1(cp *capped) (bool, error) {
	write(cp.pids, "pids.max", "0")
	if cp.freezer != "" {
		write(cp.freezer, "freezer.state", "FROZEN")
		poll(frozenWait, func() bool {
			b, _ := os.ReadFile(filepath.Join(cp.freezer, "freezer.state"))
			return string(bytes.TrimSpace(b)) == "FROZEN"
		})
	} else {
		stopAll(cp)
	}
	return killRounds(cp, func() {
		if cp.freezer != "" {
			// A task frozen by the v1 freezer acts on SIGKILL only once
			// thawed; none can fork, each has a fatal signal pending.
			write(cp.freezer, "freezer.state", "THAWED")
		}
	})
}

// killRounds kills the members by pidfd, round by round, calling after
// each round's kill, until two looks in a row find none.
func killRounds(cp *capped, after func()) (bool, error) {
	empty := 0
	for n := 0; n < rounds && empty < 2; n++ {
		members := stats(cp)
		if len(members) == 0 {
			empty++
			continue
		}
		empty = 0
		killPinned(cp, members)
		after()
		poll(roundWait, func() bool { n, _ := live(cp); return n == 0 })
	}
	if empty < 2 {
		return false, fmt.Errorf("%s still holds processes after %d kill rounds", where(cp), rounds)
	}
	return true, nil
}

// where names the set for an error.
func where(cp *capped) string {
	if cp.pids == "" {
		return "freeze's descendants"
	}
	return cp.pids
}

// teardownSignals is the rlimit's teardown: no group, so the set is
// freeze's descendants, stopped by SIGSTOP until a pass finds none
// running, then killed.
func teardownSignals(cp *capped) (bool, error) {
	stopAll(cp)
	return killRounds(cp, func() {})
}

// stopAll sends SIGSTOP to every member until a pass finds none that is
// not stopped (bounded): what is stopped cannot fork.
func stopAll(cp *capped) {
	for pass := 0; pass < 20; pass++ {
		running := 0
		for _, st := range stats(cp) {
			if st.State == 'T' || st.State == 't' {
				continue
			}
			running++
			if h, err := proc.Default.Open(st.ID()); err == nil {
				h.Signal(unix.SIGSTOP)
				h.Close()
			}
		}
		if running == 0 {
			return
		}
	}
}

// killPinned sends SIGKILL to each process by a pidfd opened for the
// identity (pid, start time) it was seen with, and only to one that is
// still a member once pinned: a pid reused by a process elsewhere is
// never signalled.
func killPinned(cp *capped, members []proc.Stat) {
	var pinned []*proc.Handle
	for _, st := range members {
		if h, err := proc.Default.Open(st.ID()); err == nil {
			pinned = append(pinned, h)
		}
	}
	still := map[int]bool{}
	for _, st := range stats(cp) {
		still[st.PID] = true
	}
	for _, h := range pinned {
		if still[h.PID] {
			h.Signal(unix.SIGKILL)
		}
		h.Close()
	}
}

func write(dir, file, v string) error {
	return safedir.Knob(filepath.Join(dir, file), v)
}

// events parses cgroup.events ("populated 1\nfrozen 0\n"); a group that
// is gone reads as empty.
func events(dir string) map[string]int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return map[string]int{"populated": 0}
	}
	m := map[string]int{}
	for _, l := range bytes.Split(b, []byte("\n")) {
		var k string
		var v int
		if _, err := fmt.Sscanf(string(l), "%s %d", &k, &v); err == nil {
			m[k] = v
		}
	}
	return m
}

// poll calls ok every 2 ms until it is true or within has passed.
func poll(within time.Duration, ok func() bool) bool {
	for end := time.Now().Add(within); ; time.Sleep(2 * time.Millisecond) {
		if ok() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}
