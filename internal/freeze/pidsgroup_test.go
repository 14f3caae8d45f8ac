package freeze

import "testing"

// A container's view: the runtime mounts the container's own group at
// the hierarchy's mount point, and /proc/self/cgroup names the host's
// path (podman, runc, cgroup v1, no cgroup namespace; read off a podman
// container here).
func TestMountRel(t *testing.T) {
	const id = "915c3906ec05db0debc6bae0ff4e1d5ef53229f330907870c709e94dd432cddf"
	container := "1050 1040 0:30 /libpod_parent/libpod-" + id + " /sys/fs/cgroup/pids ro,nosuid,nodev,noexec,relatime master:12 - cgroup cgroup rw,pids\n"
	host := "33 28 0:30 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:12 - cgroup cgroup rw,pids\n"
	for _, c := range []struct {
		info, group, want string
		fail              bool
	}{
		{container, "/libpod_parent/libpod-" + id, "/", false},
		{container, "/libpod_parent/libpod-" + id + "/inner", "/inner", false},
		{container, "/elsewhere", "", true},
		{host, "/user.slice", "/user.slice", false},
		{"", "/x", "/x", false},
	} {
		got, err := mountRel([]byte(c.info), "/sys/fs/cgroup/pids", c.group)
		if (err != nil) != c.fail || got != c.want {
			t.Errorf("mountRel(%q) = %q, %v; want %q (fail %v)", c.group, got, err, c.want, c.fail)
		}
	}
}
