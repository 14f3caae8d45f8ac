package container_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"freeze/internal/census"
	"freeze/internal/container"
	"freeze/internal/containtest"
	"freeze/internal/exefile"
	"freeze/internal/freeze"
	"freeze/internal/gate"
	"freeze/internal/guard"
	"freeze/internal/match"
	"freeze/internal/proc"
	"freeze/internal/runtest"
	"freeze/internal/testenv"
	"freeze/internal/timeline"
)

// TestMain: the test binary's builds of freeze are static (no cgo), so
// that they run in an image of busybox-static and nothing else.
func TestMain(m *testing.M) {
	os.Setenv("CGO_ENABLED", "0")
	os.Exit(containtest.Main(m))
}

// scene is a chain in a podman container, and on the host a copy of the
// same program at the same path text, running: the decoy that freeze
// took for the container's file before (#33).
type scene struct {
	engine string
	bin    string // the test's freeze
	path   string // the worker's path, the same text inside and out
	decoy  *containtest.Chain
	c      *containtest.Container
	pod    string
}

// newScene starts the decoy (a tree of at most 20, the harness's cap)
// and a container whose worker, at the same path, grows a tree capped by
// --pids-limit limit (a literal of the test, at most 250), all of the
// containers under the harness's cap of 300.
func newScene(t *testing.T, engine, pod string, limit int) *scene {
	pm := containtest.NewEngine(t, engine, 300)
	s := &scene{engine: engine, bin: containtest.GoBinary(t, "../../cmd/freeze", "freeze", "FREEZE_TEST_BIN"), pod: pod}
	s.decoy = containtest.Start(t, containtest.Spec{Shape: containtest.Tree, Name: "worker", Cap: 20, HopCap: 1000, Timeout: 180 * time.Second})
	s.path = s.decoy.Path
	image := pm.Image(map[string]string{s.path: s.decoy.Path})
	deadline := strconv.FormatInt(time.Now().Add(150*time.Second).Unix(), 10)
	s.c = pm.Run(containtest.ContainerSpec{Image: image, PidsLimit: limit, Timeout: 150 * time.Second, Pod: pod,
		Command: []string{s.path, "-s", "tree", "-i", "100000", "-H", "1000", "-D", deadline}})
	if got := s.c.WaitPopulation(40, 60*time.Second); got < 40 {
		t.Fatalf("the container's chain reached %d processes in 60s, want 40", got)
	}
	if got := s.decoy.WaitPopulation(10, 60*time.Second); got < 10 {
		t.Fatalf("the decoy reached %d processes in 60s, want 10", got)
	}
	return s
}

// freeze runs the test's freeze with args, capped by the harness, and
// returns its exit status and stderr.
func (s *scene) freeze(t *testing.T, args ...string) (int, string) {
	fz := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 100, HopCap: 1, Timeout: 120 * time.Second,
		Command: append([]string{s.bin, "--no-guard", "--timeline", filepath.Join(t.TempDir(), "t.jsonl")}, args...)})
	ws, ok := fz.Exit(90 * time.Second)
	if !ok {
		t.Fatalf("freeze %s did not finish in 90s:\n%s", strings.Join(args, " "), fz.Stderr())
	}
	return ws.ExitStatus(), fz.Stderr()
}

// contained checks the outcome: exit 0, the container's chain at zero,
// the decoy untouched.
func (s *scene) contained(t *testing.T, code int, stderr string, decoyBefore int) {
	t.Helper()
	if code != 0 {
		t.Fatalf("freeze exited %d:\n%s", code, stderr)
	}
	if n := s.c.Population(); n != 0 {
		t.Errorf("%d processes of the container's chain are left:\n%s", n, stderr)
	}
	if got := s.decoy.Population(); got < decoyBefore {
		t.Errorf("the host's decoy at the same path lost processes: %d, was %d:\n%s", got, decoyBefore, stderr)
	}
}

// eachEngine runs test once per runtime (podman, docker, containerd),
// each as a subtest named after it, in parallel (go test's -parallel, 2
// here): each has its runtime, cap, chain and decoy of its own, and
// most of a subtest is waiting for a daemon or a chain.
func eachEngine(t *testing.T, test func(t *testing.T, engine string)) {
	for _, e := range containtest.Engines {
		t.Run(e, func(t *testing.T) {
			t.Parallel()
			test(t, e)
		})
	}
}

