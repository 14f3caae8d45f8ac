package bench

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"freeze/internal/containtest"
	"freeze/internal/exefile"
	"freeze/internal/testenv"
	"freeze/internal/timeline"
)

var runCost = flag.Bool("runcost", false, "measure freeze run's overhead and teardown (root, a few minutes)")

func medianD(d []time.Duration) time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2]
}

// What freeze run costs: the wall time it adds to a clean command, and
// its teardown of N leftovers against the floor, cgroup.kill of a v2
// group that holds exactly those N (#26).
func TestRunCost(t *testing.T) {
	if !*runCost {
		t.Skip("opt-in: -args -runcost")
	}
	testenv.RequireLive(t, "the harness's pids cgroups")
	bin := buildBench(t)
	runOverhead(t, bin)
	for _, n := range []int{10, 1000, 5000} {
		teardownCost(t, bin, n)
	}
}

// runOverhead times `true` bare and under freeze run, 21 times each.
func runOverhead(t *testing.T, bin string) {
	var bare, wrapped []time.Duration
	for i := 0; i < 21; i++ {
		t0 := time.Now()
		if err := exec.Command("/bin/true").Run(); err != nil {
			t.Fatal(err)
		}
		bare = append(bare, time.Since(t0))
		t0 = time.Now()
		if out, err := exec.Command(bin, "run", "--", "/bin/true").CombinedOutput(); err != nil {
			t.Fatalf("freeze run -- true: %v\n%s", err, out)
		}
		wrapped = append(wrapped, time.Since(t0))
	}
	t.Logf("true: bare %v, under freeze run %v (medians of 21): +%v", medianD(bare), medianD(wrapped), medianD(wrapped)-medianD(bare))
	// go test of a small package (cached build), bare and with -exec.
	mod := t.TempDir()
	os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module small\n\ngo 1.21\n"), 0o644)
	os.WriteFile(filepath.Join(mod, "small_test.go"), []byte("package small\n\nimport \"testing\"\n\nfunc TestSmall(t *testing.T) {}\n"), 0o644)
	gotest := func(args ...string) time.Duration {
		c := exec.Command("go", append([]string{"test", "-count=1"}, append(args, ".")...)...)
		c.Dir = mod
		t0 := time.Now()
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("go test %v: %v\n%s", args, err, out)
		}
		return time.Since(t0)
	}
	gotest() // build once: both measure a cached build
	bare, wrapped = nil, nil
	for i := 0; i < 7; i++ {
		bare = append(bare, gotest())
		wrapped = append(wrapped, gotest("-exec", bin+" run --"))
	}
	t.Logf("go test of a small package: bare %v, -exec 'freeze run --' %v (medians of 7): +%v", medianD(bare), medianD(wrapped), medianD(wrapped)-medianD(bare))
}

// spawner is a shell script that starts n copies of sleep in the
// background, waits until all n run, and exits: n leftovers.
func spawner(sleep string, n int) string {
	return fmt.Sprintf(`i=0; while [ $i -lt %d ]; do %s 600 & i=$((i+1)); done; exit 0`, n, sleep)
}

// teardownCost measures, 3 times each, freeze run's teardown of n
// leftovers and the floor on n sleeps in a v2 group.
func teardownCost(t *testing.T, bin string, n int) {
	dir := t.TempDir()
	sleep := filepath.Join(dir, "sleep")
	if err := exefile.Copy("/bin/sleep", sleep); err != nil {
		t.Fatal(err)
	}
	var runs, floors []time.Duration
	for rep := 0; rep < 3; rep++ {
		runs = append(runs, runTeardown(t, bin, dir, sleep, n, rep))
		floors = append(floors, floorKill(t, sleep, n))
	}
	t.Logf("teardown of %d leftovers: freeze run %v, floor (cgroup.kill of a v2 group holding them) %v (medians of 3): %.2fx",
		n, medianD(runs), medianD(floors), float64(medianD(runs))/float64(medianD(floors)))
}

// runTeardown runs the spawner under freeze run and reads the teardown's
// time off its timeline: from the last leftover listed to the end.
func runTeardown(t *testing.T, bin, dir, sleep string, n, rep int) time.Duration {
	tl := filepath.Join(dir, "run-"+strconv.Itoa(n)+"-"+strconv.Itoa(rep)+".jsonl")
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: n + 200, HopCap: 1, Timeout: 300 * time.Second,
		Command: []string{bin, "run", "--max-procs", strconv.Itoa(n + 100), "--wait-delay", "0", "-t", tl, "--", "/bin/sh", "-c", spawner(sleep, n)}})
	if _, ok := c.Exit(240 * time.Second); !ok {
		t.Fatalf("freeze run did not return:\n%s", c.Stderr())
	}
	events, err := timeline.ReadFile(tl)
	if err != nil {
		t.Fatal(err)
	}
	var end timeline.RunEnd
	left := 0
	for _, e := range events {
		switch e.Step {
		case timeline.StepLeftover:
			left++
		case timeline.StepRunEnd:
			e.Decode(&end)
		}
	}
	if left < n || !end.Zero {
		t.Fatalf("freeze run listed %d leftovers of %d (end %+v):\n%s", left, n, end, c.Stderr())
	}
	t.Logf("  %d leftovers: teardown %.1f ms (freeze to zero), then %.1f ms removing the groups", n, end.TeardownMS, end.RemoveMS)
	return time.Duration(end.TeardownMS * float64(time.Millisecond))
}

// floorKill starts the spawner's n sleeps in a v2 group of their own,
// waits until the group holds exactly them, and times cgroup.kill until
// the group is empty.
func floorKill(t *testing.T, sleep string, n int) time.Duration {
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: n + 200, HopCap: 1, Timeout: 300 * time.Second, V2Group: true,
		Command: []string{"/bin/sh", "-c", spawner(sleep, n)}})
	if c.V2Dir() == "" {
		t.Skip("no cgroup v2 here: no floor")
	}
	c.Exit(120 * time.Second)
	for end := time.Now().Add(120 * time.Second); c.Members() < n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the floor's group holds %d of %d", c.Members(), n)
		}
	}
	t0 := time.Now()
	if err := os.WriteFile(filepath.Join(c.V2Dir(), "cgroup.kill"), []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	for {
		b, _ := os.ReadFile(filepath.Join(c.V2Dir(), "cgroup.events"))
		if strings.Contains(string(b), "populated 0") {
			return time.Since(t0)
		}
		time.Sleep(200 * time.Microsecond)
	}
}
