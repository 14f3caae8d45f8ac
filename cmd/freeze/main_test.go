package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"freeze/internal/containtest"
	"freeze/internal/priority"
	"freeze/internal/testenv"
)

// harnessM runs the tests under the containment harness (subreaper and
// reaping) while testscript dispatches its commands.
type harnessM struct{ m *testing.M }

// The test binary links package early, so as root its constructor lifts
// it like freeze; the tests themselves run at ordinary priority (a child
// such as 'go build' would otherwise inherit SCHED_RR and RLIMIT_RTTIME,
// and die of SIGXCPU after 2 s of CPU). The freeze commands that
// testscript starts are new processes and lift themselves as usual.
func (h harnessM) Run() int {
	priority.Lower()
	return containtest.Main(h.m)
}

func TestMain(m *testing.M) {
	testscript.Main(harnessM{m}, map[string]func(){
		"freeze": func() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) },
	})
}

// TestScripts runs testdata/*.txtar: the CLI's words and exit codes, one
// feature a file. None of them starts a chain.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir: "testdata",
		Setup: func(e *testscript.Env) error {
			pid1, _ := os.Readlink("/proc/1/exe")
			self, _ := os.Executable()
			e.Setenv("PID1EXE", pid1)
			e.Setenv("SELF", self)
			e.Setenv("SLEEPBIN", "/bin/sleep")
			return nil
		},
		Condition: func(cond string) (bool, error) {
			switch cond {
			case "root":
				return os.Geteuid() == 0, nil
			case "live":
				// The live tier (testenv): a script that starts a
				// process of its own (start) and lets freeze act on it.
				return !testing.Short() && os.Geteuid() == 0 && testenv.AutoGuard() == "", nil
			case "systemd":
				// The system's own systemd, a daemon refused by identity.
				_, err := os.Stat("/lib/systemd/systemd")
				return err == nil, nil
			case "pid1exe":
				// Some sandboxes deny even root the exe link of PID 1.
				_, err := os.Readlink("/proc/1/exe")
				return err == nil, nil
			}
			return false, errors.New("unknown condition " + cond)
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			// start FILE ARGS...: run FILE (a copy in $WORK) in a
			// process group of its own, wait until it runs FILE, and
			// kill the group at the script's end. One process, never a
			// chain: for what acts only on a file a process runs.
			"start": startInScript,
			// exits N CMD ARGS...: run CMD and require exit code N.
			"exits": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) < 2 {
					ts.Fatalf("usage: exits CODE COMMAND [ARGS...]")
				}
				want, err := strconv.Atoi(args[0])
				ts.Check(err)
				// The script's PATH, for the lookup and the command,
				// never set on this process: the scripts run in
				// parallel, and one's os.Setenv("PATH") before another's
				// os.Environ() gave hints.txtar's freeze the other
				// script's PATH, without its bin (rehearsal 86: "no file
				// zzfreezehint here or on PATH").
				scriptPath := ts.Getenv("PATH")
				if scriptPath == "" {
					scriptPath = os.Getenv("PATH")
				}
				path, err := lookPathIn(args[1], scriptPath)
				ts.Check(err)
				cmd := exec.Command(path, args[2:]...)
				// In the script's directory (after its cd), as exec
				// runs a command: hints.txtar's check that no hint
				// names a file in the current directory could not fail
				// while this was $WORK.
				cmd.Dir = ts.MkAbs(".")
				cmd.Stdout, cmd.Stderr = ts.Stdout(), ts.Stderr()
				// The script's own TMPDIR ($WORK/.tmp): a fallback
				// timeline lands there and goes with the script.
				cmd.Env = append(withoutEnv(os.Environ(), "PATH", "TMPDIR"), "PATH="+scriptPath, "TMPDIR="+ts.Getenv("TMPDIR"))
				err = cmd.Run()
				got := 0
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					got = ee.ExitCode()
				} else {
					ts.Check(err)
				}
				if (got == want) == neg {
					ts.Fatalf("exit code %d, want %d", got, want)
				}
			},
		},
	})
}

// lookPathIn finds name as exec.LookPath would, on path (a PATH value)
// instead of this process's PATH.
func lookPathIn(name, path string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found on the script's PATH %s", name, path)
}

// withoutEnv is env less the variables named.
func withoutEnv(env []string, names ...string) []string {
	var out []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(names, name) {
			out = append(out, kv)
		}
	}
	return out
}

func startInScript(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 {
		ts.Fatalf("usage: start FILE [ARGS...]")
	}
	path := ts.MkAbs(args[0])
	cmd := exec.Command(path, args[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	ts.Check(cmd.Start())
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	pgid := cmd.Process.Pid
	ts.Defer(func() {
		syscall.Kill(-pgid, syscall.SIGKILL)
		<-done
	})
	want, err := os.Stat(path)
	ts.Check(err)
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if got, err := os.Stat("/proc/" + strconv.Itoa(pgid) + "/exe"); err == nil && os.SameFile(got, want) {
			return
		}
		if time.Now().After(end) {
			ts.Fatalf("start %s: pid %d does not run it after 10s", path, pgid)
		}
	}
}