// runtimeNamed is how freeze must name each engine's container from its
// cgroup layout here, alone and in a pod: a literal of the test. Docker's
// and containerd's groups in a pod (the kubelet's cgroupfs layout,
// /kubepods/burstable/podUID/ID) do not say which runtime made them.
var runtimeNamed = map[string]struct{ alone, inPod string }{
	"podman":     {"podman", "podman"},
	"docker":     {"docker", ""},
	"containerd": {"containerd", ""},
}

func TestContainedFromTheHostByTheProcessExeLink(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		s := newScene(t, engine, "", 60)
		before := s.decoy.Population()
		code, stderr := s.freeze(t, "--path", fmt.Sprintf("/proc/%d/exe", s.c.PIDs()[0]))
		s.contained(t, code, stderr, before)
	})
}

func TestContainedFromTheHostByTheProcessRoot(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		s := newScene(t, engine, "", 60)
		before := s.decoy.Population()
		code, stderr := s.freeze(t, "--path", fmt.Sprintf("/proc/%d/root%s", s.c.PIDs()[0], s.path))
		s.contained(t, code, stderr, before)
	})
}

func TestContainedFromTheHostByContainerID(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		s := newScene(t, engine, "", 60)
		before := s.decoy.Population()
		code, stderr := s.freeze(t, "--container", s.c.ID[:12], "--path", s.path)
		s.contained(t, code, stderr, before)
		named := runtimeNamed[engine].alone + " " + s.c.ID[:12]
		if !strings.Contains(stderr, "in "+named) {
			t.Errorf("the record does not name the container (%s):\n%s", named, stderr)
		}
		// The chain's root is the container's PID 1 (its command): the
		// operator is told that the container ends with the chain.
		if !strings.Contains(stderr, " is PID 1 of "+named+": the kill rounds end the container with it") {
			t.Errorf("freeze does not say that the chain's root is the container's PID 1:\n%s", stderr)
		}
	})
}

func TestContainedFromTheHostByPodUID(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		uid := fmt.Sprintf("%08x-0000-4000-8000-%012x", os.Getpid(), time.Now().UnixNano()&0xffffffffffff)
		s := newScene(t, engine, uid, 60)
		before := s.decoy.Population()
		code, stderr := s.freeze(t, "--pod", uid, "--path", s.path)
		s.contained(t, code, stderr, before)
		if !strings.Contains(stderr, "pod "+uid) {
			t.Errorf("the record does not name the pod:\n%s", stderr)
		}
	})
}

// A container id that names no container is refused with the
// candidates, and nothing is touched.
func TestUnknownContainerIsRefusedWithTheCandidates(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		s := newScene(t, engine, "", 60)
		before := s.c.Population()
		code, stderr := s.freeze(t, "--container", "000000000000", "--path", s.path)
		if code != 2 || !strings.Contains(stderr, "matches no container") || !strings.Contains(stderr, s.c.ID) {
			t.Errorf("exit %d, want 2 with the candidates (%s):\n%s", code, s.c.ID[:12], stderr)
		}
		if got := s.c.Population(); got < before {
			t.Errorf("the container's chain lost processes: %d, was %d", got, before)
		}
	})
}

// census tells the container's row from the host's of the same path,
// names the container and the pod, and prints the command that contains
// exactly that row.
func TestCensusNamesTheContainerAndThePod(t *testing.T) {
	eachEngine(t, censusNamesTheContainerAndThePod)
}

