package gate

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"freeze/internal/proc"
)

// argvRecSize is the size of one argv record's header (argv_rec).
const argvRecSize = int(unsafe.Sizeof(gateArgvRec{}))

// argvMax is the most of one argv the iterator copies (ARGV_MAX).
const argvMax = 4096

// argvIter runs the argv reader (set by LoadArgv): its link is attached
// at the first use and kept until close.
type argvIter struct {
	prog *ebpf.Program
	link *link.Iter
	raw  bytes.Buffer
}

// LoadArgv loads the argv reader, for a run that matches by --arg (and a
// guard's spare, ahead of one). It needs a sleepable task iterator and
// bpf_copy_from_user_task (Linux 5.18); where it does not load, Missing
// says why, and a scan reads each argv from /proc. After Attach, as
// LoadExtras.
func (g *Gate) LoadArgv() {
	if g.argv.prog != nil || g.argvTried {
		return
	}
	g.argvTried = true
	t0 := time.Now()
	var err error
	if g.argv.prog, err = g.ld.prog("gate_argv"); err != nil {
		g.Missing = append(g.Missing, Kind{Name: sections["gate_argv"], Why: Explain(err) + "; --arg reads each argv from /proc"})
	}
	g.ExtrasTook += time.Since(t0)
}

// CanReadArgv reports whether Argv can run: the argv reader loaded.
func (g *Gate) CanReadArgv() bool { return g.argv.prog != nil }

// Argv reads, in one pass of the argv reader, the argv of every process
// (thread group) that runs one of the gate's files, keyed by pid and
// start time as /proc gives them. An argv longer than the reader copies
// (4 KiB), or one it could not read, is left out: the caller reads that
// one from /proc. Only in the initial pid namespace (else
// ErrPidNamespace), as Tasks.
//
// What a process wrote over its own argv area is what the kernel reads
// here, as /proc/PID/cmdline would show it; the elements are split at
// NUL, and a trailing NUL ends the last one.
func (g *Gate) Argv() (map[proc.ID][]string, error) { return g.argv.read() }

func (ai *argvIter) read() (map[proc.ID][]string, error) {
	if ai.prog == nil {
		return nil, fmt.Errorf("the argv reader: %w", ErrMissing)
	}
	if !initPidNS() {
		return nil, ErrPidNamespace
	}
	if ai.link == nil {
		l, err := link.AttachIter(link.IterOptions{Program: ai.prog})
		if err != nil {
			return nil, fmt.Errorf("the argv reader: %w", err)
		}
		ai.link = l
	}
	r, err := ai.link.Open()
	if err != nil {
		return nil, fmt.Errorf("the argv reader: %w", err)
	}
	defer r.Close()
	ai.raw.Reset()
	if _, err := ai.raw.ReadFrom(r); err != nil {
		return nil, fmt.Errorf("the argv reader: %w", err)
	}
	return parseArgv(ai.raw.Bytes())
}

// parseArgv splits the reader's output: a header, then its len bytes.
func parseArgv(b []byte) (map[proc.ID][]string, error) {
	out := map[proc.ID][]string{}
	for len(b) > 0 {
		if len(b) < argvRecSize {
			return nil, fmt.Errorf("the argv reader: a record cut short (%d bytes)", len(b))
		}
		var rec gateArgvRec
		if _, err := binary.Decode(b[:argvRecSize], binary.NativeEndian, &rec); err != nil {
			return nil, fmt.Errorf("the argv reader: %w", err)
		}
		b = b[argvRecSize:]
		n := int(rec.Len)
		if n > argvMax || n > len(b) {
			return nil, fmt.Errorf("the argv reader: a record of %d bytes, %d left", n, len(b))
		}
		data := b[:n]
		b = b[n:]
		if rec.Err != 0 || uint64(n) != rec.Whole || n == 0 {
			continue // unread, cut, or none: /proc's to say
		}
		out[proc.ID{PID: int(rec.Pid), Start: rec.StartNs / nsPerTick}] = splitArgv(data)
	}
	return out, nil
}

// splitArgv splits argv's bytes at NUL as procfs splits cmdline: the
// trailing NULs cut, then one element per NUL.
func splitArgv(b []byte) []string {
	b = bytes.TrimRight(b, "\x00")
	if len(b) == 0 {
		return []string{}
	}
	var args []string
	for _, a := range bytes.Split(b, []byte{0}) {
		args = append(args, string(a))
	}
	return args
}

func (ai *argvIter) close() error {
	if ai.link == nil {
		return nil
	}
	err := ai.link.Close()
	ai.link = nil
	return err
}
