package census

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"freeze/internal/containtest"
	"freeze/internal/proc"
	"freeze/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(containtest.Main(m)) }

func TestVerdict(t *testing.T) {
	tests := []struct {
		load  float64
		cores int
		want  string
	}{
		{0.2, 2, "ok"},
		{1.3, 2, "ok"},
		{1.4, 2, "busy"},
		{2.9, 2, "busy"},
		{3.0, 2, "overloaded"},
		{7.9, 2, "overloaded"},
		{8.0, 2, "OVERLOADED"},
		{69.9, 4, "OVERLOADED"},
		{8.0, 64, "ok"}, // the ratio, not the raw number
		{1, 0, "busy"},  // no core count: taken as one
	}
	for _, tt := range tests {
		if got, advice := Verdict(tt.load, tt.cores); got != tt.want || advice == "" {
			t.Errorf("Verdict(%v, %d) = %q, want %q", tt.load, tt.cores, got, tt.want)
		}
	}
	line := VerdictLine(69.9, 50, 20, 4, -1)
	if !strings.HasPrefix(line, "load 69.90 50.00 20.00 / 4 cores -- OVERLOADED -- ") {
		t.Errorf("verdict line %q", line)
	}
	// After the chain: the average still says overloaded, the run queue
	// does not (#27: 24 processes alive, "OVERLOADED", then "no suspect").
	if line := VerdictLine(30, 20, 8, 2, 1); !strings.Contains(line, "1 runnable now -- recovering -- ") {
		t.Errorf("a machine whose chain is gone: %q", line)
	}
	if line := VerdictLine(30, 20, 8, 2, 40); !strings.Contains(line, "40 runnable now -- OVERLOADED -- ") {
		t.Errorf("a machine still on fire: %q", line)
	}
	if n := procsRunning([]byte("cpu  1 2 3\nprocs_running 5\nprocs_blocked 0\n")); n != 4 {
		t.Errorf("procs_running 5 read as %d runnable besides the reader, want 4", n)
	}
}

func TestSuspect(t *testing.T) {
	tests := []struct {
		name     string
		row      Row
		testLike bool
		want     bool
		reason   string
	}{
		{"quiet daemon, orphaned by design", Row{Count: 1, Orphaned: 1, OldestAgeS: 86400}, false, false, ""},
		{"a few workers", Row{Count: 8, Orphaned: 0, CPUPercent: 90}, false, false, ""},
		{"orphaned swarm", Row{Count: 412, Orphaned: 398, Appeared: 60, Vanished: 3, CPUPercent: 180}, true, true, "412 copies, 398 orphaned, +57 in 1 s, 180% CPU"},
		{"growing", Row{Count: 40, Appeared: 20}, false, true, "+20 in 1 s"},
		{"churning", Row{Count: 30, Appeared: 15, Vanished: 15}, false, true, "churning"},
		{"many copies alone", Row{Count: 250}, false, true, "250 copies"},
		{"long test runner", Row{Count: 3, Orphaned: 3, OldestAgeS: 3 * 3600}, true, true, "running for 3.0 h"},
		{"long daemon outside a cache", Row{Count: 3, Orphaned: 3, OldestAgeS: 3 * 3600}, false, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := Suspect(tt.row, 1, tt.testLike)
			if got != tt.want || !strings.Contains(why, tt.reason) {
				t.Fatalf("Suspect = %v %q, want %v containing %q", got, why, tt.want, tt.reason)
			}
		})
	}
}

