package priority

import (
	"fmt"
	"freeze/internal/testenv"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A thread of freeze that runs at real-time priority without sleeping
// past RLIMIT_RTTIME's soft limit gets SIGXCPU, and freeze drops to
// ordinary priority before the hard limit, which is the kernel's
// SIGKILL: a freeze killed so in an incident leaves a held chain and a
// record that stops mid-run (#34). The spinner is this test binary,
// re-run as a child in its own process group, killed with it on timeout.
func TestSpinningPastTheSoftLimitDropsAndLives(t *testing.T) {
	testenv.RequireLive(t, "real-time priority needs root")
	if os.Getenv("FREEZE_PRIORITY_SPIN") == "" {
		t.Skip("on demand (it spins a CPU at real-time priority for 3 s): FREEZE_PRIORITY_SPIN=1")
	}
	for _, procs := range []string{"1", "2"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSpinChild$", "-test.v")
		cmd.Env = append(os.Environ(), "FREEZE_PRIORITY_SPIN_CHILD=1", "GOMAXPROCS="+procs)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		timer := time.AfterFunc(60*time.Second, func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
		err := cmd.Wait()
		timer.Stop()
		ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
		t.Logf("GOMAXPROCS=%s: %v\n%s", procs, err, out.String())
		if ws.Signaled() {
			t.Errorf("GOMAXPROCS=%s: the spinner died of %v", procs, ws.Signal())
		} else if !strings.Contains(out.String(), "dropped: ") {
			t.Errorf("GOMAXPROCS=%s: the spinner did not drop", procs)
		}
	}
}

// TestSpinChild is the spinner: lifted, it spins every P at real-time
// priority for 8 s of wall time, without a system call.
func TestSpinChild(t *testing.T) {
	if os.Getenv("FREEZE_PRIORITY_SPIN_CHILD") == "" {
		t.Skip("the child of TestSpinningPastTheSoftLimitDropsAndLives")
	}
	did, err := Raise()
	fmt.Println("raised:", did, err)
	dropped := make(chan string, 1)
	OnDrop(func(why string) { dropped <- why })
	end := time.Now().Add(8 * time.Second)
	done := make(chan bool)
	for range runtime.GOMAXPROCS(0) {
		go func() {
			x := 0
			for time.Now().Before(end) {
				for i := 0; i < 1000000; i++ {
					x += i
				}
			}
			done <- x > 0
		}()
	}
	for range runtime.GOMAXPROCS(0) {
		<-done
	}
	select {
	case why := <-dropped:
		fmt.Println("dropped:", why)
	default:
		fmt.Println("not dropped")
	}
}
