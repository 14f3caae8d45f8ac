package contain

import (
	"errors"
	"fmt"
	"io/fs"
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
// NODE_OPTIONS, and the preload written for this run alone as
// node-test-names-NAME.cjs, in the state directory dir or, as root, in
// its sibling (nodePreloadDir), which done removes at the run's end; or
// env as it was, and why not. The preload is only put where no other
// user can change it: a new file (O_EXCL) in a directory of freeze's
// user that no one else can write (safedir.Check), so no one else's code
// runs in the command's node.
func nodeEnv(env []string, dir, name string) (out []string, done func(), err error) {
	done = func() {}
	if dir == "" {
		return env, done, fmt.Errorf("no state directory")
	}
	if strings.ContainsAny(nodePreloadPath(dir+nodeSibling, name), "\"\\ \t\n") {
		// NODE_OPTIONS splits at spaces and reads quotes and
		// backslashes: a path with one is not passed.
		return env, done, fmt.Errorf("the state directory %q has a space, quote or backslash, which NODE_OPTIONS would split", dir)
	}
	var f *os.File
	var pdir string
	// Twice: another run's end can remove the sibling between its
	// making and the file's.
	for try := 0; try < 2; try++ {
		if pdir, err = nodePreloadDir(dir); err != nil {
			return env, done, err
		}
		if f, err = safedir.CreateNew(nodePreloadPath(pdir, name), 0o644); !errors.Is(err, fs.ErrNotExist) {
			break
		}
	}
	if err != nil {
		return env, done, err
	}
	path := f.Name()
	// 0644 whatever the umask: node reads it as the command's user.
	err = f.Chmod(0o644)
	if err == nil {
		_, err = f.WriteString(nodePreload)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	done = func() {
		os.Remove(path)
		if pdir != dir {
			unix.Rmdir(pdir) // another run's preload keeps it (ENOTEMPTY)
		}
	}
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

// nodeSibling ends the name of the state directory's sibling that
// holds root's preloads where the state directory is not searchable by
// others (a guard makes /run/freeze 0700): /run/freeze-node.
const nodeSibling = "-node"

// nodePreloadDir is the directory the preload goes in, for state
// directory dir, which it checks and does not make (the run's state
// file made it; runlock and the guard make /run/freeze 0700). A command
// freeze runs as root can change its user and keep NODE_OPTIONS (su,
// setpriv, node's spawn with a uid), and its node then fails to start
// if that user cannot read the preload. So as root the preload goes only
// where every user can reach it: dir if every directory of its path is
// searchable by others, else dir's sibling DIR-node, made 0755, if its
// path is. Another user's own runs keep it in dir: their command is
// theirs.
func nodePreloadDir(dir string) (string, error) {
	if err := safedir.Check(dir); err != nil {
		return "", err
	}
	if os.Geteuid() != 0 {
		return dir, nil
	}
	why := searchable(dir)
	if why == nil {
		return dir, nil
	}
	sib := dir + nodeSibling
	if err := safedir.EnsureShared(sib); err != nil {
		return "", err
	}
	if err := searchable(sib); err != nil {
		unix.Rmdir(sib)
		return "", fmt.Errorf("a command that changes its user could not load the preload: %v, and %v; give --state-dir a directory every user can search", why, err)
	}
	return sib, nil
}

// searchable says why not every user can reach what is in dir: the
// first directory of its path (links resolved) that others cannot
// search.
func searchable(dir string) error {
	p, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	for {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			return err
		}
		if st.Mode&0o001 == 0 {
			return fmt.Errorf("others cannot search %s (mode %#o)", p, st.Mode&0o7777)
		}
		if p == "/" {
			return nil
		}
		p = filepath.Dir(p)
	}
}

// nodePreloadPath is where run name's preload is, in directory dir.
func nodePreloadPath(dir, name string) string {
	return filepath.Join(dir, "node-test-names-"+name+".cjs")
}

// removeNodePreload removes run name's preload, wherever nodeEnv put it
// for state directory dir: a run killed before its end leaves it, and
// --reap removes it.
func removeNodePreload(dir, name string) {
	os.Remove(nodePreloadPath(dir, name))
	if os.Remove(nodePreloadPath(dir+nodeSibling, name)) == nil {
		unix.Rmdir(dir + nodeSibling)
	}
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
