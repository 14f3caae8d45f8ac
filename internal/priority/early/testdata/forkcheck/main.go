// Command forkcheck is a helper of early's tests: a program that imports
// package early, as freeze does, and reports the scheduling class of
// each of its threads and of children it starts from two threads, both
// through priority.Start (as freeze does) and, as a control, with a plain
// exec.Cmd.Start.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"freeze/internal/priority/early"

	"freeze/internal/priority"
)

func main() {
	lifted, cpu := early.Lifted()
	fmt.Printf("lifted %v cpu_us %d env %q\n", lifted, cpu, os.Getenv("FREEZE_EARLY_LIFT"))
	// Give the runtime reason to start more threads first: goroutines
	// blocked in system calls each take one.
	done := make(chan struct{})
	for i := 0; i < 4; i++ {
		go func() {
			var ts syscall.Timespec
			ts.Nsec = 20e6
			syscall.Nanosleep(&ts, nil)
			done <- struct{}{}
		}()
	}
	for i := 0; i < 4; i++ {
		<-done
	}
	ents, _ := os.ReadDir("/proc/self/task")
	for _, e := range ents {
		tid, _ := strconv.Atoi(e.Name())
		pol, _, _ := syscall.RawSyscall(syscall.SYS_SCHED_GETSCHEDULER, uintptr(tid), 0, 0)
		fmt.Printf("thread %d main %v policy %d\n", tid, tid == os.Getpid(), pol)
	}
	child("main", "start", priority.Start)
	child("main", "plain", (*exec.Cmd).Start)
	go func() {
		runtime.LockOSThread()
		child("other", "start", priority.Start)
		close(done)
	}()
	<-done
}

// child starts sleep with start, prints its policy from /proc/PID/stat
// (field 41), and ends it.
func child(from, how string, start func(*exec.Cmd) error) {
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := start(cmd); err != nil {
		fmt.Println("start:", err)
		os.Exit(1)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
	cmd.Process.Kill()
	cmd.Wait()
	if err != nil {
		fmt.Println("stat:", err)
		os.Exit(1)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	// f[0] is field 3 (state), so field 41 (policy) is f[38].
	fmt.Printf("child from %s thread %s %d policy %s\n", from, how, syscall.Gettid(), f[38])
}
