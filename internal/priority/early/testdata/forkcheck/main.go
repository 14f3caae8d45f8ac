// Command forkcheck is a helper of early's tests: a program that imports
// package early, as freeze does, and reports the scheduling class of
// each of its threads and of children it starts from two threads.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	_ "freeze/internal/priority/early"
)

func main() {
	ents, _ := os.ReadDir("/proc/self/task")
	for _, e := range ents {
		tid, _ := strconv.Atoi(e.Name())
		pol, _, _ := syscall.RawSyscall(syscall.SYS_SCHED_GETSCHEDULER, uintptr(tid), 0, 0)
		fmt.Printf("thread %d main %v policy %d\n", tid, tid == os.Getpid(), pol)
	}
	child("main")
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		child("other")
		close(done)
	}()
	<-done
}

// child starts sleep, prints its policy from /proc/PID/stat (field 41),
// and ends it.
func child(from string) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
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
	fmt.Printf("child from %s thread %d policy %s\n", from, syscall.Gettid(), f[38])
}
