package testenv

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A guard --auto that no test started is found and named by its pid; one
// that a test binary started (its parent runs NAME.test) is not, nor a
// guard without --auto, nor another program's --auto.
func TestFindAutoGuard(t *testing.T) {
	root := t.TempDir()
	mk := func(pid, ppid int, exe string, argv ...string) {
		d := filepath.Join(root, strconv.Itoa(pid))
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, "cmdline"), []byte(strings.Join(argv, "\x00")+"\x00"), 0o644)
		os.WriteFile(filepath.Join(d, "stat"), []byte(strconv.Itoa(pid)+" (a) b) S "+strconv.Itoa(ppid)+" 1 1 0\n"), 0o644)
		os.Symlink(exe, filepath.Join(d, "exe"))
	}
	mk(1, 0, "/sbin/init", "/sbin/init")
	mk(100, 1, "/tmp/go-build1/cmd.test", "/tmp/go-build1/cmd.test", "-test.v")
	mk(101, 100, "/tmp/x/freeze", "/tmp/x/freeze", "guard", "--auto", "300")
	mk(102, 1, "/usr/bin/freeze", "/usr/bin/freeze", "guard", "--run-dir", "/run/freeze")
	mk(103, 1, "/usr/bin/other", "/usr/bin/other", "guard", "--auto")
	if got := findAutoGuard(root); got != "" {
		t.Fatalf("found %q: the test's own guard, a guard without --auto, or another program", got)
	}
	mk(104, 1, "/usr/bin/freeze", "/usr/bin/freeze", "guard", "--auto", "500")
	if got := findAutoGuard(root); !strings.Contains(got, "pid 104") {
		t.Fatalf("found %q, want the machine's guard, pid 104", got)
	}
}

func TestIsAutoGuard(t *testing.T) {
	for argv, want := range map[string]bool{
		"freeze guard --auto 300":          true,
		"/usr/bin/freeze guard --auto=500": true,
		"freeze guard --auto=false":        false,
		"freeze guard":                     false,
		"freeze --auto":                    false,
		"sh guard --auto":                  false,
	} {
		if got := isAutoGuard(strings.Fields(argv)); got != want {
			t.Errorf("%q: %v, want %v", argv, got, want)
		}
	}
}
