package gate

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"freeze/internal/containtest"
	"freeze/internal/proc"
	"freeze/internal/testenv"
)

// The argv reader says what /proc/PID/cmdline says, for each process of
// the gate's file, in one pass; an argv longer than it copies is left
// to /proc, and a process of another file is not read at all.
func TestArgvReaderReadsWhatProcSays(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "never")
	if err := mkfifo(fifo); err != nil {
		t.Fatal(err)
	}
	idle := "read x < " + fifo
	// The chain's file (a copy of sh), run with an argument of its own.
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Name: "argvsh", Cap: 20, HopCap: 1000000, Timeout: 300 * time.Second,
		Command: []string{"/bin/sh", "-c", idle, "argv-tagged", "one", ""}})
	long := strings.Repeat("L", 5000)
	cut := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Name: "argvlong", Cap: 20, HopCap: 1000000, Timeout: 300 * time.Second,
		Command: []string{"/bin/sh", "-c", "exec " + c.Path + " -c '" + idle + "' " + long}, Dir: c.Dir})
	// A process of another file (the test cache's second copy of sh).
	other := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Name: "argvother", Cap: 20, HopCap: 1000000, Timeout: 300 * time.Second,
		Command: []string{"/bin/sh", "-c", idle, "argv-other"}, Dir: c.Dir})
	// Each runs its file before the gate: an exec of the file after it
	// would be stopped there, as a new hop of the chain.
	end := time.Now().Add(60 * time.Second)
	for _, w := range []struct {
		pid  int
		path string
	}{{c.Leader, c.Path}, {cut.Leader, c.Path}, {other.Leader, other.Path}} {
		for {
			if exe, _, _ := proc.Default.ExePath(w.pid); exe == w.path {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("pid %d did not exec %s in 60 s", w.pid, w.path)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	g := attach(t, fileOf(t, c.Path))
	g.LoadArgv()
	if !g.CanReadArgv() {
		testenv.GateAlsoMissing(t, 5, 18, fmt.Sprintf("the argv reader does not load: %v", g.Missing))
	}
	got, err := g.Argv()
	if err != nil {
		t.Fatalf("Argv: %v", err)
	}
	for _, pid := range []int{c.Leader, cut.Leader, other.Leader} {
		if _, err := proc.Default.ReadStat(pid); err != nil {
			t.Fatalf("pid %d is gone: %v", pid, err)
		}
	}
	st, err := proc.Default.ReadStat(c.Leader)
	if err != nil {
		t.Fatal(err)
	}
	want, err := proc.Default.Args(c.Leader)
	if err != nil {
		t.Fatal(err)
	}
	if args, ok := got[st.ID()]; !ok || !slices.Equal(args, want) {
		t.Errorf("pid %d: the reader gives %q (found %v), /proc %q", c.Leader, args, ok, want)
	}
	if !slices.Contains(want, "argv-tagged") {
		t.Errorf("/proc's argv %q lacks the test's tag: the fixture did not run as meant", want)
	}
	for id := range got {
		switch id.PID {
		case cut.Leader:
			t.Errorf("pid %d's argv (over 4 KiB) was given cut, not left to /proc", id.PID)
		case other.Leader:
			t.Errorf("pid %d runs another file, and its argv was read", id.PID)
		}
	}
}

func TestParseArgvLeavesOutWhatItCouldNotRead(t *testing.T) {
	rec := func(pid uint32, whole uint64, err int32, data string) []byte {
		h := gateArgvRec{Pid: pid, Len: uint32(len(data)), Whole: whole, StartNs: 3 * nsPerTick, Err: err}
		b := make([]byte, argvRecSize)
		if _, e := binary.Encode(b, binary.NativeEndian, h); e != nil {
			t.Fatal(e)
		}
		return append(b, data...)
	}
	var b []byte
	b = append(b, rec(10, 6, 0, "a\x00bc\x00\x00")...)
	b = append(b, rec(11, 5000, 0, strings.Repeat("x", 4096))...) // cut
	b = append(b, rec(12, 10, -14, "")...)                        // unreadable
	b = append(b, rec(13, 0, 0, "")...)                           // none
	got, err := parseArgv(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !slices.Equal(got[proc.ID{PID: 10, Start: 3}], []string{"a", "bc"}) {
		t.Errorf("parseArgv = %v, want pid 10 alone, [a bc]", got)
	}
	if _, err := parseArgv(b[:len(b)-3]); err == nil {
		t.Error("a record cut short was taken")
	}
}
