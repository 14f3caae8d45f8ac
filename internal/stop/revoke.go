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
func revFields(r freeze.Revocation) timeline.F {
	return timeline.F{"path": r.Path, "dev": r.Dev, "ino": r.Ino, "mode": fmt.Sprintf("%#o", r.Mode),
		"new_mode": fmt.Sprintf("%#o", r.NewMode), "uid": r.UID, "gid": r.GID, "ctime_ns": strconv.FormatInt(r.Ctime, 10)}
}

// Revocations reads the revocations a run recorded in its timeline.
func Revocations(events []timeline.Event) ([]freeze.Revocation, error) {
	var out []freeze.Revocation
	for i, e := range events {
		if e.Step != timeline.StepRevoke {
			continue
		}
		var r freeze.Revocation
		r.Path, _ = e.Fields["path"].(string)
		dev, ok1 := e.Fields["dev"].(float64)
		ino, ok2 := e.Fields["ino"].(float64)
		mode, _ := e.Fields["mode"].(string)
		newMode, _ := e.Fields["new_mode"].(string)
		uid, _ := e.Fields["uid"].(float64)
		gid, _ := e.Fields["gid"].(float64)
		m, err1 := strconv.ParseUint(mode, 0, 32)
		nm, err2 := strconv.ParseUint(newMode, 0, 32)
		if r.Path == "" || !ok1 || !ok2 || err1 != nil || err2 != nil {
			return out, fmt.Errorf("event %d (revoke): incomplete record", i+1)
		}
		r.Dev, r.Ino, r.Mode, r.NewMode, r.UID, r.GID = uint64(dev), uint64(ino), uint32(m), uint32(nm), int(uid), int(gid)
		if ct, ok := e.Fields["ctime_ns"].(string); ok {
			r.Ctime, _ = strconv.ParseInt(ct, 10, 64)
		}
		out = append(out, r)
	}
	return out, nil
}
