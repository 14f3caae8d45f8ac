package containtest

import (
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"freeze/internal/exefile"
)

//go:embed fixture/chain.c
var chainSource []byte

var built struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// fixture compiles the chain fixture once per test binary with the
// system's cc and returns the path of the build. Tests never run the build
// itself: they run a copy in their own temporary directory.
//
// CONTAINTEST_CHAIN names a chain fixture built beforehand (the VM
// matrix builds it statically on the host, since the VM has no
// compiler): it is used as it is, and still only ever run as a copy.
func fixture() (string, error) {
	built.once.Do(func() {
		if p := os.Getenv("CONTAINTEST_CHAIN"); p != "" {
			if _, err := os.Stat(p); err != nil {
				built.err = fmt.Errorf("CONTAINTEST_CHAIN: %w", err)
			}
			built.path = p
			return
		}
		cc, err := exec.LookPath("cc")
		if err != nil {
			built.err = fmt.Errorf("no C compiler (cc) on PATH to build the chain fixture: install gcc: %w", err)
			return
		}
		dir, err := os.MkdirTemp("", "containtest-build-")
		if err != nil {
			built.err = err
			return
		}
		built.dir = dir
		src := filepath.Join(dir, "chain.c")
		if err := os.WriteFile(src, chainSource, 0o644); err != nil {
			built.err = err
			return
		}
		out := filepath.Join(dir, "chain")
		// Static when the C library allows it: exec of a static binary skips
		// the dynamic loader, so hand-off hops are cheap.
		if msg, err := exec.Command(cc, "-O2", "-static", "-o", out, src).CombinedOutput(); err != nil {
			if msg2, err2 := exec.Command(cc, "-O2", "-o", out, src).CombinedOutput(); err2 != nil {
				built.err = fmt.Errorf("build chain fixture: %v\n%s\n%s", err2, msg, msg2)
				return
			}
		}
		built.path = out
	})
	return built.path, built.err
}

// copyExecutable copies a fixture or a program into a test cache.
var copyExecutable = exefile.Copy

// goBuilt is the one 'go build' of each package a test binary asked
// GoBinary for, in a directory removed when Main returns.
var goBuilt struct {
	mu   sync.Mutex
	dir  string
	bins map[string]string
}

// GoBinary builds the Go package pkg (a directory, as 'go build' takes
// it) once per test binary and returns the test's own copy of the
// build, named name, in the test's temporary directory: every test runs its own
// file, and a package of 35 tests that each ran 'go build' spent minutes
// linking on a loaded machine. env, if set (FREEZE_TEST_BIN, say), names
// a prebuilt binary to copy instead (the kernel matrix's VMs have no go).
func GoBinary(t testing.TB, pkg, name, env string) string {
	t.Helper()
	goBuilt.mu.Lock()
	src, ok := goBuilt.bins[pkg]
	if pre := os.Getenv(env); env != "" && pre != "" {
		src, ok = pre, true
	}
	if !ok {
		var err error
		if goBuilt.dir == "" {
			if goBuilt.dir, err = os.MkdirTemp("", "containtest-go-"); err != nil {
				goBuilt.mu.Unlock()
				t.Fatal(err)
			}
			goBuilt.bins = map[string]string{}
		}
		src = filepath.Join(goBuilt.dir, fmt.Sprintf("bin%d", len(goBuilt.bins)), name)
		out, err := exec.Command("go", "build", "-o", src, pkg).CombinedOutput()
		if err != nil {
			goBuilt.mu.Unlock()
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
		goBuilt.bins[pkg] = src
	}
	goBuilt.mu.Unlock()
	dst := filepath.Join(t.TempDir(), name)
	if err := exefile.Copy(src, dst); err != nil {
		t.Fatalf("copy %s into the test's directory: %v", src, err)
	}
	return dst
}
