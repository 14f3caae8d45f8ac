package stop

import (
	"fmt"
	"strconv"

	"freeze/internal/freeze"
	"freeze/internal/match"
	"freeze/internal/timeline"
)

// checkRevocations applies the guard to every file to revoke: the targets,
// and the files under --under directories that matches run. It changes
// nothing.
func checkRevocations(c Config, res match.Result) ([]freeze.Revocation, []error) {
	var files []string
	seen := map[string]bool{}
	add := func(p string) {
		if p != "" && !seen[p] {
			seen[p] = true
			files = append(files, p)
		}
	}
	for _, t := range c.Spec.Targets {
		add(t.Path)
	}
	for _, p := range res.Procs {
		if p.Reason == match.ByUnder {
			add(p.Exe)
		}
	}
	roots := freeze.DisposableRoots(c.Disposable)
	var revs []freeze.Revocation
	var refused []error
	for _, f := range files {
		r, err := freeze.CheckRevoke(f, roots, c.Force)
		if err != nil {
			refused = append(refused, err)
			continue
		}
		revs = append(revs, r)
	}
	return revs, refused
}

// revFields records a revocation, with all that Revocations needs to put
// the mode back.
func revFields(r freeze.Revocation) timeline.Revoked {
	return timeline.Revoked{Path: r.Path, Dev: r.Dev, Ino: r.Ino, Mode: fmt.Sprintf("%#o", r.Mode),
		NewMode: fmt.Sprintf("%#o", r.NewMode), UID: r.UID, GID: r.GID, CtimeNS: strconv.FormatInt(r.Ctime, 10)}
}

// Revocations reads the revocations a run recorded in its timeline. A
// record that lacks what restore needs to check the file is an error:
// restore acts on nothing it cannot check.
func Revocations(events []timeline.Event) ([]freeze.Revocation, error) {
	var out []freeze.Revocation
	for i, e := range events {
		if e.Step != timeline.StepRevoke {
			continue
		}
		var v timeline.Revoked
		err := e.Decode(&v)
		m, err1 := strconv.ParseUint(v.Mode, 0, 32)
		nm, err2 := strconv.ParseUint(v.NewMode, 0, 32)
		if err != nil || v.Path == "" || v.Ino == 0 || err1 != nil || err2 != nil {
			return out, fmt.Errorf("event %d (revoke): incomplete record", i+1)
		}
		r := freeze.Revocation{Path: v.Path, Dev: v.Dev, Ino: v.Ino, Mode: uint32(m), NewMode: uint32(nm), UID: v.UID, GID: v.GID}
		r.Ctime, _ = strconv.ParseInt(v.CtimeNS, 10, 64)
		out = append(out, r)
	}
	return out, nil
}
