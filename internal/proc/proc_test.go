package proc

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/containtest"
)

func TestMain(m *testing.M) { os.Exit(containtest.Main(m)) }

func TestParseStat(t *testing.T) {
	tail := " 1 2 3 4 5 4194560 7 8 9 10 11 12 13 14 15 16 17 18 987654 20 21\n"
	tests := []struct {
		name    string
		in      string
		want    Stat
		wantErr bool
	}{
		{"plain", "42 (chain) S" + tail, Stat{PID: 42, Comm: "chain", State: 'S', PPID: 1, PGRP: 2, Session: 3, Flags: 4194560, UTime: 11, STime: 12, Start: 987654}, false},
		{"comm with spaces and parens", "7 (a) b (c) Z" + tail, Stat{PID: 7, Comm: "a) b (c", State: 'Z', PPID: 1, PGRP: 2, Session: 3, Flags: 4194560, UTime: 11, STime: 12, Start: 987654}, false},
		{"empty comm", "8 () R" + tail, Stat{PID: 8, Comm: "", State: 'R', PPID: 1, PGRP: 2, Session: 3, Flags: 4194560, UTime: 11, STime: 12, Start: 987654}, false},
		{"truncated", "9 (x) S 1 2 3", Stat{}, true},
		{"no comm", "9 x S" + tail, Stat{}, true},
		{"bad pid", "x9 (x) S" + tail, Stat{}, true},
		{"bad start", "9 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 oops 20", Stat{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseStat([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v, wantErr %v", err, tt.wantErr)
			}
			if !tt.wantErr && got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestKernelThreadFlag(t *testing.T) {
	st, err := Default.ReadStat(2) // kthreadd
	if err != nil {
		t.Skipf("no pid 2 here: %v", err)
	}
	if st.Comm == "kthreadd" && !st.Kernel() {
		t.Fatalf("kthreadd not seen as a kernel thread: flags %#x", st.Flags)
	}
	self, _ := Default.ReadStat(os.Getpid())
	if self.Kernel() {
		t.Fatal("the test process seen as a kernel thread")
	}
}

// The pidfd recheck refuses a process whose start time is not the one the
// scan saw: that is what a reused pid looks like.
func TestOpenRefusesChangedStartTime(t *testing.T) {
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Tree, Cap: 3, HopCap: 100, Timeout: 30 * time.Second})
	st, err := Default.ReadStat(c.Leader)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Default.Open(ID{PID: c.Leader, Start: st.Start + 1}); !errors.Is(err, ErrReused) {
		t.Fatalf("Open with another start time: %v, want ErrReused", err)
	}
	h, err := Default.Open(st.ID())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Signal(unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if s, _ := Default.ReadStat(c.Leader); s.State == 'T' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the signal through the handle did not reach the process")
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.Kill()
	if _, err := Default.Open(st.ID()); !errors.Is(err, ErrGone) && !errors.Is(err, ErrReused) {
		t.Fatalf("Open after the kill: %v, want ErrGone", err)
	}
}

func TestExeFileOfDeletedBinary(t *testing.T) {
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Tree, Cap: 1, HopCap: 100, Timeout: 30 * time.Second})
	for deadline := time.Now().Add(5 * time.Second); ; {
		if p, _, err := Default.ExePath(c.Leader); err == nil && p == c.Path {
			break // the leader runs the copy
		}
		if time.Now().After(deadline) {
			t.Fatalf("the leader %d does not run %s after 5 s", c.Leader, c.Path)
		}
		time.Sleep(5 * time.Millisecond)
	}
	before, err := Default.ExeFile(c.Leader)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(c.Path, c.Path+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(c.Path + ".old"); err != nil {
		t.Fatal(err)
	}
	after, err := Default.ExeFile(c.Leader)
	if err != nil {
		t.Fatal(err)
	}
	if after.Ino != before.Ino || after.Nlink != 0 {
		t.Fatalf("deleted binary: before %+v after %+v, want the same inode with no links", before, after)
	}
	path, deleted, err := Default.ExePath(c.Leader)
	if err != nil || !deleted || path != c.Path+".old" {
		t.Fatalf("ExePath = %q, %v, %v; want %q, deleted", path, deleted, err, c.Path+".old")
	}
}

// HidePID reads the mount table of a fixture tree (self/mountinfo) with
// procfs, and takes the hidepid super option of the proc mount.
func TestHidePID(t *testing.T) {
	const plain = "21 26 0:20 / /proc rw,relatime - proc proc rw\n"
	cases := []struct {
		name, info, want string
	}{
		{"none", plain, ""},
		{"invisible", plain + "62 44 0:38 / /proc rw,relatime - proc proc rw,hidepid=invisible\n", "invisible"},
		{"numeric", "21 26 0:20 / /proc rw shared:12 - proc proc rw,hidepid=2,gid=5\n", "2"},
		{"zero", "21 26 0:20 / /proc rw - proc proc rw,hidepid=0\n", ""},
		{"later mount wins", "21 26 0:20 / /proc rw - proc proc rw,hidepid=2\n" + plain, ""},
		{"other mount point", "30 26 0:21 / /mnt/proc rw - proc proc rw,hidepid=2\n" + plain, ""},
		{"not proc", "30 26 0:21 / /proc rw - tmpfs none rw,hidepid=2\n", ""},
	}
	for _, c := range cases {
		root := t.TempDir()
		if err := os.Mkdir(filepath.Join(root, "self"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "self", "mountinfo"), []byte(c.info), 0o644); err != nil {
			t.Fatal(err)
		}
		fs, err := FS{Root: root}.procfs()
		if err != nil {
			t.Fatal(err)
		}
		mounts, err := fs.GetMounts()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := hidePID(mounts, "/proc"); got != c.want {
			t.Errorf("%s: hidepid %q, want %q", c.name, got, c.want)
		}
	}
}

// PeakRSS, Wchan and Args read a fixture tree through procfs.
func TestColdReadersOnAFixtureTree(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "4242")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"status":  "Name:\tchain\nVmHWM:\t   15460 kB\nVmRSS:\t   12000 kB\n",
		"wchan":   "do_wait",
		"cmdline": "/tmp/x/chain\x00-g\x00--\x00",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fs := FS{Root: root}
	if kib, err := fs.PeakRSS(4242); err != nil || kib != 15460 {
		t.Errorf("PeakRSS = %d, %v; want 15460", kib, err)
	}
	if w := fs.Wchan(4242); w != "do_wait" {
		t.Errorf("Wchan = %q", w)
	}
	if args, err := fs.Args(4242); err != nil || strings.Join(args, " ") != "/tmp/x/chain -g --" {
		t.Errorf("Args = %q, %v", args, err)
	}
	if _, err := fs.PeakRSS(4243); err == nil {
		t.Error("PeakRSS of a missing process gave no error")
	}
}

// PIDs parses directory entries itself: only names made of digits are
// pids, in a directory of many entries (more than one getdents buffer).
func TestPIDsParsesEntries(t *testing.T) {
	dir := t.TempDir()
	want := map[int]bool{}
	for i := 1; i <= 3000; i += 3 {
		if err := os.Mkdir(filepath.Join(dir, strconv.Itoa(i)), 0o755); err != nil {
			t.Fatal(err)
		}
		want[i] = true
	}
	for _, name := range []string{"self", "thread-self", "4x", "x4", "sys", "1234567890123"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := FS{Root: dir}.PIDs(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("PIDs gave %d entries, want %d", len(got), len(want))
	}
	for _, pid := range got {
		if !want[pid] {
			t.Fatalf("PIDs gave %d, not an entry made of digits in %s", pid, dir)
		}
		delete(want, pid)
	}
	if _, err := (FS{Root: filepath.Join(dir, "none")}).PIDs(nil); err == nil {
		t.Fatal("PIDs of a missing directory gave no error")
	}
}

// On the machine's /proc, PIDs finds this process.
func TestPIDsFindsSelf(t *testing.T) {
	got, err := Default.PIDs(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(got, os.Getpid()) {
		t.Fatalf("PIDs of /proc (%d entries) lacks this process %d", len(got), os.Getpid())
	}
}
