package gate

import (
	"testing"
	"time"

	"freeze/internal/containtest"
	"freeze/internal/proc"
)

// The scan iterator says what /proc says, for the test's own processes:
// its chain (held by the gate, so its states are stable) and a decoy of
// other bytes that keeps running, every field a scan uses. Of the rest of
// the machine it checks only that no process /proc lists is missing (the
// others' states and parents may change between two reads).
func TestTasksAgreesWithProc(t *testing.T) {
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Tree, Cap: 60, HopCap: 1000000, Timeout: 300 * time.Second})
	decoy := containtest.Start(t, containtest.Spec{Shape: containtest.Tree, Cap: 10, HopCap: 1000000, Timeout: 300 * time.Second, Name: "chain-2", Dir: c.Dir})
	c.WaitPopulation(60, 90*time.Second)
	decoy.WaitPopulation(10, 90*time.Second)
	g := attach(t, fileOf(t, c.Path))
	if !g.CanScan() {
		t.Skipf("the scan iterator does not load here: %v", g.Missing)
	}
	chain := held(t, g, c, 60*time.Second)
	state := byte('T')

	before, err := proc.Default.PIDs(nil)
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := g.Tasks(nil)
	if err != nil {
		t.Fatalf("Tasks: %v", err)
	}
	byPID := map[int]proc.Task{}
	for _, tk := range tasks {
		if _, dup := byPID[tk.PID]; dup {
			t.Fatalf("pid %d listed twice", tk.PID)
		}
		byPID[tk.PID] = tk
	}
	check := func(pids []int, file proc.File, state byte) {
		t.Helper()
		for _, pid := range pids {
			tk, ok := byPID[pid]
			st, err := proc.Default.ReadStat(pid)
			if !ok || err != nil {
				t.Fatalf("pid %d: in Tasks %v, /proc %v", pid, ok, err)
			}
			if (state != 0 && (tk.State != state || st.State != state)) || tk.Start != st.Start || tk.PPID != st.PPID || tk.Comm != st.Comm || tk.Kernel() {
				t.Errorf("pid %d: Tasks %+v, /proc %+v", pid, tk.Stat, st)
			}
			if !tk.HasExe || tk.Exe != file {
				t.Errorf("pid %d: exe %+v, want %+v", pid, tk.Exe, file)
			}
		}
	}
	check(chain, fileOf(t, c.Path).Stat, state)
	check(decoy.Survivors(), fileOf(t, decoy.Path).Stat, 0)
	for _, pid := range before {
		if _, ok := byPID[pid]; ok || pid == 1 { // the iterator starts at 2 (see Tasks)
			continue
		}
		if _, err := proc.Default.ReadStat(pid); err == nil {
			t.Errorf("pid %d is in /proc, before and after, but not in Tasks", pid)
		}
	}
}

func TestStateLetter(t *testing.T) {
	for _, c := range []struct {
		state uint32
		exit  int32
		want  byte
	}{
		{0, 0, 'R'}, {1, 0, 'S'}, {2, 0, 'D'}, {4, 0, 'T'}, {8, 0, 't'},
		{0, 16, 'X'}, {0, 32, 'Z'}, {0x402, 0, 'I'}, {0x1000, 0, 'D'}, {0x80 | 1, 0, 'S'},
	} {
		if got := stateLetter(c.state, c.exit); got != c.want {
			t.Errorf("stateLetter(%#x, %d) = %c, want %c", c.state, c.exit, got, c.want)
		}
	}
}
