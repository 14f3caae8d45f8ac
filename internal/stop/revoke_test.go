package stop

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"freeze/internal/freeze"
	"freeze/internal/match"
	"freeze/internal/proc"
	"freeze/internal/proctest"
)

// The audit's move against --revoke-exec: the chain's owner swaps a
// directory of the matched path for a symlink to a directory holding
// another file of the same name (RENAME_EXCHANGE; in the audit, a root
// file), between the match and the revocation. The check resolves the
// path again and finds the other file: it is refused as not the file
// that was matched, and its mode is kept. Swapped back, the matched file
// is revocable only for its owner's chain: refused while no process of
// its owner runs it, allowed once one does. Identities and owners are
// what is checked, so the attack plays out as nobody (its own files, a
// fixture /proc whose process is nobody's and runs the real file).
func TestRevokeRefusesAFileSwappedInAfterTheMatch(t *testing.T) {
	base := t.TempDir()
	att := filepath.Join(base, "att")
	os.MkdirAll(filepath.Join(att, "d"), 0o755)
	tool := filepath.Join(att, "d", "tool")
	if err := os.WriteFile(tool, []byte("#!/bin/false\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	victimDir := filepath.Join(base, "victim")
	os.Mkdir(victimDir, 0o755)
	victim := filepath.Join(victimDir, "tool")
	if err := os.WriteFile(victim, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tg, err := match.Resolve(tool)
	if err != nil {
		t.Fatal(err)
	}
	// The swap: att/d and a symlink to the victim's directory exchange
	// places, in one step.
	link := filepath.Join(att, "link")
	if err := os.Symlink(victimDir, link); err != nil {
		t.Fatal(err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, link, unix.AT_FDCWD, filepath.Join(att, "d"), unix.RENAME_EXCHANGE); err != nil {
		t.Fatal(err)
	}
	tr := proctest.New(t)
	c := Config{Spec: match.Spec{Targets: []match.Target{tg}}, FS: tr.FS, Disposable: []string{base}}
	revs, refused := checkRevocations(c, match.Result{})
	if len(revs) != 0 || len(refused) != 1 || !strings.Contains(refused[0].Error(), "is not the file that was matched") {
		t.Fatalf("after the swap: revocations %+v, refusals %v; want the one refused as not the matched file", revs, refused)
	}
	if st, _ := os.Stat(victim); st.Mode().Perm() != 0o755 {
		t.Fatalf("the other file's mode is %v", st.Mode().Perm())
	}

	// Swapped back: no process of the file's owner runs it.
	if err := unix.Renameat2(unix.AT_FDCWD, link, unix.AT_FDCWD, filepath.Join(att, "d"), unix.RENAME_EXCHANGE); err != nil {
		t.Fatal(err)
	}
	if revs, refused := checkRevocations(c, match.Result{}); len(revs) != 0 || len(refused) != 1 || !strings.Contains(refused[0].Error(), "run by no process of the chain") {
		t.Fatalf("a file its owner's chain does not run: revocations %+v, refusals %v", revs, refused)
	}
	// A process of the owner's (the fixture /proc's owner) runs it.
	pid := tr.Add(0, tool)
	p, _ := tr.Get(pid)
	res := match.Result{Procs: []match.Proc{{ID: proc.ID{PID: pid, Start: p.Start}, Reason: match.ByPath, Exe: tool, OfFile: true}}}
	if revs, refused := checkRevocations(c, res); len(revs) != 1 || len(refused) != 0 || revs[0].Path != tool {
		t.Fatalf("the matched file, run by its owner's chain: revocations %+v, refusals %v", revs, refused)
	}
}

// The third audit's S3: with 0 processes matched, a target whose path a
// user had swapped to reach a root-owned file under /tmp was revoked
// (a root file passed the owner rule, and nothing asked whether the
// chain ran it). A file no matched process runs is refused, whoever
// owns it; and runByChain, which revoke asks before and after the
// chmod, says yes only for the very process that was matched.
func TestRevokeNeedsARunningMatch(t *testing.T) {
	// The audit's file: root's own, which the owner rule let through
	// (these tests run as nobody, so root's file is a record here).
	rootsFile := freeze.Revocation{Path: "/tmp/x/tool", Dev: 1, Ino: 2, UID: 0}
	if err := sameFile(rootsFile, proc.File{Dev: 1, Ino: 2}, nil); err == nil || !strings.Contains(err.Error(), "run by no process of the chain") {
		t.Errorf("root's file, run by no process of the chain: %v, want refused", err)
	}
	base := t.TempDir()
	rootFile := filepath.Join(base, "tool")
	if err := os.WriteFile(rootFile, []byte("#!/bin/false\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tg, err := match.Resolve(rootFile)
	if err != nil {
		t.Fatal(err)
	}
	tr := proctest.New(t)
	c := Config{Spec: match.Spec{Targets: []match.Target{tg}}, FS: tr.FS, Disposable: []string{base}}
	revs, refused := checkRevocations(c, match.Result{})
	if len(revs) != 0 || len(refused) != 1 || !strings.Contains(refused[0].Error(), "run by no process of the chain") {
		t.Fatalf("a file nothing runs, 0 matched: revocations %+v, refusals %v", revs, refused)
	}
	if st, _ := os.Stat(rootFile); st.Mode().Perm() != 0o755 {
		t.Fatalf("its mode is %v", st.Mode().Perm())
	}

	pid := tr.Add(0, rootFile)
	p, _ := tr.Get(pid)
	other := tr.Add(0, "/bin/true")
	po, _ := tr.Get(other)
	matched := match.Result{Procs: []match.Proc{
		{ID: proc.ID{PID: other, Start: po.Start}, Reason: match.ByPath, Exe: "/bin/true", OfFile: true},
		{ID: proc.ID{PID: pid, Start: p.Start}, Reason: match.ByPath, Exe: rootFile, OfFile: true},
	}}
	revs, refused = checkRevocations(c, matched)
	if len(revs) != 1 || len(refused) != 0 {
		t.Fatalf("the file a matched process runs: revocations %+v, refusals %v", revs, refused)
	}
	if !runByChain(tr.FS, matched, revs[0]) {
		t.Fatal("runByChain: no, for the file the matched process runs")
	}
	reused := match.Result{Procs: []match.Proc{{ID: proc.ID{PID: pid, Start: p.Start + 1}, Reason: match.ByPath, Exe: rootFile, OfFile: true}}}
	if runByChain(tr.FS, reused, revs[0]) {
		t.Fatal("runByChain: yes, for a pid whose start time is not the matched process's (reused)")
	}
	elsewhere := match.Result{Procs: matched.Procs[:1]}
	if runByChain(tr.FS, elsewhere, revs[0]) {
		t.Fatal("runByChain: yes, though the only matched process runs another file")
	}
}