func censusNamesTheContainerAndThePod(t *testing.T, engine string) {
	uid := fmt.Sprintf("%08x-1111-4000-8000-%012x", os.Getpid(), time.Now().UnixNano()&0xffffffffffff)
	// 250 copies: a suspect by its count alone (census's threshold is
	// 200), so census prints its command.
	s := newScene(t, engine, uid, 250)
	if got := s.c.WaitPopulation(240, 60*time.Second); got < 240 {
		t.Fatalf("the container's chain reached %d processes in 60s, want 240", got)
	}
	fz := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 100, HopCap: 1, Timeout: 120 * time.Second,
		Command: []string{s.bin, "census", "--format", "json", "--top", "100"}})
	if ws, ok := fz.Exit(90 * time.Second); !ok || ws.ExitStatus() != 0 {
		t.Fatalf("census: exit %d (finished %v):\n%s", ws.ExitStatus(), ok, fz.Stderr())
	}
	var r census.Report
	if err := json.Unmarshal([]byte(fz.Stdout()), &r); err != nil {
		t.Fatalf("census --format json: %v\n%s", err, fz.Stdout())
	}
	var in, host *census.Row
	for i := range r.Rows {
		row := &r.Rows[i]
		if row.Exe != s.path {
			continue
		}
		if row.Container == s.c.ID {
			in = row
		} else if row.Place().Host() {
			host = row
		}
	}
	if in == nil || host == nil {
		t.Fatalf("census has no row for the container's %s (%v) or the host's (%v): %+v", s.path, in != nil, host != nil, r.Rows)
	}
	if want := runtimeNamed[engine].inPod; in.Runtime != want || in.Pod != uid || in.Count < 240 {
		t.Errorf("the container's row: runtime %q pod %q count %d, want %q, %s, 240 or more", in.Runtime, in.Pod, in.Count, want, uid)
	}
	want := "freeze --container " + s.c.ID[:12] + " --path " + s.path
	if !in.Suspect || in.Command != want {
		t.Errorf("the container's row: suspect %v (%s), command %q, want %q", in.Suspect, in.Reasons, in.Command, want)
	}
	// And the command it prints contains exactly that row.
	before := s.decoy.Population()
	code, stderr := s.freeze(t, "--container", s.c.ID[:12], "--path", s.path)
	s.contained(t, code, stderr, before)
}

// Of reads a real container's process as the table says.
func TestOfAContainersProcess(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		s := newScene(t, engine, "", 60)
		pid := s.c.PIDs()[0]
		p, err := container.Of(proc.Default, pid)
		if want := runtimeNamed[engine].alone; err != nil || p.Runtime != want || p.ID != s.c.ID {
			t.Fatalf("container.Of(%d) = %+v, %v; want %s %s", pid, p, err, want, s.c.ID)
		}
		if p, _ := container.Of(proc.Default, s.decoy.Leader); !p.Host() {
			t.Errorf("the decoy on the host reads as %+v", p)
		}
	})
}

// The guard's automatic mode judges a chain per executable and per
// container. One file (a test directory bound into two containers, and
// run on the host too: one identity) runs as a growing tree in container
// A, as three processes in container B, and as a tree of 20 on the host.
// Judged by the file alone, they were one chain of over 100, and the
// hold, by --path, took all three. The guard must hold A's chain, by
// --container, and leave B's and the host's running.
func TestGuardAutoHoldsOnlyTheContainersChain(t *testing.T) {
	eachEngine(t, guardAutoHoldsOnlyTheContainersChain)
}

