package live

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"freeze/internal/containtest"
	"freeze/internal/testenv"
	"freeze/internal/timeline"
)

// buildFreeze returns the test's own copy of the real binary (the drill
// copies itself, so a test binary will not do), built once for the
// package; FREEZE_TEST_BIN names a prebuilt one (the kernel matrix's
// VMs have no go command).
func buildFreeze(t *testing.T) string {
	t.Helper()
	return containtest.GoBinary(t, "..", "freeze", "FREEZE_TEST_BIN")
}

// freeze drill, run as an operator would, inside the harness's own capped
// cgroup: the drill's chain nests its cgroup inside it, so the harness's
// cap holds over the drill whatever the drill does.
func TestDrillContainsItsChainAndLeavesNothing(t *testing.T) {
	testenv.RequireLive(t, "the drill's chain is capped by a pids cgroup")
	bin := buildFreeze(t)
	tmp := filepath.Join(t.TempDir(), "drill-tmp")
	if err := os.Mkdir(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	tl := filepath.Join(t.TempDir(), "drill.jsonl")
	for _, shape := range []string{"tree", "line", "churn"} {
		t.Run(shape, func(t *testing.T) {
			c := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Env: []string{"TMPDIR=" + tmp}, Cap: 2500, HopCap: 1, Timeout: 120 * time.Second,
				Command: []string{bin, "drill", "--size", "100", "--shape", shape, "--timeline", tl}})
			ws, ok := c.Exit(110 * time.Second)
			if !ok {
				t.Fatalf("the drill did not finish; stderr:\n%s", c.Stderr())
			}
			if ws.ExitStatus() != 0 || !strings.Contains(c.Stderr(), "drill passed") {
				t.Fatalf("drill exit %d; stderr:\n%s", ws.ExitStatus(), c.Stderr())
			}
			// Its counts say what each counts: the set-up's and the run's
			// differ as the chain grows while freeze starts (#37: "holds
			// 331", then "357 match", then "331 contained").
			if !regexp.MustCompile(`drill passed: the chain \(\d+ when the stop order started(, \d+ when freeze held it)?\) contained to zero`).MatchString(c.Stderr()) {
				t.Errorf("the drill's last line does not say what its count is:\n%s", c.Stderr())
			}
			if strings.Contains(c.Stderr(), "freeze run started") {
				t.Errorf("the stop order's first line reads as the 'freeze run' subcommand:\n%s", c.Stderr())
			}
			if left := c.Survivors(); len(left) > 0 {
				t.Fatalf("processes of the drill alive after it passed: %v", left)
			}
			ents, _ := os.ReadDir(tmp)
			if len(ents) > 0 {
				t.Fatalf("the drill left %s in its temporary directory", ents[0].Name())
			}
			events, err := timeline.ReadFile(tl)
			if err != nil || len(events) == 0 || events[len(events)-1].Step != "drill-end" {
				t.Fatalf("timeline: %d events, %v", len(events), err)
			}
			os.Remove(tl)
		})
	}
}

// A drill ended by SIGTERM while its chain grows, or by SIGPIPE (its
// output piped to a reader that quits once the chain has started), still
// removes its chain and its directory. On 695337f a drill piped to
// 'head -8' died of SIGPIPE in its set-up and left 600 tasks running
// until their deadline, and its cgroup.
func TestDrillEndedInItsSetUpLeavesNothing(t *testing.T) {
	testenv.RequireLive(t, "the drill's chain is capped by a pids cgroup")
	bin := buildFreeze(t)
	for _, how := range []string{"sigterm", "sigpipe"} {
		t.Run(how, func(t *testing.T) {
			tmp := filepath.Join(t.TempDir(), "drill-tmp")
			if err := os.Mkdir(tmp, 0o755); err != nil {
				t.Fatal(err)
			}
			tl := filepath.Join(t.TempDir(), "d.jsonl")
			// A line grows a hop every 100 ms: 30 s of set-up to signal in.
			cmd := []string{bin, "drill", "--shape", "line", "--size", "300", "--timeline", tl}
			if how == "sigpipe" {
				cmd = []string{"/bin/sh", "-c", bin + " drill --size 300 --timeline " + tl + " 2>&1 | sed '/drill: started a/q'"}
			}
			c := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Env: []string{"TMPDIR=" + tmp}, Cap: 2500, HopCap: 1, Timeout: 150 * time.Second, Command: cmd})
			var fixture string
			for end := time.Now().Add(60 * time.Second); fixture == "" && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
				if ents, _ := os.ReadDir(tmp); len(ents) > 0 {
					fixture = filepath.Join(tmp, ents[0].Name(), "cache", "runaway")
				}
			}
			if fixture == "" {
				t.Fatalf("the drill made no directory in %s; stderr:\n%s", tmp, c.Stderr())
			}
			if how == "sigterm" {
				waitFor(t, c, "drill: started a", 60*time.Second)
				if err := syscall.Kill(c.Leader, syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
			}
			if _, ok := c.Exit(120 * time.Second); !ok {
				t.Fatalf("the drill did not end; stderr:\n%s", c.Stderr())
			}
			// Its chain runs from the fixture (in a cgroup nested in the
			// harness's): none may be left, by either count.
			for end := time.Now().Add(cleanupGrace); ; time.Sleep(50 * time.Millisecond) {
				n := runningExe(fixture)
				if n == 0 && len(c.Survivors()) == 0 {
					break
				}
				if time.Now().After(end) {
					t.Fatalf("%d processes run %s (%d in the harness's group) after the drill ended; stderr:\n%s", n, fixture, len(c.Survivors()), c.Stderr())
				}
			}
			if ents, _ := os.ReadDir(tmp); len(ents) > 0 {
				t.Errorf("the drill left %s in its temporary directory", ents[0].Name())
			}
		})
	}
}

// cleanupGrace is how long the kernel gets to finish exits the drill's
// cleanup started.
const cleanupGrace = 10 * time.Second

// runningExe counts live processes whose exe link reads path (or path,
// deleted).
func runningExe(path string) int {
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/" + e.Name() + "/exe"); err == nil && strings.TrimSuffix(l, " (deleted)") == path {
			n++
		}
	}
	return n
}

// The census names a growing chain as the top suspect, and its command,
// run as printed, brings the chain to zero.
func TestCensusCommandContainsTheChain(t *testing.T) {
	testenv.RequireLive(t, "the chain is capped by a pids cgroup")
	bin := buildFreeze(t)
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Churn, Cap: 300, HopCap: 1000000, Timeout: 60 * time.Second, Interval: 200 * time.Millisecond})
	c.WaitPopulation(100, 20*time.Second)
	out, err := exec.Command(bin, "census", "--sample", "1s", "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	// Its own row, not the top one: another package's test may have a
	// bigger chain running at the same time.
	var r struct {
		Rows []struct {
			Exe, Command string
			Suspect      bool
		}
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatal(err)
	}
	want := "freeze --path " + c.Path
	var got string
	for _, row := range r.Rows {
		if row.Exe == c.Path && row.Suspect {
			got = row.Command
		}
	}
	if got != want {
		t.Fatalf("census row of the chain: command %q, want it a suspect with %q (rows: %+v)", got, want, r.Rows)
	}
	args := strings.Fields(got)[1:]
	args = append(args, "--timeline", filepath.Join(t.TempDir(), "t.jsonl"))
	if msg, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		t.Fatalf("the printed command failed: %v\n%s", err, msg)
	}
	if left := c.Survivors(); len(left) > 0 {
		t.Fatalf("%d processes of the chain alive after the census's command", len(left))
	}
}
