package contain

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"freeze/internal/testenv"
)

// The preload goes into NODE_OPTIONS after what the user set, only from
// a directory no one else can write, in a file of the run's own that
// its end removes.
func TestNodeEnvAddsThePreloadAndKeepsTheUsersOptions(t *testing.T) {
	dir := testenv.SearchableTempDir(t) // as root, else it goes beside it
	p := filepath.Join(dir, "node-test-names-run1.cjs")
	env, done, err := nodeEnv([]string{"A=1", "NODE_OPTIONS=--max-old-space-size=64", "B=2"}, dir, "run1")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(env, " "); got != "A=1 NODE_OPTIONS=--max-old-space-size=64 --require="+p+" B=2" {
		t.Errorf("env %q: the user's NODE_OPTIONS not kept, or the preload not added after it", got)
	}
	if b, err := os.ReadFile(p); err != nil || string(b) != nodePreload {
		t.Fatalf("the preload file: %q, %v", b, err)
	}
	done()
	if _, err := os.Lstat(p); err == nil {
		t.Errorf("the run's end left its preload %s", p)
	}
	env, done, err = nodeEnv([]string{"A=1"}, dir, "run2")
	defer done()
	if err != nil || env[len(env)-1] != "NODE_OPTIONS=--require="+filepath.Join(dir, "node-test-names-run2.cjs") {
		t.Errorf("env %q (%v): no NODE_OPTIONS with the preload", env, err)
	}

	// A file someone planted at the name: never opened or run.
	planted := filepath.Join(dir, "node-test-names-run3.cjs")
	if err := os.Symlink("/etc/passwd", planted); err != nil {
		t.Fatal(err)
	}
	if env, _, err := nodeEnv([]string{"A=1"}, dir, "run3"); err == nil || len(env) != 1 {
		t.Errorf("a link at the preload's name: env %q, err %v; want it refused and env unchanged", env, err)
	}

	// A directory others can write: the preload is not put there.
	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if env, _, err := nodeEnv([]string{"A=1"}, open, "run4"); err == nil || len(env) != 1 {
		t.Errorf("a directory others can write: env %q, err %v; want it refused and env unchanged", env, err)
	}
	if ents, _ := os.ReadDir(open); len(ents) != 0 {
		t.Errorf("the preload was written into a directory others can write: %v", ents)
	}
	// A path NODE_OPTIONS would split.
	spaced := filepath.Join(t.TempDir(), "a b")
	if err := os.Mkdir(spaced, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, _, err := nodeEnv(nil, spaced, "run5"); err == nil {
		t.Errorf("a state directory with a space was passed in NODE_OPTIONS")
	}
}

func TestNodeTestSplitsFileAndName(t *testing.T) {
	wd, _ := os.Getwd()
	for _, c := range []struct{ in, test, file string }{
		{filepath.Join(wd, "t", "a.test.js") + "\tgroup > inner", "group > inner", "t/a.test.js"},
		{"/elsewhere/b.test.mjs\tone", "one", "/elsewhere/b.test.mjs"},
	} {
		test, class, file, ok := nodeTest(c.in)
		if !ok || test != c.test || file != c.file || class != c.file {
			t.Errorf("nodeTest(%q) = %q, %q, %q, %v; want %q in %q", c.in, test, class, file, ok, c.test, c.file)
		}
	}
	for _, in := range []string{"", "no tab", "/x.js\t"} {
		if _, _, _, ok := nodeTest(in); ok {
			t.Errorf("nodeTest(%q) named a test", in)
		}
	}
}

// The preload in a real node: each test's children inherit its name,
// and a node script a test starts is left alone (node:test never loaded
// in it, so it prints no test report of its own).
func TestNodePreloadNamesEachTestInARealNode(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node on PATH (.ci/run installs Debian's nodejs)")
	}
	dir := testenv.SearchableTempDir(t)
	js := filepath.Join(dir, "names.test.js")
	src := `const { test, describe, it } = require('node:test');
const { execFileSync } = require('node:child_process');
const seen = (tag) => console.log('SEEN ' + tag + ' [' + (process.env.FREEZE_NODE_TEST || 'none').split('\t').join(' | ') + ']');
test('first one', () => seen('a'));
describe('group', () => { it('inner', () => seen('b')); });
test('outer', async (t) => { await t.test('sub', () => seen('c')); });
test('a script', () => { process.stdout.write(execFileSync(process.execPath, ['-e', 'console.log("SCRIPT test runner loaded: " + process.moduleLoadList.some((m) => m.includes("test_runner")))'])); });
`
	if err := os.WriteFile(js, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	// This test's own node: no NODE_OPTIONS of the environment it runs
	// in (CI runs the suite under freeze run, whose preload is there).
	clean := nodeFreeEnv()
	env, done, err := nodeEnv(clean, dir, "real")
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", js)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	t.Cleanup(func() {
		if cmd.Process != nil {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	})
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test: %v\n%s", err, out)
	}
	for _, want := range []string{
		"SEEN a [" + js + " | first one]",
		"SEEN b [" + js + " | group > inner]",
		"SEEN c [" + js + " | outer > sub]",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("node's output has no %q:\n%s", want, out)
		}
	}
	if !strings.Contains(string(out), "SCRIPT test runner loaded: false") {
		t.Errorf("a script a test started: node:test loaded in it, or it did not run:\n%s", out)
	}
	// Without the preload the same tests name nothing.
	plain := exec.CommandContext(ctx, node, "--test", js)
	plain.Env = clean
	plain.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	plain.Cancel = func() error { return syscall.Kill(-plain.Process.Pid, syscall.SIGKILL) }
	if out, err := plain.CombinedOutput(); err != nil || !strings.Contains(string(out), "SEEN a [none]") {
		t.Errorf("node --test without the preload: %v\n%s", err, out)
	}
}

