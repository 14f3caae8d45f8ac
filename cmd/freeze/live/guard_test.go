package live

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"freeze/internal/containtest"
	"freeze/internal/exefile"
	"freeze/internal/guard"
	"freeze/internal/proc"
	"freeze/internal/testenv"
	"freeze/internal/timeline"
)

// startGuard starts 'freeze guard' through the harness (capped, owned,
// killed at cleanup) with a run directory of the test's own, and waits
// until it says it is armed.
func startGuard(t *testing.T, bin string) (*containtest.Chain, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "run")
	// 1000 s: it must outlive a test's slowest set-up (the Ansible test
	// runs three playbooks before it asks it anything); it is killed at
	// cleanup like any other.
	g := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 200, HopCap: 1, Timeout: 1000 * time.Second,
		Command: []string{bin, "guard", "--run-dir", dir}})
	waitFor(t, g, "freeze: guard: armed", 30*time.Second)
	return g, dir
}

// logLine is one line of guard.log as the tests read it: the Line every
// line carries, then the type its event is written as (package guard's).
type logLine struct {
	guard.Line
	raw []byte
}

func (l logLine) request() (r guard.RequestLine) { json.Unmarshal(l.raw, &r); return r }
func (l logLine) refused() (r guard.RefusedLine) { json.Unmarshal(l.raw, &r); return r }
func (l logLine) auto() (r guard.AutoLine)       { json.Unmarshal(l.raw, &r); return r }
func (l logLine) reaped() (r guard.ReapedLine)   { json.Unmarshal(l.raw, &r); return r }
func (l logLine) capLook() (r guard.CapLine)     { json.Unmarshal(l.raw, &r); return r }
func (l logLine) String() string                 { return string(l.raw) }

// logEvents reads the guard's log.
func logEvents(t *testing.T, dir string) []logLine {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, guard.LogName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []logLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := logLine{raw: append([]byte(nil), sc.Bytes()...)}
		if json.Unmarshal(l.raw, &l.Line) == nil {
			out = append(out, l)
		}
	}
	return out
}

