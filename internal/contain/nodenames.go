package contain

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"freeze/internal/safedir"
)

// nodeTestVar is where node's test runner, given freeze's preload, says
// which test is running, as pytest says it in PYTEST_CURRENT_TEST: "FILE
// TAB FULL NAME". A process the test starts inherits it, so its leftover
// can name its test (#52: a node leftover named only its test file).
const nodeTestVar = "FREEZE_NODE_TEST"

// nodePreload is loaded by every node process of the command
// (NODE_OPTIONS --require). It acts in two places alone, and does
// nothing anywhere else: in the runner (node --test), which it marks
// with its pid, and in a test file's process that runner started
// (NODE_TEST_CONTEXT, its parent the marked runner), where a hook before
// each test puts the test's name in the environment its children
// inherit. A node script a test starts is neither, so node:test is never
// loaded where the command did not load it. Nothing it does can fail the
// command.
const nodePreload = `'use strict';
// freeze run: name the node test that starts a process (` + nodeTestVar + `).
try {
  if (process.execArgv.includes('--test')) {
    process.env.FREEZE_NODE_RUNNER = String(process.pid);
  } else if (process.env.NODE_TEST_CONTEXT && process.env.FREEZE_NODE_RUNNER === String(process.ppid)) {
    const t = require('node:test');
    const file = String(process.argv[1] || '');
    t.beforeEach((c) => { process.env.` + nodeTestVar + ` = file + '\t' + (c.fullName || c.name); });
    t.afterEach(() => { delete process.env.` + nodeTestVar + `; });
  }
} catch (e) {}
`

// nodeEnv is the command's environment with the preload added to
// NODE_OPTIONS, and the preload written for this run alone to dir (the
// state directory) as node-test-names-NAME.cjs, which done removes at
// the run's end; or env as it was, and why not. The preload is only put
// where no other user can change it: a new file (O_EXCL) in a directory
// of freeze's user that no one else can write (safedir.Check), so no one
// else's code runs in the command's node.
func nodeEnv(env []string, dir, name string) (out []string, done func(), err error) {
	done = func() {}
	if dir == "" {
		return env, done, fmt.Errorf("no state directory")
	}
	path := nodePreloadPath(dir, name)
	if strings.ContainsAny(path, "\"\\ \t\n") {
		// NODE_OPTIONS splits at spaces and reads quotes and
		// backslashes: a path with one is not passed.
		return env, done, fmt.Errorf("the state directory %q has a space, quote or backslash, which NODE_OPTIONS would split", dir)
	}
	// Checked, not made: the run's state file made it (0755 for
	// /run/freeze), and one made 0700 here would keep the preload from
	// a command that changes its user.
	if err := safedir.Check(dir); err != nil {
		return env, done, err
	}
	f, err := safedir.CreateNew(path, 0o644)
	if err != nil {
		return env, done, err
	}
	_, err = f.WriteString(nodePreload)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	done = func() { os.Remove(path) }
	if err != nil {
		done()
		return env, func() {}, err
	}
	opt := "--require=" + path
	out = make([]string, 0, len(env)+1)
	set := false
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "NODE_OPTIONS="); ok && !set {
			if strings.TrimSpace(v) != "" {
				opt = v + " " + opt
			}
			kv, set = "NODE_OPTIONS="+opt, true
		}
		out = append(out, kv)
	}
	if !set {
		out = append(out, "NODE_OPTIONS="+opt)
	}
	return out, done, nil
}

// nodePreloadPath is where run name's preload is, in state directory
// dir: a run killed before its end leaves it, and --reap removes it.
func nodePreloadPath(dir, name string) string {
	return filepath.Join(dir, "node-test-names-"+name+".cjs")
}

// nodeTest reads the node test a process inherited from nodeTestVar
// ("FILE\tNAME"): the test's full name, the classname (its file,
// relative to freeze's working directory where it is below it) and the
// file.
func nodeTest(v string) (test, class, file string, ok bool) {
	file, test, ok = strings.Cut(v, "\t")
	if !ok || test == "" {
		return "", "", "", false
	}
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, file); err == nil && !strings.HasPrefix(rel, "..") {
			file = rel
		}
	}
	return test, file, file, true
}
