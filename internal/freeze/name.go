package freeze

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"freeze/internal/match"
)

// GroupName names the group for a set of targets: the same targets give
// the same name, which is how a run finds the group a --hold run (or an
// interrupted one) left. A target is its device, inode and, where the
// filesystem keeps one, birth time: a filesystem reuses an inode number
// after a deletion, and a new binary must not find (and finish) the group
// an old incident's --hold left (#24, finding 8).
func GroupName(spec match.Spec) string {
	var keys []string
	base := "under"
	for _, t := range spec.Targets {
		k := fmt.Sprintf("%d:%d", t.File.Dev, t.File.Ino)
		if t.Birth != 0 {
			k += fmt.Sprintf(":%d", t.Birth)
		}
		keys = append(keys, k)
		base = t.Basename
	}
	keys = append(keys, spec.Under...)
	keys = append(keys, spec.Args...)
	// One container's hold is not another's, nor the host's, of the
	// same file (a directory bound into both): a run on the host must
	// not take over, thaw or finish a container's held group.
	if spec.Scope.ID != "" {
		keys = append(keys, "\x01container:"+spec.Scope.ID)
	}
	if spec.Scope.Pod != "" {
		keys = append(keys, "\x01pod:"+spec.Scope.Pod)
	}
	// Nor one group's chain another's (--cgroup: the cap's hold of one
	// unit's chain, then of another unit's of the same file).
	if spec.Cgroup != "" {
		keys = append(keys, "\x01cgroup:"+spec.Cgroup)
	}
	sort.Strings(keys)
	sum := sha256.Sum256([]byte(strings.Join(keys, "\x00")))
	clean := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, base)
	if len(clean) > 32 {
		clean = clean[:32]
	}
	return "freeze-" + clean + "-" + hex.EncodeToString(sum[:4])
}

// GroupDirs lists the cgroup directories named name that exist: where a
// --hold or interrupted run left its frozen groups (cgroup v2: nested in
// the chain's own groups, or the marks of groups frozen in place, which
// sit inside them; or the v1 freezer's).
func GroupDirs(name string) []string {
	var out []string
	if mount, err := Cgroup2Mount(); err == nil {
		out = append(out, findNamed(mount, name)...)
	}
	if d := filepath.Join(freezerRoot, name); fileExists(d) {
		out = append(out, d)
	}
	return out
}