// waitLog waits for a log event for which ok is true.
func waitLog(t *testing.T, dir string, within time.Duration, ok func(logLine) bool) logLine {
	t.Helper()
	end := time.Now().Add(within)
	for {
		for _, e := range logEvents(t, dir) {
			if ok(e) {
				return e
			}
		}
		if time.Now().After(end) {
			t.Fatalf("no such event in the guard's log within %v: %v", within, logEvents(t, dir))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ask(t *testing.T, dir, line string) {
	t.Helper()
	w, err := os.OpenFile(filepath.Join(dir, guard.AskName), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.WriteString(line); err != nil {
		t.Fatal(err)
	}
}

func alive(pid int) bool {
	st, err := proc.Default.ReadStat(pid)
	return err == nil && !st.Zombie()
}

func rssKiB(t *testing.T, pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return -1
}

func TestGuard(t *testing.T) {
	testenv.RequireLive(t, "the guard's run directory and the chains' pids cgroups")
	bin := buildFreeze(t)
	g, dir := startGuard(t, bin)
	t.Cleanup(func() {
		// The timelines of the guard's runs that chose no place.
		for _, e := range logEvents(t, dir) {
			if tl := e.request().Timeline; strings.HasPrefix(tl, "/var/tmp/freeze/") {
				os.Remove(tl)
			}
		}
	})
	chain := func(t *testing.T) *containtest.Chain { return treeAtCap(t, 200, 50*time.Millisecond) }

	t.Run("fifo", func(t *testing.T) {
		c := chain(t)
		ask(t, dir, "--path '"+c.Path+"'\n")
		l := waitLog(t, dir, 60*time.Second, func(e logLine) bool {
			r := e.request().Request
			return e.Event == "request" && len(r) == 2 && r[1] == c.Path
		})
		e := l.request()
		if e.Exit != 0 || e.Outcome != "zero" || e.Source != "fifo" {
			t.Fatalf("logged %v", e)
		}
		if left := c.Survivors(); len(left) > 0 {
			t.Fatalf("%d processes of the chain alive after the guard said zero", len(left))
		}
		if tl := e.Timeline; tl == "" {
			t.Errorf("no timeline in %v", e)
		} else {
			os.Remove(tl)
		}
		// The FIFO's answer, which a shell reads with a builtin (#34):
		// its request, done, with freeze's exit code and outcome.
		ack, _ := os.ReadFile(filepath.Join(dir, guard.AckName))
		if !regexp.MustCompile(`^\d+ done exit 0 zero --path '?` + regexp.QuoteMeta(c.Path) + `'?\n$`).Match(ack) {
			t.Errorf("the FIFO's answer (%s) is %q, want the request done with exit 0", guard.AckName, ack)
		}
	})

	t.Run("socket", func(t *testing.T) {
		c := chain(t)
		cl := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 50, HopCap: 1, Timeout: 90 * time.Second,
			Command: []string{bin, "--path", c.Path, "--run-dir", dir, "--timeline", filepath.Join(t.TempDir(), "t.jsonl")}})
		ws, ok := cl.Exit(60 * time.Second)
		if !ok || ws.ExitStatus() != 0 {
			t.Fatalf("client exit %d (finished %v):\n%s", ws.ExitStatus(), ok, cl.Stderr())
		}
		// The progress came from the guard: its run is in the guard's
		// process, so the lock and the priority line are the guard's.
		if !strings.Contains(cl.Stderr(), "zero remain") || strings.Count(cl.Stderr(), "freeze started") != 1 {
			t.Fatalf("client output:\n%s", cl.Stderr())
		}
		e := waitLog(t, dir, 10*time.Second, func(e logLine) bool { return e.Event == "request" && e.request().Source == "socket" }).request()
		if e.UID != 0 || e.Exit != 0 {
			t.Fatalf("logged %v", e)
		}
		if left := c.Survivors(); len(left) > 0 {
			t.Fatalf("%d processes of the chain alive", len(left))
		}
	})

	t.Run("other-uid-refused", func(t *testing.T) {
		// A directory nobody may read, with a file nobody runs: if the
		// guard wrongly took the request, it would match nothing.
		pub := filepath.Join(t.TempDir(), "pub")
		os.Mkdir(pub, 0o755)
		// The test's temporary directories are 0700: open the way down.
		os.Chmod(filepath.Dir(pub), 0o755)
		os.Chmod(filepath.Dir(filepath.Dir(pub)), 0o755)
		pubBin, idle := filepath.Join(pub, "freeze"), filepath.Join(pub, "idle")
		if err := exefile.Copy(bin, pubBin); err != nil {
			t.Fatal(err)
		}
		if err := exefile.Copy("/bin/true", idle); err != nil {
			t.Fatal(err)
		}
		// Let uid 65534 reach the socket, so the guard's own check is
		// what refuses it.
		os.Chmod(dir, 0o711)
		os.Chmod(filepath.Dir(dir), 0o711)
		os.Chmod(filepath.Dir(filepath.Dir(dir)), 0o711)
		os.Chmod(filepath.Join(dir, guard.SocketName), 0o666)
		defer os.Chmod(dir, 0o700)
		defer os.Chmod(filepath.Join(dir, guard.SocketName), 0o600)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, pubBin, "--path", idle, "--run-dir", dir)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		b, err := cmd.CombinedOutput()
		if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != timeline.ExitRefused || !strings.Contains(string(b), "uid 65534 may not ask") {
			t.Fatalf("client as uid 65534: %v (exit %d)\n%s", err, cmd.ProcessState.ExitCode(), b)
		}
		waitLog(t, dir, 10*time.Second, func(e logLine) bool { return e.Event == "refused" && e.refused().UID == 65534 })
	})

	// freeze drill --guard practises through the running guard, by each
	// door.
	for _, via := range []string{"fifo", "socket"} {
		t.Run("drill-"+via, func(t *testing.T) {
			tmp := filepath.Join(t.TempDir(), "drill-tmp")
			os.Mkdir(tmp, 0o755)
			tl := filepath.Join(t.TempDir(), "drill.jsonl")
			d := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Env: []string{"TMPDIR=" + tmp}, Cap: 2500, HopCap: 1, Timeout: 120 * time.Second,
				Command: []string{bin, "drill", "--size", "100", "--guard", via, "--run-dir", dir, "--timeline", tl}})
			ws, ok := d.Exit(110 * time.Second)
			if !ok || ws.ExitStatus() != 0 || !strings.Contains(d.Stderr(), "by the guard (through its "+via+")") {
				t.Fatalf("drill --guard %s: exit %d (finished %v):\n%s", via, ws.ExitStatus(), ok, d.Stderr())
			}
			if ents, _ := os.ReadDir(tmp); len(ents) > 0 {
				t.Fatalf("the drill left %s behind", ents[0].Name())
			}
		})
	}

	t.Run("malformed-and-flood", func(t *testing.T) {
		before := rssKiB(t, g.Leader)
		bad := []string{
			"--path 'unterminated\n",
			"--path /a\x00b\n",
			strings.Repeat("x", 1<<20) + "\n",
			"--bogus\n",
			"--path relative\n",
			"--under /\n",
		}
		rnd := rand.New(rand.NewSource(1))
		for i := 0; i < 50; i++ {
			b := make([]byte, rnd.Intn(200))
			rnd.Read(b)
			bad = append(bad, strings.ReplaceAll(string(b), "\n", " ")+"\n")
		}
		for _, l := range bad {
			ask(t, dir, l)
		}
		// A flood: 10,000 requests, each refused.
		var flood strings.Builder
		for i := 0; i < 10000; i++ {
			flood.WriteString("--bogus-" + strconv.Itoa(i) + "\n")
		}
		ask(t, dir, flood.String())
		// The last is run and refused as a bad flag, or refused unread
		// because the queue is full: either way it is logged.
		waitLog(t, dir, 120*time.Second, func(e logLine) bool {
			r := e.request().Request
			return (len(r) == 1 && r[0] == "--bogus-9999") || e.Event == "refused" && e.refused().Text == "--bogus-9999"
		})
		if !alive(g.Leader) {
			t.Fatalf("the guard died:\n%s", g.Stderr())
		}
		after := rssKiB(t, g.Leader)
		t.Logf("guard RSS %d KiB before, %d KiB after", before, after)
		if after > 128<<10 {
			t.Errorf("guard RSS %d KiB after the flood, above its 128 MiB bound", after)
		}
		// Still serving, and nothing was touched: a valid request works.
		c := chain(t)
		ask(t, dir, "--path "+c.Path+"\n")
		waitLog(t, dir, 60*time.Second, func(e logLine) bool {
			r := e.request()
			return e.Event == "request" && len(r.Request) == 2 && r.Request[1] == c.Path && r.Exit == 0
		})
	})
}