// nodeFreeEnv is the test's environment without NODE_OPTIONS and what
// the preload sets: CI runs the suite under freeze run, whose preload is
// there.
func nodeFreeEnv() []string {
	var clean []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NODE_OPTIONS=") && !strings.HasPrefix(kv, "FREEZE_NODE_") && !strings.HasPrefix(kv, "NODE_TEST_CONTEXT=") {
			clean = append(clean, kv)
		}
	}
	return clean
}

// As root, a command can become another user and keep NODE_OPTIONS (su,
// setpriv, node's spawn with a uid): its node must still start. The
// preload goes where every user can read it, beside a state directory
// only root can search (a guard makes /run/freeze 0700), whatever the
// umask; and where there is no such place, NODE_OPTIONS is left alone.
func TestNodePreloadReachesACommandThatChangesItsUser(t *testing.T) {
	testenv.RequireRoot(t, "to run node as another user")
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node on PATH (.ci/run installs Debian's nodejs)")
	}
	base := testenv.SearchableTempDir(t)
	state := filepath.Join(base, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	old := syscall.Umask(0o077)
	env, done, err := nodeEnv(nodeFreeEnv(), state, "user")
	syscall.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	sib := state + "-node"
	p := filepath.Join(sib, "node-test-names-user.cjs")
	if got := env[len(env)-1]; got != "NODE_OPTIONS=--require="+p {
		t.Fatalf("NODE_OPTIONS %q, want the preload beside the state directory, at %s", got, p)
	}
	for path, want := range map[string]os.FileMode{sib: 0o755, p: 0o644} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v, %v; want mode %#o", path, fi.Mode(), err, want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "-e", `console.log("ran as " + process.getuid())`)
	cmd.Env, cmd.Dir = env, "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if out, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "ran as 65534" {
		t.Errorf("node as uid 65534 with freeze's NODE_OPTIONS: %v\n%s", err, out)
	}
	done()
	if _, err := os.Lstat(sib); err == nil {
		t.Errorf("the run's end left %s", sib)
	}

	// Nowhere every user can reach: NODE_OPTIONS left alone, and
	// nothing made.
	hidden := filepath.Join(t.TempDir(), "hidden")
	private := filepath.Join(hidden, "state")
	if err := os.Mkdir(hidden, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	env, _, err = nodeEnv([]string{"A=1"}, private, "none")
	if err == nil || !strings.Contains(err.Error(), "--state-dir") || len(env) != 1 {
		t.Errorf("no place others can reach: env %q, err %v; want env unchanged and a reason naming --state-dir", env, err)
	}
	if _, err := os.Lstat(private + "-node"); err == nil {
		t.Errorf("a refused preload left %s-node", private)
	}
}
