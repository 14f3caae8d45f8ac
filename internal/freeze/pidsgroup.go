package freeze

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// OwnV1 is this process's group in the cgroup v1 hierarchy of
// controller ctl, mounted at root, as /proc/self/cgroup names it,
// relative to what is mounted there: in a container, the runtime mounts
// the container's own group at root (/sys/fs/cgroup/pids is the host's
// /libpod_parent/libpod-ID), while /proc/self/cgroup, without a cgroup
// namespace, names the host's path.
func OwnV1(ctl, root string) (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 || f[0] == "0" || !hasCtl(f[1], ctl) {
			continue
		}
		rel, err := underMount(root, f[2])
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(filepath.Join(root, rel, "cgroup.procs")); err != nil {
			return "", err
		}
		return rel, nil
	}
	return "", fmt.Errorf("no v1 %s hierarchy", ctl)
}

// underMount is group (a path in its hierarchy) relative to the cgroup
// mounted at mountpoint, which may be a subtree of the hierarchy (its
// root in /proc/self/mountinfo): a container's view.
func underMount(mountpoint, group string) (string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return group, nil
	}
	return mountRel(b, mountpoint, group)
}

// mountRel reads mountinfo for the root of the mount at mountpoint (the
// last one mounted there wins) and returns group relative to it.
func mountRel(mountinfo []byte, mountpoint, group string) (string, error) {
	root := ""
	for _, line := range strings.Split(string(mountinfo), "\n") {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT ...
		f := strings.Fields(line)
		if len(f) > 4 && f[4] == mountpoint {
			root = f[3]
		}
	}
	if root == "" || root == "/" {
		return group, nil
	}
	if group == root {
		return "/", nil
	}
	if rel, ok := strings.CutPrefix(group, root+"/"); ok {
		return "/" + rel, nil
	}
	return "", fmt.Errorf("this process's group %s is outside the part of the hierarchy mounted at %s (%s)", group, mountpoint, root)
}

func hasCtl(list, ctl string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == ctl {
			return true
		}
	}
	return false
}

// OwnV2 is this process's group in the cgroup v2 hierarchy ("/" for the
// root), as /proc/self/cgroup's "0::" line names it.
func OwnV2() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if g, ok := strings.CutPrefix(l, "0::"); ok {
			if !strings.HasPrefix(g, "/") || strings.Contains(g, "/..") || strings.HasSuffix(g, " (deleted)") {
				return "", fmt.Errorf("freeze's own cgroup v2 group %q cannot be nested in", g)
			}
			return g, nil
		}
	}
	return "", fmt.Errorf("freeze is in no cgroup v2 group")
}

// HandsOutPids says whether the v2 group dir enables the pids controller
// for its children (cgroup.subtree_control has "pids").
func HandsOutPids(dir string) bool {
	ctl, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return false
	}
	for _, w := range strings.Fields(string(ctl)) {
		if w == "pids" {
			return true
		}
	}
	return false
}

// PidsParentV2 is the v2 group in which a group capped by pids.max can be
// made for a tree that freeze starts: the parent of freeze's own group,
// where it hands out pids, so that a cap on it or above (an outer freeze
// run's, a systemd slice's TasksMax) still holds; else the root, and
// notAbove says why (the parent that does not hand out pids). freeze's own group cannot be the parent: under systemd
// it holds freeze (a unit's or a session's group), and a v2 group with
// processes in it hands out no controller ("no internal processes").
func PidsParentV2() (parent, notAbove string, err error) {
	mount, err := Cgroup2Mount()
	if err != nil {
		return "", "", err
	}
	own, err := OwnV2()
	if err != nil {
		return "", "", err
	}
	parent = filepath.Join(mount, filepath.Dir(own))
	if HandsOutPids(parent) {
		return parent, "", nil
	}
	if parent == mount || !HandsOutPids(mount) {
		return "", "", fmt.Errorf("the pids controller is not enabled at %s", parent)
	}
	return mount, fmt.Sprintf("%s does not hand out the pids controller", parent), nil
}