// Under a unit of Type=notify the guard says READY=1 only once it is
// armed, pings the watchdog at half of WATCHDOG_USEC, and says
// STOPPING=1 when it stops. The socket is the test's own, standing in
// for systemd's.
func TestGuardNotifiesSystemd(t *testing.T) {
	testenv.RequireLive(t, "the guard's harness cgroup")
	bin := buildFreeze(t)
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	dir := filepath.Join(t.TempDir(), "run")
	g := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 200, HopCap: 1, Timeout: 300 * time.Second,
		Env:     []string{"NOTIFY_SOCKET=" + sock, "WATCHDOG_USEC=200000"},
		Command: []string{bin, "guard", "--run-dir", dir}})
	next := func(within time.Duration) string {
		conn.SetReadDeadline(time.Now().Add(within))
		b := make([]byte, 512)
		n, err := conn.Read(b)
		if err != nil {
			t.Fatalf("no notification within %v (%v); stderr:\n%s", within, err, g.Stderr())
		}
		return string(b[:n])
	}
	if got := next(60 * time.Second); !strings.HasPrefix(got, "READY=1") {
		t.Fatalf("first notification %q, want READY=1", got)
	}
	if !strings.Contains(g.Stderr(), "freeze: guard: armed") {
		t.Errorf("READY=1 came before the guard said it is armed:\n%s", g.Stderr())
	}
	for i := 0; i < 3; i++ {
		if got := next(5 * time.Second); got != "WATCHDOG=1" {
			t.Fatalf("notification %q, want WATCHDOG=1", got)
		}
	}
	if err := syscall.Kill(g.Leader, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(30 * time.Second); ; {
		got := next(time.Until(end))
		if got == "STOPPING=1" {
			break
		}
		if got != "WATCHDOG=1" {
			t.Fatalf("notification %q while stopping, want STOPPING=1", got)
		}
	}
}

