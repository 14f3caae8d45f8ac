package order

import (
	"errors"

	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"freeze/internal/container"
	"freeze/internal/match"
	"freeze/internal/proc"
	"freeze/internal/safedir"
	"freeze/internal/say"
	"freeze/internal/show"
	"freeze/internal/timeline"
)

// scope checks --container and --pod and finds what they name, from the
// processes' cgroups; the zero Scope when neither is given.
func (f Flags) scope(o say.Out) (container.Scope, []container.Member, int) {
	if f.container == "" && f.pod == "" {
		return container.Scope{}, nil, 0
	}
	flag := "--container"
	if f.pod != "" {
		flag = "--pod"
	}
	switch {
	case f.container != "" && f.pod != "":
		o.Errorf("--container and --pod together: give one")
		o.Hintf("--container for one container, --pod for every container of a pod")
		return container.Scope{}, nil, timeline.ExitUsage
	case len(f.paths) == 0:
		o.Errorf("%s needs --path: the chain's executable, as its path reads inside the container", flag)
		o.Hintf("a container or pod holds many programs, and stopping all of them is another request: 'podman stop', 'crictl stop' or 'systemctl kill' of its unit, or 'echo 1 > cgroup.kill' in its cgroup")
		return container.Scope{}, nil, timeline.ExitUsage
	case len(f.under) > 0:
		o.Errorf("--under with %s: --under names a directory of this host", flag)
		o.Hintf("name the chain's file with --path, as its path reads inside the container")
		return container.Scope{}, nil, timeline.ExitUsage
	}
	var id, pod string
	var err error
	if f.container != "" {
		id, err = container.ParseID(f.container)
	} else {
		pod, err = container.ParsePod(f.pod)
	}
	if err != nil {
		o.Errorf("%s %v", flag, err)
		o.Hintf("'freeze census' names the container and the pod of each row")
		return container.Scope{}, nil, timeline.ExitUsage
	}
	sc, members, err := container.Resolve(proc.Default, id, pod)
	var nf *container.NotFound
	switch {
	case errors.As(err, &nf):
		o.Errorf("%v", err)
		if len(nf.Candidates) == 0 {
			o.Hintf("no process here runs in a container or a pod that freeze can name from its cgroup: check the id with 'podman ps', 'docker ps' or 'crictl ps', and run freeze on the container's host")
		} else {
			o.Hintf("containers seen here:")
			for _, line := range container.Describe(nf.Candidates, 10) {
				o.Hintf("  %s", show.Term(line))
			}
			o.Hintf("'freeze census' shows which of them holds the chain, and the command for it")
		}
		return sc, nil, timeline.ExitUsage
	case err != nil:
		o.Errorf("%s: %v", flag, err)
		return sc, nil, timeline.ExitUsage
	}
	return sc, members, 0
}

// viewTries bounds the processes of one container tried for its root: a
// process can exit between the listing and the open.
const viewTries = 5

// containerTargets resolves one --path inside the root of each container
// of the scope, through one of its processes (/proc/PID/root, opened in
// that root, never through this host's /), and applies the refusals. A
// pod's containers each have their own root: the path is the chain's
// file in those that have one.
func (f Flags) containerTargets(o say.Out, p string, sc container.Scope, members []container.Member) ([]match.Target, int) {
	if !filepath.IsAbs(p) {
		o.Errorf("--path %q is not absolute", p)
		o.Hintf("give the path as it reads inside the container, for example --path /opt/app/worker")
		return nil, timeline.ExitUsage
	}
	if safedir.IsProcView(p) {
		o.Errorf("--path %s already names a process's own view of a file, and %s another", p, sc)
		o.Hintf("drop --container and --pod, or give the path as it reads inside the container")
		return nil, timeline.ExitUsage
	}
	var ts []match.Target
	seen := map[proc.File]bool{}
	for _, m := range members {
		t, ok := resolveIn(m, p)
		if !ok || seen[proc.File{Dev: t.File.Dev, Ino: t.File.Ino}] {
			continue
		}
		seen[proc.File{Dev: t.File.Dev, Ino: t.File.Ino}] = true
		o.Sayf("--path %s in %s: matching the file as that container holds it (device %d, inode %d), not this host's %s", p, show.Term(m.Place.String()), t.File.Dev, t.File.Ino, p)
		if r := match.Refuse(proc.Default, t, len(f.args) > 0, f.force); r != nil {
			o.Errorf("refused: %s", r.Rule)
			o.Hintf("%s", r.Hint)
			return nil, timeline.ExitRefused
		}
		ts = append(ts, t)
	}
	if len(ts) == 0 {
		o.Errorf("--path %s: no regular file of that path in %s", p, sc)
		o.Hintf("the path is as the container sees it (podman exec ID ls -l %s); or name a process's own file: --path /proc/PID/exe", show.Shell(p))
		return nil, timeline.ExitUsage
	}
	return ts, 0
}

// resolveIn resolves path in the root of one container, through the
// first of its processes that still lives.
func resolveIn(m container.Member, path string) (match.Target, bool) {
	for i, pid := range m.PIDs {
		if i == viewTries {
			break
		}
		root := "/proc/" + strconv.Itoa(pid) + "/root"
		t, err := match.Resolve(root + path)
		if err == nil {
			// The scope again, after the open (which pinned the
			// process): the root was the container's only if the
			// process is still in it.
			if pl, perr := container.Of(proc.Default, pid); perr != nil || pl != m.Place {
				continue
			}
			t.Given = path
			return t, true
		}
		if _, serr := os.Stat(root); errors.Is(err, fs.ErrNotExist) && serr == nil || errors.Is(err, match.ErrNotRegular) {
			return t, false // the process lives: the file is not in this root
		}
	}
	return match.Target{}, false
}
