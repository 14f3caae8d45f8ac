package census

import (
	"os"
	"path/filepath"
	"testing"
)

// A fixture tree of cgroups: the tightest is the one using the largest
// share of its pids.max, not the one with the largest count or the
// smallest limit; "max" is no limit.
func TestTightestPids(t *testing.T) {
	root := t.TempDir()
	for dir, files := range map[string][2]string{
		"":           {"max", "900"},
		"a":          {"1000", "500"}, // 0.5
		"a/b":        {"100", "90"},   // 0.9: the tightest
		"c":          {"max", "800"},
		"c/d":        {"50", "20"}, // 0.4
		"e/f/g/h":    {"10", "8"},  // 0.8
		"deep/1/2/3": {"", ""},
	} {
		p := filepath.Join(root, dir)
		os.MkdirAll(p, 0o755)
		if files[0] != "" {
			os.WriteFile(filepath.Join(p, "pids.max"), []byte(files[0]+"\n"), 0o644)
			os.WriteFile(filepath.Join(p, "pids.current"), []byte(files[1]+"\n"), 0o644)
		}
	}
	got := TightestPids([]string{root, filepath.Join(root, "missing")})
	if got == nil || got.Path != filepath.Join(root, "a/b") || got.Current != 90 || got.Max != 100 || got.Ratio != 0.9 {
		t.Fatalf("tightest %+v", got)
	}
	// A tie on share goes to the group with the least room.
	os.WriteFile(filepath.Join(root, "c/d/pids.max"), []byte("10"), 0o644)
	os.WriteFile(filepath.Join(root, "c/d/pids.current"), []byte("9"), 0o644)
	if got := TightestPids([]string{root}); got.Path != filepath.Join(root, "c/d") {
		t.Fatalf("tie: %+v", got)
	}
	if got := TightestPids([]string{filepath.Join(root, "deep")}); got != nil {
		t.Fatalf("no limit anywhere: %+v", got)
	}
}
