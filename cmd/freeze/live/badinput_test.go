package live

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"freeze/internal/containtest"
	"freeze/internal/freeze"
	"freeze/internal/match"
	"freeze/internal/proc"
	"freeze/internal/runtest"
	"freeze/internal/show"
	"freeze/internal/testenv"
	"freeze/internal/timeline"
)

// Bad input, each case run by the real binary against a live chain: a
// clear error naming the input with exit 2 (usage) or 3 (safety), or a
// warning and carrying on where the issue is the machine's (a read-only
// or full timeline location), and nothing changed: the chain stays whole
// and running, no group is made, the file keeps its mode. Every line
// freeze prints starts with "freeze: ", whatever the path holds.
func TestBadInput(t *testing.T) {
	testenv.RequireLive(t, "the chain is capped by a pids cgroup, and some cases switch to another user")
	for _, tool := range []string{"unshare", "setpriv", "sh"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found (util-linux): needed for the hidepid, other-user and read-only cases", tool)
		}
	}
	bin := buildFreeze(t)
	// A test cache whose path holds a space.
	cache := filepath.Join(t.TempDir(), "test cache")
	chain := containtest.Start(t, containtest.Spec{Shape: containtest.Tree, Cap: 50, HopCap: 1000000, Timeout: 300 * time.Second, Interval: 100 * time.Millisecond, Dir: cache,
		// A name no other test's chain has: the refusal counts every
		// process of that name, and other packages' tests may run chains
		// at the same time (go test ./... runs packages in parallel).
		Name: "badinput"})
	if n := chain.WaitPopulation(50, 30*time.Second); n != 50 {
		t.Fatalf("chain reached %d of 50", n)
	}
	runtest.RemoveAtCleanup(t, chain.Path)
	st, err := os.Stat(chain.Path)
	if err != nil {
		t.Fatal(err)
	}
	mode := st.Mode()
	// Another user must reach the binary and the chain's file.
	for _, p := range []string{bin, chain.Path} {
		for d := filepath.Dir(p); d != "/tmp" && d != "/"; d = filepath.Dir(d) {
			os.Chmod(d, 0o755)
		}
	}
	scratch := t.TempDir()
	// The other user's TMPDIR, as /tmp is: lock and timeline fall back
	// here. Sticky: freeze's writer refuses a directory others can write
	// that is not (its records then fell back to /tmp and stayed there).
	os.Chmod(scratch, 0o777|os.ModeSticky)
	link := filepath.Join(scratch, "link")
	if err := os.Symlink(chain.Path, link); err != nil {
		t.Fatal(err)
	}
	newline := filepath.Join(scratch, "new\nline")
	if err := os.WriteFile(newline, []byte("#!/bin/false\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ro := filepath.Join(scratch, "ro")
	os.Mkdir(ro, 0o755)
	full := filepath.Join(scratch, "full")
	os.Mkdir(full, 0o755)
	current := filepath.Join(scratch, "current")
	if err := os.Symlink(cache, current); err != nil {
		t.Fatal(err)
	}
	asNobody := []string{"setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "env", "TMPDIR=" + scratch}
	sh := func(script string, args ...string) []string {
		return append([]string{"unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh"}, args...)
	}

	cases := []struct {
		name    string
		command []string
		exit    int
		stderr  []string // regexps, all must match
	}{
		{"relative path", sh(`cd "$1" && exec "$2" --path badinput`, cache, bin), 2,
			// The chain runs: the hint names it, with its count, and the command (#27).
			[]string{`error: --path "badinput" is not absolute`, `hint: running now: ` + regexp.QuoteMeta(chain.Path) + ` \(50 processes\): freeze --path ` + regexp.QuoteMeta(show.Shell(chain.Path))}},
		{"missing file", []string{bin, "--path", cache + "/missing"}, 2, []string{`error: --path .*/missing: no such file`}},
		{"directory", []string{bin, "--path", cache}, 2, []string{`not a regular file \(it is a directory\)`, `use --under`}},
		{"unknown flag", []string{bin, "--path", chain.Path, "--frezze"}, 2, []string{`error: unknown flag: --frezze`, `hint: see 'freeze --help'`}},
		{"symlink, said and resolved", []string{bin, "--dry-run", "--path", link}, 0,
			[]string{`--path .*/link is a symlink: matching the file it points to, ` + regexp.QuoteMeta(chain.Path), `1/4 match: 50 live processes match`}},
		{"path with a space", []string{bin, "--dry-run", "--path", chain.Path}, 0, []string{`1/4 match: 50 live processes match`, `nothing was changed`}},
		// #24, finding 5: a symlinked --under matched nothing and exited 0
		// on b1884f8, and a system directory reached through /proc passed
		// the refusal, which read the unresolved text.
		{"symlinked --under, said and resolved", []string{bin, "--dry-run", "--under", current}, 0,
			[]string{`--under .*/current is a symlink to ` + regexp.QuoteMeta(cache), `1/4 match: 50 live processes match`}},
		{"--under a system directory through /proc", []string{bin, "--dry-run", "--under", "/proc/self/root/usr/bin"}, 3,
			[]string{`refused: --under /usr/bin would match the machine's own programs`}},
		{"--under /var/lib", []string{bin, "--dry-run", "--under", "/var/lib"}, 3,
			[]string{`refused: --under /var/lib would match the machine's own programs`}},
		{"path with a newline", []string{bin, "--path", newline, "--timeline", filepath.Join(scratch, "nl.jsonl")}, 0,
			[]string{`nothing matched: no live process runs --path \$'.*/new\\nline'`}},
		{"hidepid, not root", sh(`mount -t proc -o hidepid=2 proc /proc && exec "$@"`, append(asNobody, bin, "--path", chain.Path)...), 3,
			[]string{`refused: /proc is mounted with hidepid=`, `hint: run freeze as root`, `nothing was changed`}},
		{"another user's chain, not root", append(asNobody, bin, "--path", chain.Path, "--timeline", filepath.Join(scratch, "other.jsonl")), 3,
			[]string{`refused: 50 processes named "badinput" belong to other users`, `pid \d+, uid 0 \(root\)`, `hint: run freeze as root`}},
		{"read-only timeline location", sh(`mount -t tmpfs -o ro none "$1" && shift && exec "$@"`, ro, "env", "TMPDIR="+scratch, bin, "--dry-run", "--path", chain.Path, "--timeline", ro+"/t.jsonl"), 0,
			[]string{`warning: cannot write the timeline: .*read-only file system`, `the timeline was saved instead to ` + regexp.QuoteMeta(scratch)}},
		// A full disk: a tmpfs of 64 KiB, filled before freeze starts.
		{"full timeline location", sh(`mount -t tmpfs -o size=64k none "$1" && { head -c 1048576 /dev/zero > "$1/fill" 2>/dev/null; true; } && shift && exec "$@"`, full, "env", "TMPDIR="+scratch, bin, "--dry-run", "--path", chain.Path, "--timeline", full+"/t.jsonl"), 0,
			[]string{`warning: the timeline ` + regexp.QuoteMeta(full) + `/t.jsonl stopped taking events: .*no space left on device`, `the timeline was saved instead to ` + regexp.QuoteMeta(scratch)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path, err := exec.LookPath(tc.command[0])
			if err != nil {
				t.Fatal(err)
			}
			run := containtest.Start(t, containtest.Spec{Shape: containtest.Run, Cap: 100, HopCap: 1, Timeout: 60 * time.Second,
				Command: append([]string{path}, tc.command[1:]...)})
			ws, ok := run.Exit(50 * time.Second)
			stderr := run.Stderr()
			if !ok {
				t.Fatalf("did not finish in 50 s:\n%s", stderr)
			}
			if ws.ExitStatus() != tc.exit {
				t.Fatalf("exit %d, want %d:\n%s", ws.ExitStatus(), tc.exit, stderr)
			}
			for _, re := range tc.stderr {
				if !regexp.MustCompile(`(?m)` + re).MatchString(stderr) {
					t.Errorf("stderr lacks %q:\n%s", re, stderr)
				}
			}
			for _, line := range strings.Split(strings.TrimSuffix(stderr, "\n"), "\n") {
				if !strings.HasPrefix(line, "freeze: ") {
					t.Errorf("a line not in freeze's voice (a path broke it?): %q", line)
				}
			}
			if m := regexp.MustCompile(`saved instead to (\S+)`).FindStringSubmatch(stderr); m != nil {
				if ev, err := timeline.ReadFile(m[1]); err != nil || len(ev) == 0 || ev[0].Step != "start" {
					t.Errorf("the saved timeline %s: %d events, %v", m[1], len(ev), err)
				}
			}
			// Nothing changed.
			if n := chain.Population(); n != 50 {
				t.Fatalf("the chain has %d processes after the case, want its 50", n)
			}
			for _, pid := range chain.Survivors() {
				if s, err := proc.Default.ReadStat(pid); err == nil && s.State == 'T' {
					t.Fatalf("chain pid %d is stopped", pid)
				}
			}
			tg, _ := match.Resolve(chain.Path)
			group := freeze.GroupName(match.Spec{Targets: []match.Target{tg}})
			for _, d := range []string{"/sys/fs/cgroup/unified/" + group, "/sys/fs/cgroup/" + group, "/sys/fs/cgroup/freezer/" + group} {
				if _, err := os.Stat(d); err == nil {
					t.Fatalf("a group was made: %s", d)
				}
			}
			if st, err := os.Stat(chain.Path); err != nil || st.Mode() != mode {
				t.Fatalf("the chain's file changed: %v %v, want %v", st.Mode(), err, mode)
			}
		})
	}
}
