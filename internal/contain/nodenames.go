package contain

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"freeze/internal/safedir"
)

// nodeTestVar is where node's test runner, given freeze's preload, says
// which test is running, as pytest says it in PYTEST_CURRENT_TEST: "FILE
// TAB FULL NAME". A process the test starts inherits it, so its leftover
// can name its test (#52: a node leftover named only its test file).
const nodeTestVar = "FREEZE_NODE_TEST"

// nodePreloadName is the preload's file in the state directory.
const nodePreloadName = "node-test-names.cjs"

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
// NODE_OPTIONS, the preload written to dir (the run's state directory)
// if it is not there already; or env as it was, and why not. The
// preload is only put where no other user can change it: a directory of
// freeze's user that no one else can write (safedir.Check), so no one
// else's code runs in the command's node.
func nodeEnv(env []string, dir string) ([]string, error) {
	if dir == "" {
		return env, fmt.Errorf("no state directory")
	}
	if strings.ContainsAny(dir, "\"\\ \t\n") {
		// NODE_OPTIONS splits at spaces and reads quotes and
		// backslashes: a path with one is not passed.
		return env, fmt.Errorf("the state directory %q has a space, quote or backslash, which NODE_OPTIONS would split", dir)
	}
	// Checked, not made: the run's state file made it (0755 for
	// /run/freeze), and one made 0700 here would keep the preload from
	// a command that changes its user.
	if err := safedir.Check(dir); err != nil {
		return env, err
	}
	path := filepath.Join(dir, nodePreloadName)
	if !preloadIsThere(path) {
		if err := safedir.WriteFile(path, []byte(nodePreload), 0o644); err != nil {
			return env, err
		}
	}
	opt := "--require=" + path
	out := make([]string, 0, len(env)+1)
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
	return out, nil
}

// preloadIsThere reports whether path is the preload as this freeze
// writes it: a regular file of freeze's user, one link, mode 0644, with
// these bytes. A run then writes nothing (most runs start no node).
func preloadIsThere(path string) bool {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() || st.Nlink != 1 || st.Mode&0o7777 != 0o644 || st.Size != int64(len(nodePreload)) {
		return false
	}
	b := make([]byte, len(nodePreload)+1)
	n, _ := f.Read(b)
	return bytes.Equal(b[:n], []byte(nodePreload))
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
