package contain

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"freeze/internal/proc"
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
}

func (l Leftover) String() string {
	s := fmt.Sprintf("left behind: pid %d %s (%s), %.1f s old, parent %d", l.PID, l.Exe, l.Comm, l.StartAge, l.PPID)
	if l.How != "" {
		s += "; " + l.How
	}
	if l.Pipes+l.Sockets > 0 {
		s += fmt.Sprintf("; holds %d pipe(s) and %d socket(s)", l.Pipes, l.Sockets)
	}
	return s
}

func (l Leftover) record() timeline.RunLeftover {
	return timeline.RunLeftover{PID: l.PID, Exe: l.Exe, Comm: l.Comm, AgeS: l.StartAge, PPID: l.PPID, How: l.How, Pipes: l.Pipes, Sockets: l.Sockets}
}

// leftovers lists the command's live processes once it has exited (or
// timed out), with how each left its tree.
func leftovers(cp *capped, child int) []Leftover {
	sid, _ := unix.Getsid(0)
	self := os.Getpid()
	up := uptimeTicks()
	var out []Leftover
	for _, st := range stats(cp) {
		l := Leftover{PID: st.PID, Comm: st.Comm, PPID: st.PPID}
		l.Exe, _, _ = proc.Default.ExePath(st.PID)
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
		l.Pipes, l.Sockets = held(st.PID)
		out = append(out, l)
	}
	return out
}

// held counts the pipes and sockets among a process's descriptors.
func held(pid int) (pipes, sockets int) {
	ents, _ := os.ReadDir(filepath.Join(pidDir(pid), "fd"))
	for _, e := range ents {
		t, err := os.Readlink(filepath.Join(pidDir(pid), "fd", e.Name()))
		switch {
		case err != nil:
		case strings.HasPrefix(t, "pipe:"):
			pipes++
		case strings.HasPrefix(t, "socket:"):
			sockets++
		}
	}
	return pipes, sockets
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
