package proc

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"strconv"

	"golang.org/x/sys/unix"
)

// PF_KTHREAD marks kernel threads in the flags field of /proc/PID/stat
// (include/linux/sched.h).
const pfKthread = 0x00200000

// Stat is the part of /proc/PID/stat (proc_pid_stat(5)) freeze uses.
type Stat struct {
	PID     int
	Comm    string
	State   byte // R S D Z T t X I ...
	PPID    int
	PGRP    int
	Session int
	Flags   uint64
	UTime   uint64 // fields 14 and 15: CPU time in clock ticks
	STime   uint64
	Start   uint64 // field 22: clock ticks since boot
}

// ID is a process identity: a pid and the start time that goes with it.
type ID struct {
	PID   int
	Start uint64
}

func (s Stat) ID() ID { return ID{s.PID, s.Start} }

// Kernel reports whether s is a kernel thread.
func (s Stat) Kernel() bool { return s.Flags&pfKthread != 0 }

// Zombie reports whether s has exited and waits for its parent.
func (s Stat) Zombie() bool { return s.State == 'Z' || s.State == 'X' }

// ParseStat parses the contents of /proc/PID/stat. The comm field may hold
// spaces and parentheses, so fields are counted from the last ')'.
func ParseStat(b []byte) (Stat, error) {
	var s Stat
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 1 || end < open {
		return s, fmt.Errorf("stat %.40q: no (comm)", head(b))
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return s, fmt.Errorf("stat %.40q: pid: %w", head(b), err)
	}
	if pid < 1 {
		// A pid is positive; -1 given to kill(2) means every process.
		return s, fmt.Errorf("stat %.40q: pid %d is not a pid", head(b), pid)
	}
	s.PID, s.Comm = pid, string(b[open+1:end])
	rest := b[end+1:]
	fields, n := statFields(rest)
	if n < 20 || len(fields[0]) != 1 {
		return s, fmt.Errorf("stat of pid %d: %d fields after comm, want 20", pid, n)
	}
	s.State = fields[0][0]
	ints := []struct {
		dst *int
		f   int
	}{{&s.PPID, 1}, {&s.PGRP, 2}, {&s.Session, 3}}
	for _, x := range ints {
		v, err := strconv.Atoi(string(fields[x.f]))
		if err != nil {
			return s, fmt.Errorf("stat of pid %d: field %d: %w", pid, x.f+3, err)
		}
		*x.dst = v
	}
	if s.Flags, err = strconv.ParseUint(string(fields[6]), 10, 64); err != nil {
		return s, fmt.Errorf("stat of pid %d: flags: %w", pid, err)
	}
	if s.UTime, err = strconv.ParseUint(string(fields[11]), 10, 64); err != nil {
		return s, fmt.Errorf("stat of pid %d: utime: %w", pid, err)
	}
	if s.STime, err = strconv.ParseUint(string(fields[12]), 10, 64); err != nil {
		return s, fmt.Errorf("stat of pid %d: stime: %w", pid, err)
	}
	if s.Start, err = strconv.ParseUint(string(fields[19]), 10, 64); err != nil {
		return s, fmt.Errorf("stat of pid %d: start time: %w", pid, err)
	}
	return s, nil
}

// statFields splits the fields after the comm: 3..22 of proc(5) (state
// is field 3, the start time field 22); n is how many were found.
func statFields(rest []byte) (fields [20][]byte, n int) {
	for i := 0; i < len(rest) && n < len(fields); {
		for i < len(rest) && rest[i] == ' ' {
			i++
		}
		j := i
		for j < len(rest) && rest[j] != ' ' && rest[j] != '\n' {
			j++
		}
		if j > i {
			fields[n] = rest[i:j]
			n++
		}
		i = j + 1
	}
	return fields, n
}

// head copies the start of b for an error message, so that b itself does
// not escape: ReadStat's buffer then stays on the stack, which matters
// with the collector off during a run (a scan reads 12,000 of them).
func head(b []byte) string { return string(b[:min(len(b), 48)]) }

// FS is a /proc tree; Root is "/proc" but for tests on fixture trees.
type FS struct {
	Root string
	// Signals stands in for pidfds on a fixture tree, whose pids are not
	// processes of this machine: Open pins nothing, and Handle.Signal
	// calls it. It is nil on the machine's /proc. Open refuses a tree
	// other than Default's without it, so no test on a fixture tree can
	// signal a real process that happens to have a fixture's pid.
	Signals func(id ID, sig unix.Signal) error
}

// Default is the machine's /proc.
var Default = FS{Root: "/proc"}

// ReadStat reads and parses /proc/PID/stat. A process that is gone reads
// as an error matching fs.ErrNotExist: the caller treats it as "already
// gone".
func (p FS) ReadStat(pid int) (Stat, error) {
	var buf [512]byte
	n, err := readSmall(p.Root+"/"+strconv.Itoa(pid)+"/stat", buf[:])
	if err != nil {
		return Stat{}, err
	}
	return ParseStat(buf[:n])
}

// readSmall reads a small file into buf with one open, one read and one
// close: the scan does this for every process.
func readSmall(path string, buf []byte) (int, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, gone(err)
	}
	defer unix.Close(fd)
	n, err := unix.Read(fd, buf)
	if err != nil {
		return 0, gone(err)
	}
	return n, nil
}

// gone maps the errors of a vanished process to fs.ErrNotExist.
func gone(err error) error {
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("%w: %v", fs.ErrNotExist, err)
	}
	return err
}

// Task is one process as a scan sees it: its stat, and the identity of
// its executable (HasExe false for a zombie or a kernel thread). A BPF
// task iterator reports it in one pass (gate.Tasks); /proc gives the same
// through ReadStat and ExeFile.
type Task struct {
	Stat
	Exe    File
	HasExe bool
}
