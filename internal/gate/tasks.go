package gate

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"freeze/internal/proc"
)

// recSize is the size of one record of the scan program (task_rec).
const recSize = int(unsafe.Sizeof(gateTaskRec{}))

// USER_HZ: /proc's start time (field 22) is start_boottime in these
// units, rounded down.
const nsPerTick = 1e9 / 100

// ErrPidNamespace: freeze runs in a pid namespace of its own, whose pids
// are not the kernel's. The gate's programs see the kernel's: the
// identity reader knows freeze by its pid, the exemptions (freeze and its
// ancestors) are pids, and the scan iterator reports pids, so Load and
// the scan refuse there, and the run takes the cgroup methods. The gate
// would also see every process of the file on the machine, where freeze
// sees only its namespace's.
var ErrPidNamespace = errors.New("freeze runs in a pid namespace of its own, whose pids are not the kernel's, and the gate names processes by the kernel's: run freeze in the host's pid namespace to use it (nsenter --target 1 --pid, or a pod with hostPID: true)")

// initPidNS reports whether freeze runs in the initial pid namespace,
// where the iterator's pids are /proc's.
var initPidNS = proc.HostPidNS

// Tasks lists every process (thread group) as /proc would show it, in one
// pass of the gate's task iterator: pid, parent, start time, state, comm,
// and the executable's identity, appended to buf. Only in the initial pid
// namespace (else ErrPidNamespace). The kernel's task iterator does not
// show PID 1 here (measured on 6.18: it starts at 2); a scan never looks
// at PID 1.
//
// It is what a scan reads, without /proc: a few milliseconds for 12,000
// processes where reading /proc took about 0.2 s. The scan falls back to
// /proc for the link's text (deleted files, --under) and for --arg.
//
// A target's executable is reported with the identity stat(2) gave when
// freeze resolved it, which is what a scan compares: on btrfs subvolumes
// and overlays across filesystems the kernel's device is another (see
// kernelIDs). Other executables carry the kernel's identity, converted.
func (g *Gate) Tasks(buf []proc.Task) ([]proc.Task, error) { return g.scan.tasks(buf, g.statOf) }

// taskIter runs the scan program (set at load): its link is attached at
// the first use and kept until close.
//
// A run turns the garbage collector off, so a scan keeps what it
// allocates: the read buffer is reused, and comm strings are interned
// (a chain's thousands of processes share one).
type taskIter struct {
	prog  *ebpf.Program
	link  *link.Iter
	raw   bytes.Buffer
	comms map[[16]int8]string
}

func (ti *taskIter) tasks(buf []proc.Task, statOf map[gateFileId]proc.File) ([]proc.Task, error) {
	if ti.prog == nil {
		return buf, fmt.Errorf("the scan iterator: %w", ErrMissing)
	}
	if !initPidNS() {
		return buf, ErrPidNamespace
	}
	if ti.link == nil {
		l, err := link.AttachIter(link.IterOptions{Program: ti.prog})
		if err != nil {
			return buf, fmt.Errorf("the scan iterator: %w", err)
		}
		ti.link = l
	}
	r, err := ti.link.Open()
	if err != nil {
		return buf, fmt.Errorf("the scan iterator: %w", err)
	}
	defer r.Close()
	ti.raw.Reset()
	if _, err := ti.raw.ReadFrom(r); err != nil {
		return buf, fmt.Errorf("the scan iterator: %w", err)
	}
	if ti.comms == nil {
		ti.comms = map[[16]int8]string{}
	}
	b := ti.raw.Bytes()
	for len(b) >= recSize {
		var rec gateTaskRec
		if _, err := binary.Decode(b[:recSize], binary.NativeEndian, &rec); err != nil {
			return buf, fmt.Errorf("the scan iterator: %w", err)
		}
		b = b[recSize:]
		buf = append(buf, taskOf(rec, ti.comm(rec.Comm), statOf))
	}
	return buf, nil
}

// comm is the record's comm as a string, interned.
func (ti *taskIter) comm(c [16]int8) string {
	if s, ok := ti.comms[c]; ok {
		return s
	}
	b := make([]byte, 0, len(c))
	for _, ch := range c {
		if ch == 0 {
			break
		}
		b = append(b, byte(ch))
	}
	s := string(b)
	if len(ti.comms) < 4096 { // bounded: a machine has few distinct names
		ti.comms[c] = s
	}
	return s
}

func (ti *taskIter) close() error {
	if ti.link == nil {
		return nil
	}
	err := ti.link.Close()
	ti.link = nil
	return err
}

// taskOf turns a record into what /proc would say.
func taskOf(r gateTaskRec, comm string, statOf map[gateFileId]proc.File) proc.Task {
	t := proc.Task{
		Stat: proc.Stat{PID: int(r.Pid), PPID: int(r.Ppid), Comm: comm, Flags: uint64(r.Flags),
			Start: r.StartNs / nsPerTick, State: stateLetter(r.State, r.ExitState)},
		HasExe: r.HasExe != 0,
	}
	if t.HasExe {
		// The kernel's s_dev is major<<20 | minor; stat(2) encodes it
		// otherwise.
		t.Exe = proc.File{Dev: unix.Mkdev(r.Dev>>20, r.Dev&0xfffff), Ino: r.Ino, Nlink: uint64(r.Nlink)}
		if f, ok := statOf[gateFileId{Ino: r.Ino, Dev: r.Dev}]; ok {
			t.Exe.Dev = f.Dev
		}
	}
	return t
}

// stateLetter is /proc's state letter (fs/proc/array.c, task_state_index):
// the highest bit of (state | exit_state) & TASK_REPORT, with TASK_IDLE
// shown as I and an rtlock wait as D.
func stateLetter(state uint32, exit int32) byte {
	const (
		taskReport   = 0x7f
		taskIdle     = 0x402 // TASK_UNINTERRUPTIBLE | TASK_NOLOAD
		rtlockWait   = 0x1000
		uninterrupt  = 0x2
		letters      = "RSDTtXZPI"
		reportIdleIx = 8
	)
	s := (state | uint32(exit)) & taskReport
	switch state {
	case taskIdle:
		return letters[reportIdleIx]
	case rtlockWait:
		s = uninterrupt
	}
	i := 0
	for s != 0 {
		i++
		s >>= 1
	}
	return letters[i]
}