func TestParseNet(t *testing.T) {
	in := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12345 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F91 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 12346 1 0000000000000000 100 0 0 10 0
`
	ps := ParseNet([]byte(in), "tcp", "0A")
	if len(ps) != 1 || ps[0].Addr != "127.0.0.1" || ps[0].Port != 8080 || ps[0].inode != 12345 {
		t.Fatalf("ports %+v", ps)
	}
	in6 := `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:0050 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 777 1 0000000000000000 100 0 0 10 0
`
	ps = ParseNet([]byte(in6), "tcp6", "0A")
	if len(ps) != 1 || ps[0].Addr != "::1" || ps[0].Port != 80 {
		t.Fatalf("ports6 %+v", ps)
	}
}

// A listener the test opens shows in the port table with its owner.
func TestPortsFindsOwnListener(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	r, err := Take(proc.Default, 100*time.Millisecond, 5)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range r.Ports {
		if p.Port == port && p.Proto == "tcp" {
			if p.PID != os.Getpid() {
				t.Fatalf("port %d owned by %d, want this test (%d)", port, p.PID, os.Getpid())
			}
			return
		}
	}
	t.Fatalf("port %d not in %+v", port, r.Ports)
}

// A capped growing chain is a suspect, with its count, orphans and
// growth, and its row's command names its exact path. The test looks
// only at its own chain's row: another package's test may run a larger
// chain at the same time (go test ./... runs packages in parallel), and
// that one would be the top row.
func TestCensusFindsAGrowingChain(t *testing.T) {
	testenv.RequireLive(t, "the chain's pids cgroup")
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Churn, Cap: 300, HopCap: 1000000, Timeout: 60 * time.Second, Interval: 200 * time.Millisecond})
	c.WaitPopulation(100, 20*time.Second)
	r, err := Take(proc.Default, time.Second, 20)
	if err != nil {
		t.Fatal(err)
	}
	var row *Row
	for i := range r.Rows {
		if r.Rows[i].Exe == c.Path {
			row = &r.Rows[i]
		}
	}
	if row == nil || !row.Suspect {
		t.Fatalf("rows %+v, want the chain %s as a suspect", r.Rows, c.Path)
	}
	if row.Count < 50 || row.Orphaned < row.Count/2 || row.Appeared == 0 {
		t.Fatalf("row %+v: want its count, most orphaned, and growth", *row)
	}
	if row.Command != "freeze --path "+c.Path {
		t.Fatalf("row's command %q, want freeze --path %s", row.Command, c.Path)
	}
}

// Quiet work is not a suspect: a few long-lived processes of one
// executable of the test's own, started together and then idle. The test
// looks only at that executable's row (other tests may run chains at the
// same time), and at the shape of the machine-wide lines.
func TestCensusLeavesQuietWorkAlone(t *testing.T) {
	testenv.RequireLive(t, "the processes' pids cgroup")
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	// A copy of sh that starts three copies of itself, each waiting for a
	// sleep: four idle processes of the copy.
	c := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 20, HopCap: 1, Timeout: 60 * time.Second, Name: "quietsh",
		Command: []string{sh, "-c", `"$0" -c 'sleep 50; :' & "$0" -c 'sleep 50; :' & "$0" -c 'sleep 50; :' & wait`}})
	deadline := time.Now().Add(10 * time.Second)
	for c.Population() < 7 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	r, err := Take(proc.Default, 500*time.Millisecond, 1000)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, row := range r.Rows {
		if row.Exe != c.Path {
			continue
		}
		found = true
		if row.Suspect || row.Appeared != 0 {
			t.Fatalf("quiet processes of the test's own taken for a suspect: %+v", row)
		}
	}
	if !found {
		t.Fatalf("the census has no row for the test's own %s (population %d):\n%+v", c.Path, c.Population(), r.Rows)
	}
	if !strings.HasPrefix(r.Verdict, "load ") || !strings.Contains(r.PidLine, "pid_max") {
		t.Fatalf("verdict %q pid line %q", r.Verdict, r.PidLine)
	}
}

// --arg is suggested only for the script most of an interpreter's
// processes run, never from whichever process was read first; and a
// row says whose processes it holds. Real shells, copies in the test's
// own cache, under the harness's cap.
func TestScriptByMajorityAndOwners(t *testing.T) {
	testenv.RequireLive(t, "the harness's pids cgroup")
	for _, tc := range []struct {
		name    string
		scripts []string
		want    string
	}{
		{"majority", []string{"a.sh", "a.sh", "a.sh", "b.sh"}, "a.sh"},
		{"none", []string{"a.sh", "a.sh", "b.sh", "b.sh"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "cache")
			os.Mkdir(dir, 0o755)
			for _, s := range []string{"a.sh", "b.sh"} {
				os.WriteFile(filepath.Join(dir, s), []byte("sleep 60\n"), 0o644)
			}
			sh := filepath.Join(dir, "sh")
			var line []string
			for _, s := range tc.scripts {
				line = append(line, sh+" "+filepath.Join(dir, s)+" &")
			}
			c := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 50, HopCap: 1, Timeout: 120 * time.Second, Dir: dir,
				Command: []string{"/bin/sh", "-c", strings.Join(line, " ") + " wait"}})
			var snaps map[int]snap
			var key rowKey
			// Every script's shell has exec'd its script: a child the
			// outer shell has forked but not yet exec'd runs the same
			// file with the outer shell's argv ("-c ... wait"), and a
			// snapshot then reads one script too few (seen under load:
			// "majority" read "", "none" read the -c line as a script).
			for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
				snaps = take(proc.Default)
				n, ran := 0, 0
				for pid, s := range snaps {
					if s.exe == c.Path {
						n++
						key = s.id
						if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil {
							if argv := strings.Split(string(b), "\x00"); len(argv) > 1 && strings.HasSuffix(argv[1], ".sh") {
								ran++
							}
						}
					}
				}
				if n == len(tc.scripts)+1 && ran == len(tc.scripts) {
					break
				}
			}
			got, share := script(proc.Default, key, snaps)
			want := tc.want
			if want != "" {
				want = filepath.Join(dir, want)
			}
			if got != want || (want != "" && share <= 0.5) {
				t.Errorf("script %q (share %.2f), want %q", got, share, want)
			}
			row := Row{Exe: key.exe, Dev: key.dev, Ino: key.ino}
			if o := owners(proc.Default, row, snaps); o != fmt.Sprintf("uid 0 x%d", len(tc.scripts)+1) {
				t.Errorf("owners %q, want uid 0 x%d", o, len(tc.scripts)+1)
			}
		})
	}
}

// A process whose file cannot be identified (gone between the read of
// its exe link and the stat of it) is left out of the sample: before, it
// made a second row of the same path with no identity (rehearsal 18: a
// churning chain's row and a row of one vanished process, dev 0 inode 0,
// that TestCensusFindsAGrowingChain found by path instead).
func TestTakeLeavesOutAProcessWithoutIdentity(t *testing.T) {
	root := t.TempDir()
	bin := filepath.Join(root, "chain")
	if err := os.WriteFile(bin, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	for pid, target := range map[int]string{101: bin, 102: filepath.Join(root, "gone")} {
		dir := filepath.Join(root, strconv.Itoa(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		stat := fmt.Sprintf("%d (chain) S 1 %d %d 0 -1 4194304 99 0 0 0 0 0 0 0 20 0 1 0 3909940 3133440 410 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n", pid, pid, pid)
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(dir, "exe")); err != nil {
			t.Fatal(err)
		}
	}
	got := take(proc.FS{Root: root})
	if _, ok := got[101]; !ok || len(got) != 1 {
		t.Fatalf("take = %+v, want pid 101 alone (102's file cannot be identified)", got)
	}
}