// --health answers a liveness probe that does not exec: GET /healthz is
// 200 "armed" while the guard's heartbeat is fresh.
func TestGuardHealthEndpoint(t *testing.T) {
	testenv.RequireLive(t, "the guard's harness cgroup")
	bin := buildFreeze(t)
	g, addr, _ := healthGuard(t, bin)
	client := &http.Client{Timeout: 5 * time.Second}
	var code int
	var body string
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		resp, err := client.Get("http://" + addr + "/healthz")
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		code, body = resp.StatusCode, string(b)
		break
	}
	if code != http.StatusOK || strings.TrimSpace(body) != "armed" {
		t.Fatalf("GET /healthz: %d %q; stderr:\n%s", code, body, g.Stderr())
	}
}

// healthGuard starts a guard with --health on a free loopback port and
// waits until it is armed; it returns the guard, the port's address and
// the guard's run directory.
func healthGuard(t *testing.T, bin string) (*containtest.Chain, string, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := filepath.Join(t.TempDir(), "run")
	g := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 200, HopCap: 1, Timeout: 300 * time.Second,
		Command: []string{bin, "guard", "--run-dir", dir, "--health", addr}})
	waitFor(t, g, "freeze: guard: armed", 60*time.Second)
	return g, addr, dir
}

// The health port cannot take the guard's descriptors: 2,000 idle
// connections held open (the audit's move: 4,000 took the guard from 34
// to 4,034 descriptors, and at 20,000 a request ran without its run lock
// or its gate) leave the guard's descriptors and memory bounded, the
// probe answered once they are cut off, and a request through the guard
// still reaches zero.
func TestGuardHealthPortIsBounded(t *testing.T) {
	testenv.RequireLive(t, "the guard's harness cgroup")
	bin := buildFreeze(t)
	g, addr, dir := healthGuard(t, bin)
	fds := func() int {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", g.Leader))
		if err != nil {
			t.Fatalf("the guard's descriptors: %v", err)
		}
		return len(ents)
	}
	before := fds()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < 2000; i++ {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
	}
	time.Sleep(500 * time.Millisecond)
	// Bounds, as literals: the guard's own (34 here) plus at most the 8
	// the port takes, and room for its request machinery.
	if n := fds(); n > before+16 {
		t.Fatalf("with 2,000 idle connections the guard holds %d descriptors (%d before)", n, before)
	}
	if rss := rssKiB(t, g.Leader); rss > 200<<10 {
		t.Fatalf("with 2,000 idle connections the guard's resident memory is %d KiB", rss)
	}
	// A request through the guard runs with its lock and its gate.
	tmp := filepath.Join(t.TempDir(), "drill-tmp")
	os.Mkdir(tmp, 0o755)
	d := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Env: []string{"TMPDIR=" + tmp}, Cap: 2500, HopCap: 1, Timeout: 120 * time.Second,
		Command: []string{bin, "drill", "--size", "50", "--guard", "socket", "--run-dir", dir, "--timeline", filepath.Join(t.TempDir(), "drill.jsonl")}})
	if ws, ok := d.Exit(110 * time.Second); !ok || ws.ExitStatus() != 0 {
		t.Fatalf("a drill through the guard beside 2,000 idle connections: exit %d (finished %v):\n%s\nguard:\n%s", ws.ExitStatus(), ok, d.Stderr(), g.Stderr())
	}
	if strings.Contains(g.Stderr(), "too many open files") {
		t.Fatalf("the guard ran out of descriptors:\n%s", g.Stderr())
	}
	// The idle ones are cut off, and the probe is answered again.
	client := &http.Client{Timeout: 5 * time.Second}
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := client.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(end) {
			t.Fatalf("GET /healthz not answered 30 s after 2,000 idle connections: %v", err)
		}
	}
}
