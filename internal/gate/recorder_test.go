package gate

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"freeze/internal/exefile"
	"freeze/internal/proc"
	"freeze/internal/testenv"
)

// The recorder keeps each process's argv as its exec gave it, read in the
// kernel: the whole argv when it fits the record, the elements that end
// within it when it does not, and nothing for a process that exec'd
// before it attached. A process that rewrites its argv afterwards (perl's
// $0) shows the new one in /proc and keeps the old one in its record
// (where there is a perl: the kernel matrix's guests have none). Each
// process is a copy of sh that stops itself, in a group of its own.
func TestRecorderRecordsArgvAtExec(t *testing.T) {
	testenv.RequireRoot(t, "loading BPF programs")
	dir := t.TempDir()
	sh := filepath.Join(dir, "sh")
	if err := exefile.Copy("/bin/sh", sh); err != nil {
		t.Fatal(err)
	}
	const stop = "kill -STOP $$"
	before := start(t, sh, "-c", stop, "sh", "before")
	r, err := StartRecorder()
	if err != nil {
		testenv.GateMissing(t, "the argv recorder: "+err.Error())
	}
	defer r.Close()

	if _, _, err := r.Args(pin(t, before.Process.Pid)); !errors.Is(err, ErrNoRecord) {
		t.Errorf("a process exec'd before the recorder attached: err %v, want ErrNoRecord", err)
	}

	short := start(t, sh, "-c", stop, "sh", "marker")
	args, full, err := recorded(t, r, short.Process.Pid)
	if err != nil || !full || !reflect.DeepEqual(args, short.Args) {
		t.Errorf("record of %q: %q full=%v err=%v", short.Args, args, full, err)
	}

	long := []string{"-c", stop, "sh"}
	for i := 0; i < 40; i++ {
		long = append(long, "element-"+string(rune('a'+i%26))) // 10 bytes and a NUL each: 440 and more
	}
	cut := start(t, sh, long...)
	args, full, err = recorded(t, r, cut.Process.Pid)
	switch {
	case err != nil || full:
		t.Errorf("record of a %d-element argv: full=%v err=%v, want a cut record", len(cut.Args), full, err)
	case len(args) < 5 || len(args) >= len(cut.Args) || !reflect.DeepEqual(args, cut.Args[:len(args)]):
		t.Errorf("a cut record holds %q, want a whole-element prefix of %q", args, cut.Args)
	case len(strings.Join(args, "\x00"))+1 > argvRecordSize:
		t.Errorf("a cut record holds %d bytes of elements, more than its %d", len(strings.Join(args, "\x00"))+1, argvRecordSize)
	}

	if _, err := os.Stat("/usr/bin/perl"); err != nil {
		t.Logf("no perl here (%v): a rewritten argv is not checked", err)
		return
	}
	perl := filepath.Join(dir, "perl")
	if err := exefile.Copy("/usr/bin/perl", perl); err != nil {
		t.Fatal(err)
	}
	renamed := start(t, perl, "-e", `$0 = "renamed"; sleep 30`, "marker")
	var now []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if now, err = proc.Default.Args(renamed.Process.Pid); err == nil && len(now) > 0 && now[0] == "renamed" {
			break
		}
	}
	if len(now) == 0 || now[0] != "renamed" {
		t.Fatalf("perl did not rename itself: /proc shows %q", now)
	}
	args, full, err = recorded(t, r, renamed.Process.Pid)
	if err != nil || !full || !reflect.DeepEqual(args, renamed.Args) {
		t.Errorf("record of perl renamed (/proc shows %q): %q full=%v err=%v, want %q", now, args, full, err, renamed.Args)
	}
	// The machine's other execs count too: only a floor is ours to check.
	if n, failed, err := r.Counts(); err != nil || n < 3 {
		t.Errorf("the recorder counts %d execs recorded (%v), fewer than this test's 3", n, err)
	} else {
		t.Logf("%d execs recorded, %d not, since the recorder attached", n, failed)
	}
}

// recorded is r.Args of pid once its exec has reached the recorder: an
// exec lets its parent go (its vfork, its close-on-exec descriptors)
// before the exec's tracepoint, so a record may come a little after the
// new exe link and Start's return.
func recorded(t *testing.T, r *Recorder, pid int) (args []string, full bool, err error) {
	t.Helper()
	h := pin(t, pid)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		args, full, err = r.Args(h)
		if !errors.Is(err, ErrNoRecord) || time.Now().After(deadline) {
			return args, full, err
		}
	}
}

// start runs path with args in a process group of its own, killed as a
// group at cleanup, and waits for its exec.
func start(t *testing.T, path string, args ...string) *exec.Cmd {
	t.Helper()
	c := exec.Command(path, args...)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		c.Wait()
	})
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if exe, err := os.Readlink("/proc/" + strconv.Itoa(c.Process.Pid) + "/exe"); err == nil && exe == path {
			return c
		}
	}
	t.Fatalf("%s did not exec in 10 s", path)
	return nil
}

// Counts are how many execs the recorder recorded, and how many it could
// not (no storage, or an argv it could not read): the kernel counts
// them (C_RECORDED, C_RECORD_FAILED), and only this test reads them.
func (r *Recorder) Counts() (recorded, failed uint64, err error) {
	c := r.ld.maps["counters"]
	if err = c.Lookup(uint32(gateCounterC_RECORDED), &recorded); err == nil {
		err = c.Lookup(uint32(gateCounterC_RECORD_FAILED), &failed)
	}
	return recorded, failed, err
}