func guardAutoHoldsOnlyTheContainersChain(t *testing.T, engine string) {
	if k := gate.Probe(""); !k[0].OK {
		testenv.GateMissing(t, "its counter: "+k[0].Why)
	}
	pm := containtest.NewEngine(t, engine, 600)
	bin := containtest.GoBinary(t, "../../cmd/freeze", "freeze", "FREEZE_TEST_BIN")
	decoy := containtest.Start(t, containtest.Spec{Shape: containtest.Tree, Name: "worker", Cap: 20, HopCap: 1000, Timeout: 240 * time.Second})
	path, dir := decoy.Path, decoy.Dir
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	image := pm.Image(nil)
	deadline := strconv.FormatInt(time.Now().Add(200*time.Second).Unix(), 10)
	vol := []string{dir + ":" + dir + ":ro"}
	b := pm.Run(containtest.ContainerSpec{Image: image, PidsLimit: 3, Timeout: 200 * time.Second, Volumes: vol,
		Command: []string{path, "-s", "tree", "-i", "100000", "-H", "1000", "-D", deadline}})
	if got := b.WaitPopulation(3, 60*time.Second); got < 3 {
		t.Fatalf("container B reached %d processes, want 3", got)
	}
	if got := decoy.WaitPopulation(20, 60*time.Second); got < 20 {
		t.Fatalf("the decoy reached %d processes, want 20", got)
	}
	// Whatever the guard holds is removed before the containers are.
	tg, err := match.Resolve(path)
	if err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(t.TempDir(), "run")
	g := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 200, HopCap: 1, Timeout: 240 * time.Second,
		Command: []string{bin, "guard", "--run-dir", run, "--auto", "100", "--auto-under", dir}})
	g.WaitStderr("freeze: guard: armed", 30*time.Second)
	a := pm.Run(containtest.ContainerSpec{Image: image, PidsLimit: 400, Timeout: 200 * time.Second, Volumes: vol,
		Command: []string{path, "-s", "tree", "-i", "100000", "-H", "1000", "-D", deadline}})
	t.Cleanup(func() {
		// The hold's group, and the group of a hold by --path alone,
		// which the guard made before it judged per container (left
		// behind when this test was run against that code).
		scoped, bare := freeze.GroupName(match.Spec{Targets: []match.Target{tg}, Scope: container.Scope{ID: a.ID}}), freeze.GroupName(match.Spec{Targets: []match.Target{tg}})
		// The guard first, then its log: a second automatic hold it had
		// queued, ending after the log was read, left its timeline in
		// /var/tmp/freeze once. A hold the kill cut short leaves its run
		// lock (/run/freeze/GROUP.lock, named after this test's chain).
		g.Kill()
		runtest.Remove(t, scoped)
		runtest.Remove(t, bare)
		for _, e := range guardRequests(t, run) {
			if strings.HasPrefix(e.Timeline, timeline.StateDir()+"/") {
				os.Remove(e.Timeline)
			}
		}
	})
	req := waitAutoRequest(t, run, g)
	want := "--container " + a.ID + " --path " + path + " --uid 0 --hold"
	if got := strings.Join(req.Request, " "); got != want || req.Outcome != "hold" {
		t.Fatalf("the automatic request: %q, outcome %v; want %q, hold\n%s", req.Request, req.Outcome, want, g.Stderr())
	}
	for what, pids := range map[string][]int{"container B's": b.PIDs(), "the host's": decoy.Survivors()} {
		for _, pid := range pids {
			if st, err := proc.Default.ReadStat(pid); err != nil || st.State == 'T' || st.State == 't' {
				t.Errorf("%s process %d of the same file: %v, state %c (want alive, not stopped)", what, pid, err, st.State)
			}
		}
	}
	if n := decoy.Population(); n < 20 {
		t.Errorf("the host's processes of the file went from 20 to %d", n)
	}
	held := a.Population()
	time.Sleep(300 * time.Millisecond)
	if now := a.Population(); now != held || held == 0 {
		t.Errorf("container A's chain: %d, then %d: want held", held, now)
	}
}

// waitAutoRequest waits up to 90 s for the guard's first automatic
// request that has ended, and fails the test with the guard's words if
// none comes.
func waitAutoRequest(t *testing.T, run string, g *containtest.Chain) *guard.RequestLine {
	t.Helper()
	for end := time.Now().Add(90 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		for _, e := range guardRequests(t, run) {
			if e.Source == "auto" && e.Outcome != "" {
				return &e
			}
		}
		if time.Now().After(end) {
			t.Fatalf("the guard made no automatic request in 90s:\n%s", g.Stderr())
		}
	}
}

// guardRequests reads the requests in the guard's log, as the type the
// guard writes them with.
func guardRequests(t *testing.T, dir string) []guard.RequestLine {
	b, err := os.ReadFile(filepath.Join(dir, guard.LogName))
	if err != nil {
		return nil
	}
	var out []guard.RequestLine
	for _, line := range strings.Split(string(b), "\n") {
		var r guard.RequestLine
		if json.Unmarshal([]byte(line), &r) == nil && r.Event == "request" {
			out = append(out, r)
		}
	}
	return out
}

