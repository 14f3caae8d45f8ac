package stop

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"freeze/internal/exefile"
)

// nobody is the uid and gid this package's tests run as.
const nobody = 65534

// TestMain runs this package's tests as nobody. As root it re-runs a copy
// of the test binary as uid 65534 with the same flags and exits as it
// does: the stop order's logic is proven on fixture trees, where no gate
// can load (bpf and auto take their fallback paths, through the opener)
// and nothing could reach a real process even by mistake. Its proof
// against the kernel, on live chains as root, is internal/stop/live.
//
// Fuzzing runs as whoever asked (its cache is theirs): -test.fuzz and
// the coordinator's workers are not re-run.
func TestMain(m *testing.M) {
	flag.Parse()
	if os.Getuid() != 0 || flagSet("test.fuzz") || flagSet("test.fuzzworker") {
		os.Exit(m.Run())
	}
	code, err := asNobody()
	if err != nil {
		fmt.Fprintf(os.Stderr, "internal/stop: re-running the tests as nobody: %v\n", err)
		os.Exit(2)
	}
	os.Exit(code)
}

// flagSet reports a testing flag given a value other than its zero.
func flagSet(name string) bool {
	f := flag.Lookup(name)
	return f != nil && f.Value.String() != "" && f.Value.String() != "false"
}

// asNobody runs a copy of this binary as nobody, in its own process group
// (killed as a group at the end, and with this process), and returns its
// exit code. The copy is in a directory of its own that nobody may read
// (go's build directory is root's alone), removed after. go test's log
// file (root's, for its cache) is not passed on, since the copy could not
// write it: this process writes it.
func asNobody() (int, error) {
	self, err := os.Executable()
	if err != nil {
		return 0, err
	}
	dir, err := os.MkdirTemp("", "freeze-stop-nobody-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		return 0, err
	}
	bin := filepath.Join(dir, "stop.test")
	if err := exefile.Copy(self, bin); err != nil {
		return 0, err
	}
	var args []string
	testlog := ""
	for _, a := range os.Args[1:] {
		switch {
		case strings.HasPrefix(a, "-test.testlogfile="):
			testlog = strings.TrimPrefix(a, "-test.testlogfile=")
		case strings.HasPrefix(a, "-test.gocoverdir="):
		default:
			args = append(args, a)
		}
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "TMPDIR=/tmp", "HOME=/")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL,
		Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	defer syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), nil
	}
	if err == nil && testlog != "" {
		// go test caches a passing run by the files and variables its
		// log names. The copy reads only what it makes in TMPDIR (and
		// the two variables set above), so its log is the header alone.
		os.WriteFile(testlog, []byte("# test log\n"), 0o644)
	}
	return 0, err
}
