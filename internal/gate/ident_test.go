package gate

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"freeze/internal/proc"
	"freeze/internal/testenv"
)

// The identity reader is attached to freeze's own process, not to every
// task on the machine: the kernel's record of the link (its fdinfo, Linux
// 6.1) names the process, and the reader still sees freeze's own
// descriptors through it.
func TestIdentityReaderWalksOnlyFreezesOwnFiles(t *testing.T) {
	testenv.RequireRoot(t, "loading BPF programs")
	g, err := Load(Config{Exempt: Exempt(proc.Default), Ahead: true})
	if err != nil {
		testenv.GateMissing(t, Explain(err))
	}
	defer g.Close()
	if g.ident == nil {
		t.Skipf("the identity reader does not load here: %v", g.Missing)
	}
	// The reader sees a descriptor this test opened, as the file it is
	// (on every kernel: below, whether it walked only this process).
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	byFD, err := g.readIdent()
	if err != nil {
		t.Fatal(err)
	}
	id, ok := byFD[uint32(f.Fd())]
	if !ok || id.Ino != st.Ino {
		t.Fatalf("the reader's record of fd %d is %+v (seen %v), want inode %d", f.Fd(), id, ok, st.Ino)
	}
	l, err := ownFilesLink(g.ident)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(l)
	info, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", l))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(info), "task_type:") {
		t.Skipf("this kernel's iterator link has no task parameter (Linux 6.1), and the reader walks every task, as it did before:\n%s", info)
	}
	for _, want := range []string{"task_type:\tTID\n", fmt.Sprintf("tid:\t%d\n", os.Getpid())} {
		if !strings.Contains(string(info), want) {
			t.Errorf("the identity reader's link does not say %q: it walks more than freeze's own process:\n%s", want, info)
		}
	}
}
