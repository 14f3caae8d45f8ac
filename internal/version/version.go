// Package version says which freeze this is: the module version, the
// commit it was built from, the Go release, whether cgo (and so the
// early priority lift) is on, and the hash of the gate's BPF object. It
// reads the build's own record (runtime/debug.ReadBuildInfo) and never
// fails: what the build did not record reads "unknown".
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"freeze/internal/gate"
)

// Info is this build.
type Info struct {
	Version  string `json:"version"` // the module's, "(devel)" for a local build
	Commit   string `json:"commit"`  // vcs.revision, with "+dirty" for a modified tree
	Go       string `json:"go"`
	Cgo      bool   `json:"cgo"`
	GateHash string `json:"gate_object_sha256"`
}

// Stamped by a package build (deploy/package/build), with -ldflags
// "-X freeze/internal/version.stamped=V -X ...stampedCommit=C": a build
// from a tarball or with -buildvcs=false records no VCS information.
var stamped, stampedCommit string

// Get reads this build's record.
func Get() (i Info) {
	i = Info{Version: "unknown", Commit: "unknown", Go: runtime.Version(), GateHash: gate.ObjectHash()}
	defer func() {
		if stamped != "" {
			i.Version = stamped
		}
		if stampedCommit != "" {
			i.Commit = stampedCommit
		}
	}()
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return i
	}
	if bi.Main.Version != "" {
		i.Version = bi.Main.Version
	}
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.Commit = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		case "CGO_ENABLED":
			i.Cgo = s.Value == "1"
		}
	}
	if dirty && i.Commit != "unknown" {
		i.Commit += "+dirty"
	}
	return i
}

// String is the one line 'freeze version' prints.
func (i Info) String() string {
	cgo := "cgo off: no early priority lift"
	if i.Cgo {
		cgo = "cgo on"
	}
	return fmt.Sprintf("freeze %s (commit %s, %s, %s, gate object sha256:%.12s)", i.Version, i.Commit, i.Go, cgo, i.GateHash)
}
