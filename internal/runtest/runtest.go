// Package runtest is test support: it removes, at a test's cleanup, what
// freeze runs against the test's own chain may leave when the test fails
// or kills them: the chain's groups, its run lock, and timelines in
// freeze's state directory. All are named after the chain's group name,
// which comes from the chain's file; that file lives in the test's own
// temporary directory, so nothing else on the machine has the name.
package runtest

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"freeze/internal/containtest"
	"freeze/internal/freeze"
	"freeze/internal/match"
	"freeze/internal/order"
	"freeze/internal/runlock"
	"freeze/internal/say"
	"freeze/internal/timeline"
)

// RemoveAtCleanup removes, at t's cleanup, what runs by --path against
// the chain at path left behind.
func RemoveAtCleanup(t testing.TB, path string) {
	t.Helper()
	tg, err := match.Resolve(path)
	if err != nil {
		t.Fatal(err)
	}
	name := freeze.GroupName(match.Spec{Targets: []match.Target{tg}})
	t.Cleanup(func() { Remove(t, name) })
}

// Remove removes the groups, the run lock and the state directory's
// timelines named after the group name. A run the test killed leaves its
// lock (harmless: the next run takes it over); a run that chose no
// timeline (a guard's) leaves its record in the state directory.
func Remove(t testing.TB, name string) {
	containtest.RemoveGroups(t, freeze.GroupDirs(name)...)
	os.Remove(filepath.Join(runlock.Dir(), name+".lock"))
	left, _ := filepath.Glob(filepath.Join(timeline.StateDir(), name+"-*.jsonl"))
	for _, f := range left {
		os.Remove(f)
	}
}

// RemoveRequests removes what the stop order's requests left, each given
// as its words (a guard's automatic holds, read from its log): each
// request's group name is made as the order makes it, so a hold of an
// unexpected chain (a test that failed) is removed too.
func RemoveRequests(t testing.TB, requests [][]string) {
	t.Helper()
	quiet := say.Out{Stdout: io.Discard, Stderr: io.Discard}
	for _, words := range requests {
		f, code := order.Parse(quiet, words)
		if code >= 0 {
			continue
		}
		if req, code := f.Request(quiet); code == 0 {
			Remove(t, req.Name)
		}
	}
}