// freeze run inside a container caps and tears down in the container's
// own cgroup where the runtime lets it write there (--privileged), and
// says why it cannot where the cgroup filesystem is read-only (the
// default). Before, inside a container it looked for the host's path of
// its group under the container's cgroup mount, found none, and fell
// back to RLIMIT_NPROC, which does not bind root: 40 processes ran
// under --max-procs 20.
func TestFreezeRunInsideAContainer(t *testing.T) {
	pm := containtest.NewPodman(t, 300)
	bin := containtest.GoBinary(t, "../../cmd/freeze", "freeze", "FREEZE_TEST_BIN")
	image := pm.Image(map[string]string{"/bin/freeze": bin})
	cmd := []string{"/bin/freeze", "run", "--max-procs", "20", "--timeout", "60s", "--",
		"/bin/sh", "-c", "i=0; while [ $i -lt 40 ]; do sleep 30 & i=$((i+1)); done; wait"}
	t.Run("privileged", func(t *testing.T) {
		code, out := pm.RunWait(containtest.ContainerSpec{Image: image, PidsLimit: 100, Timeout: 120 * time.Second, Privileged: true, Command: cmd})
		if code != 123 || !strings.Contains(out, "the cap fired") || !strings.Contains(out, "the group is empty (zero confirmed)") {
			t.Errorf("freeze run in a privileged container: exit %d, want 123 (the cap fired), and zero confirmed:\n%s", code, out)
		}
	})
	t.Run("default", func(t *testing.T) {
		code, out := pm.RunWait(containtest.ContainerSpec{Image: image, PidsLimit: 100, Timeout: 120 * time.Second, Command: []string{"/bin/freeze", "run", "--max-procs", "20", "--timeout", "60s", "--", "/bin/sh", "-c", "exit 0"}})
		if code != 0 || !strings.Contains(out, "the cgroup filesystem is read-only here") {
			t.Errorf("freeze run in a default container: exit %d, want 0 and the reason it has no cap of its own:\n%s", code, out)
		}
	})
}

// The DaemonSet's way, built and run: the image from
// deploy/kubernetes/Dockerfile (FROM scratch, freeze alone), built
// offline; the DaemonSet's own container command from the manifest, run
// as the kubelet runs it (privileged, hostPID, POD_IP filled in), with
// the test's directories for the guard's; then an operator's request
// through it, as kubectl exec makes one, contains a chain in another
// container by --container, and the host's copy of the same path lives.
func TestDaemonSetImageContainsAContainersChain(t *testing.T) {
	s := newScene(t, "podman", "", 60)
	pm := s.c.Podman()
	ctx := t.TempDir()
	if err := exefile.Copy(s.bin, filepath.Join(ctx, "freeze")); err != nil {
		t.Fatal(err)
	}
	image := pm.Build("../../deploy/kubernetes/Dockerfile", ctx)
	argv := manifestCommand(t, "../../deploy/kubernetes/freeze-guard.yaml")
	run := filepath.Join(t.TempDir(), "run")
	metrics := filepath.Join(t.TempDir(), "freeze.prom")
	for i, a := range argv {
		switch {
		case a == "/run/freeze":
			argv[i] = run
		case strings.HasSuffix(a, "/freeze.prom"):
			argv[i] = metrics
		case strings.Contains(a, "$(POD_IP)"):
			argv[i] = strings.ReplaceAll(a, "$(POD_IP)", "127.0.0.1")
		}
	}
	// PID 1 of this machine is its sandbox's init, in another user
	// namespace: even root cannot open its root (chroot /proc/1/root:
	// permission denied). On a node it is the node's init. The test
	// names its own process's root instead, which is this host's.
	if len(argv) < 3 || argv[1] != "node" || argv[2] != "--" {
		t.Fatalf("the DaemonSet's command %q is not '/freeze node -- ...'", argv)
	}
	argv = append([]string{argv[0], "node", "--root", fmt.Sprintf("/proc/%d/root", os.Getpid())}, argv[2:]...)
	g := pm.Run(containtest.ContainerSpec{Image: image, PidsLimit: 50, Timeout: 150 * time.Second, Privileged: true, HostPID: true,
		Entrypoint: argv[0], Command: argv[1:]})
	for end := time.Now().Add(60 * time.Second); !strings.Contains(g.Logs(), "freeze: guard: armed"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the DaemonSet's guard (%q) did not arm in 60s:\n%s", argv, g.Logs())
		}
	}
	t.Cleanup(func() {
		for _, e := range guardRequests(t, run) {
			if strings.HasPrefix(e.Timeline, timeline.StateDir()+"/") {
				os.Remove(e.Timeline)
			}
		}
	})
	before := s.decoy.Population()
	code, out := g.Exec("/freeze", "node", "--root", fmt.Sprintf("/proc/%d/root", os.Getpid()), "--", "--run-dir", run, "--container", s.c.ID[:12], "--path", s.path)
	s.contained(t, code, out, before)
	var answered bool
	for _, e := range guardRequests(t, run) {
		answered = answered || e.Source == "socket" && e.Outcome == "zero"
	}
	if !answered {
		t.Errorf("the request did not go through the DaemonSet's guard; its output:\n%s", g.Logs())
	}
	if _, err := os.Stat(metrics); err != nil {
		t.Errorf("the guard on the node wrote no metrics file: %v", err)
	}
}

