package contain

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"freeze/internal/safedir"
)

// hop is a v1 group the starting thread joins for the fork, and the
// group it goes back to.
type hop struct{ to, back string }

// startDirect starts CMD itself, with no helper between (#51: the helper
// was a second start-up of freeze, most of what freeze run added to a
// short command). CMD is in every group from its first instruction, as
// through the helper: cloned into the v2 group (CLONE_INTO_CGROUP), and
// forked by a thread of freeze's that joined the v1 groups for the fork
// alone (a v1 group holds threads: a fork inherits its caller's
// thread's groups). That thread goes back while CMD is stopped at its
// exec (traced for that moment alone), so it never takes one of CMD's
// slots under pids.max while CMD runs. It does not apply to the rlimit,
// a per-process limit that only the helper sets on itself. Any error
// leaves nothing started: the caller then starts through the helper,
// which says why CMD cannot start, as a shell would.
func startDirect(c Config, cp *capped, env []string) (*exec.Cmd, error) {
	if cp.kind == CapRlimit || os.Getenv("FREEZE_RUN_START") == "helper" { // helper: to measure what it costs
		return nil, errors.New("through the helper")
	}
	if len(cp.hop) > 0 && !canTrace() {
		return nil, errors.New("no CAP_SYS_PTRACE: a traced setuid CMD would not gain its privileges")
	}
	path, err := exec.LookPath(c.Command[0])
	if err != nil {
		return nil, err
	}
	cmd := &exec.Cmd{Path: path, Args: c.Command, Env: env, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true}}
	fd := cp.cgroupFD
	if fd < 0 && cp.v2 != "" {
		if fd, err = unix.Open(cp.v2, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
			return nil, err
		}
		defer unix.Close(fd)
	}
	if fd >= 0 {
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
	}
	type result struct {
		err, back error
		tid       int
	}
	done := make(chan result, 1)
	go func() {
		// Locked: the fork must come from the thread that joined, and
		// the tracer is that thread. One that could not go back is
		// never unlocked, so the runtime ends it with this goroutine,
		// and freeze keeps no thread in CMD's groups.
		runtime.LockOSThread()
		tid := unix.Gettid()
		joined, err := hopIn(cp.hop, tid)
		var back error
		switch {
		case err != nil:
			back = hopBack(joined, tid)
		case len(joined) == 0:
			err = cmd.Start()
		default:
			// Traced, CMD stops at its exec, before its first
			// instruction: the thread goes back while it is stopped,
			// so it never holds one of CMD's slots while CMD runs.
			cmd.SysProcAttr.Ptrace = true
			if err = cmd.Start(); err != nil {
				back = hopBack(joined, tid)
				break
			}
			err, back = releaseAtExec(cmd, func() error { return hopBack(joined, tid) })
		}
		if back == nil {
			runtime.UnlockOSThread()
		}
		done <- result{err, back, tid}
	}()
	r := <-done
	if r.back != nil && !waitThreadGone(r.tid, 2*time.Second) {
		// The thread ends with its goroutine, and must have before any
		// look at the groups, which would find freeze in them (and the
		// teardown freeze it). Never seen: the runtime ends a locked
		// thread at once.
		return nil, fmt.Errorf("%w (%v): freeze's thread %d stayed in CMD's groups", errThreadStayed, r.back, r.tid)
	}
	if r.err != nil {
		return nil, r.err
	}
	return cmd, nil
}

// releaseAtExec waits for the traced CMD to stop at its exec, runs
// before (the thread's way back) and lets CMD go. Where that fails, CMD
// is killed before its first instruction and reaped, and the caller
// starts it through the helper.
func releaseAtExec(cmd *exec.Cmd, before func() error) (err, back error) {
	pid := cmd.Process.Pid
	var ws unix.WaitStatus
	if _, err = unix.Wait4(pid, &ws, unix.WALL, nil); err == nil && !(ws.Stopped() && ws.StopSignal() == unix.SIGTRAP) {
		err = fmt.Errorf("CMD did not stop at its exec (%v)", ws)
		if !ws.Exited() && !ws.Signaled() {
			unix.Kill(pid, unix.SIGKILL)
			unix.Wait4(pid, &ws, unix.WALL, nil)
		}
		cmd.Process.Release() // reaped here: its pidfd goes too
		back = before()
		return err, back
	}
	back = before()
	if err == nil && back == nil {
		err = unix.PtraceDetach(pid)
	}
	if err != nil || back != nil {
		unix.Kill(pid, unix.SIGKILL)
		unix.Wait4(pid, &ws, unix.WALL, nil)
		cmd.Process.Release() // reaped here: its pidfd goes too
		if err == nil {
			err = back
		}
		return fmt.Errorf("let CMD go at its exec: %w", err), back
	}
	return nil, nil
}

// errThreadStayed ends a run whose starting thread could not leave CMD's
// groups: the helper is not tried.
var errThreadStayed = errors.New("the thread that started CMD did not leave its groups")

// canTrace reports whether freeze has CAP_SYS_PTRACE, without which a
// setuid CMD started traced would run without its privileges.
func canTrace() bool {
	var hdr = unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[0].Effective&(1<<unix.CAP_SYS_PTRACE) != 0
}

// hopIn writes thread tid into each group's tasks, and says which it
// joined.
func hopIn(hops []hop, tid int) ([]hop, error) {
	var joined []hop
	for _, h := range hops {
		if err := safedir.Knob(filepath.Join(h.to, "tasks"), strconv.Itoa(tid)); err != nil {
			return joined, fmt.Errorf("join %s for the fork: %w", h.to, err)
		}
		joined = append(joined, h)
	}
	return joined, nil
}

// hopBack writes thread tid back into the groups it came from.
func hopBack(joined []hop, tid int) error {
	var errs []error
	for _, h := range joined {
		if err := safedir.Knob(filepath.Join(h.back, "tasks"), strconv.Itoa(tid)); err != nil {
			errs = append(errs, fmt.Errorf("back to %s after the fork: %w", h.back, err))
		}
	}
	return errors.Join(errs...)
}

// waitThreadGone waits until freeze's thread tid has ended.
func waitThreadGone(tid int, limit time.Duration) bool {
	end := time.Now().Add(limit)
	for {
		_, err := os.Stat("/proc/self/task/" + strconv.Itoa(tid))
		if errors.Is(err, os.ErrNotExist) {
			return true
		}
		if time.Now().After(end) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
}