// manifestCommand is the container command of a manifest (its one
// 'command: [...]' line).
func manifestCommand(t *testing.T, file string) []string {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*command: (\[.*\])$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s: no command line", file)
	}
	var argv []string
	if err := json.Unmarshal(m[1], &argv); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return argv
}

// --auto-on-cap in a container: container A's chain hits its
// --pids-limit of 300, and the guard (no gate's counter asked for) holds
// A's chain, by --container and its group; container B runs the same file
// below its cap, and the host runs a tree of it: both untouched.
func TestGuardAutoOnCapHoldsOnlyTheCappedContainersChain(t *testing.T) {
	pm := containtest.NewPodman(t, 600)
	bin := containtest.GoBinary(t, "../../cmd/freeze", "freeze", "FREEZE_TEST_BIN")
	// The host's decoy: a tree of the same file three hops deep at most
	// (the fixture's hop cap), forking every 5 s: far below its own
	// harness cap, never at it.
	decoy := containtest.Start(t, containtest.Spec{Shape: containtest.Tree, Name: "worker", Cap: 200, HopCap: 3, Timeout: 240 * time.Second, Interval: 5 * time.Second})
	path, dir := decoy.Path, decoy.Dir
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	image := pm.Image(nil)
	deadline := strconv.FormatInt(time.Now().Add(200*time.Second).Unix(), 10)
	vol := []string{dir + ":" + dir + ":ro"}
	// B: the same file as such a tree too, far below its cap of 100.
	b := pm.Run(containtest.ContainerSpec{Image: image, PidsLimit: 100, Timeout: 200 * time.Second, Volumes: vol,
		Command: []string{path, "-s", "tree", "-i", "5000000", "-H", "3", "-D", deadline}})
	if got := b.WaitPopulation(1, 60*time.Second); got < 1 {
		t.Fatalf("container B reached %d processes, want 1", got)
	}
	run := filepath.Join(t.TempDir(), "run")
	g := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 200, HopCap: 1, Timeout: 240 * time.Second,
		Command: []string{bin, "guard", "--run-dir", run, "--auto-on-cap", "--auto-under", dir}})
	g.WaitStderr("freeze: guard: armed", 30*time.Second)
	a := pm.Run(containtest.ContainerSpec{Image: image, PidsLimit: 300, Timeout: 200 * time.Second, Volumes: vol,
		Command: []string{path, "-s", "tree", "-i", "100000", "-H", "1000", "-D", deadline}})
	t.Cleanup(func() {
		// Whatever the guard held, A's chain or (a failing test) another.
		g.Kill()
		var words [][]string
		for _, e := range guardRequests(t, run) {
			if e.Source == "auto" {
				words = append(words, e.Request)
			}
		}
		runtest.RemoveRequests(t, words)
		for _, e := range guardRequests(t, run) {
			if strings.HasPrefix(e.Timeline, timeline.StateDir()+"/") {
				os.Remove(e.Timeline)
			}
		}
	})
	req := waitAutoRequest(t, run, g)
	words := strings.Join(req.Request, " ")
	if !strings.HasPrefix(words, "--cgroup /") || !strings.HasSuffix(words, "--container "+a.ID+" --path "+path+" --uid 0 --hold") || req.Outcome != "hold" {
		t.Fatalf("the automatic request: %q, outcome %v; want --cgroup GROUP --container %s --path %s --uid 0 --hold, held (B is %s)\n%s", words, req.Outcome, a.ID, path, b.ID, g.Stderr())
	}
	for what, pids := range map[string][]int{"container B's": b.PIDs(), "the host's": decoy.Survivors()} {
		for _, pid := range pids {
			if st, err := proc.Default.ReadStat(pid); err != nil || st.State == 'T' || st.State == 't' {
				t.Errorf("%s process %d of the same file: %v, state %c (want alive, not stopped)", what, pid, err, st.State)
			}
		}
	}
	held := a.Population()
	time.Sleep(300 * time.Millisecond)
	if now := a.Population(); now != held || held == 0 {
		t.Errorf("container A's chain: %d, then %d: want held", held, now)
	}
}
