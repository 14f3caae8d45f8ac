package container

import (
	"errors"
	"testing"
)

const (
	id  = "661e5390e538faffbe393c3c711a97a70dd7ad41d424a681637d8811cc481c9a"
	uid = "1234abcd-0000-1111-2222-333344445555"
	us  = "1234abcd_0000_1111_2222_333344445555" // the systemd driver's spelling
)

// TestLayouts is the table of the runtimes' and the kubelet's cgroup
// layouts, a row each, with where each comes from.
func TestLayouts(t *testing.T) {
	for _, c := range []struct {
		src, path string
		want      Place
	}{
		// moby, daemon/oci_linux.go: cgroup parent "/docker" (cgroupfs),
		// "system.slice" with scope prefix "docker" (systemd).
		{"docker, cgroupfs", "/docker/" + id, Place{"docker", id, ""}},
		{"docker, systemd", "/system.slice/docker-" + id + ".scope", Place{"docker", id, ""}},
		// podman, libpod: CgroupfsDefaultCgroupParent "/libpod_parent",
		// SystemdDefaultCgroupParent "machine.slice", prefix "libpod-";
		// split cgroups put the processes in .../container.
		{"podman, cgroupfs", "/libpod_parent/libpod-" + id, Place{"podman", id, ""}},
		{"podman, systemd", "/machine.slice/libpod-" + id + ".scope", Place{"podman", id, ""}},
		{"podman, split", "/machine.slice/libpod-" + id + ".scope/container", Place{"podman", id, ""}},
		{"podman, --cgroup-parent", "/freeze-test/libpod-" + id, Place{"podman", id, ""}},
		// containerd's CRI plugin: systemd scope prefix "cri-containerd".
		{"containerd CRI, systemd", "/system.slice/cri-containerd-" + id + ".scope", Place{"containerd", id, ""}},
		// nerdctl: "nerdctl.slice", prefix "nerdctl" (systemd); /NAMESPACE/ID (cgroupfs).
		{"nerdctl, systemd", "/nerdctl.slice/nerdctl-" + id + ".scope", Place{"containerd", id, ""}},
		{"nerdctl, cgroupfs", "/default/" + id, Place{"containerd", id, ""}},
		// CRI-O: prefix "crio" (systemd scope, and cgroupfs).
		{"cri-o, systemd", "/machine.slice/crio-" + id + ".scope", Place{"cri-o", id, ""}},
		// kubelet, pkg/kubelet/cm: "kubepods", QoS "burstable" and
		// "besteffort" (guaranteed pods sit at the top), "pod" + uid;
		// the systemd driver escapes the uid's dashes to underscores.
		{"kubelet cgroupfs, burstable", "/kubepods/burstable/pod" + uid + "/" + id, Place{"", id, uid}},
		{"kubelet cgroupfs, guaranteed", "/kubepods/pod" + uid + "/" + id, Place{"", id, uid}},
		{"kubelet cgroupfs, cri-o", "/kubepods/besteffort/pod" + uid + "/crio-" + id, Place{"cri-o", id, uid}},
		{"kubelet systemd, containerd", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + us + ".slice/cri-containerd-" + id + ".scope", Place{"containerd", id, uid}},
		{"kubelet systemd, guaranteed, cri-o", "/kubepods.slice/kubepods-pod" + us + ".slice/crio-" + id + ".scope", Place{"cri-o", id, uid}},
		{"kubelet systemd, besteffort, docker", "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + us + ".slice/docker-" + id + ".scope", Place{"docker", id, uid}},
		{"kubelet, pod group itself", "/kubepods/burstable/pod" + uid, Place{"", "", uid}},
		{"kubepods nested under a test's group", "/freeze-test/kubepods/burstable/pod" + uid + "/libpod-" + id, Place{"podman", id, uid}},
		// Not containers: the host, conmon beside a container, a pod
		// name outside kubepods, an id of the wrong length.
		{"host", "/", Place{}},
		{"user session", "/user.slice/user-1000.slice/session-3.scope", Place{}},
		{"podman's conmon", "/machine.slice/libpod-conmon-" + id + ".scope", Place{}},
		{"cri-o's conmon", "/machine.slice/crio-conmon-" + id + ".scope", Place{}},
		{"podman's conmon, cgroupfs", "/freeze-test/kubepods/burstable/pod" + uid + "/conmon", Place{"", "", uid}},
		{"pod outside kubepods", "/pod" + uid + "/x", Place{}},
		{"short id", "/docker/" + id[:63], Place{}},
	} {
		if got := Parse(c.path); got != c.want {
			t.Errorf("%s: Parse(%q) = %+v, want %+v", c.src, c.path, got, c.want)
		}
	}
}

// TestFromCgroupFile reads the hybrid host's file as podman left it: the
// same path in every hierarchy, and the unified line.
func TestFromCgroupFile(t *testing.T) {
	hybrid := "9:name=systemd:/freeze-pmtest/kubepods/burstable/pod" + uid + "/libpod-" + id + "\n" +
		"8:pids:/freeze-pmtest/kubepods/burstable/pod" + uid + "/libpod-" + id + "\n" +
		"0::/freeze-pmtest/kubepods/burstable/pod" + uid + "/libpod-" + id + "\n"
	if got := FromCgroupFile([]byte(hybrid)); got != (Place{"podman", id, uid}) {
		t.Errorf("hybrid: %+v", got)
	}
	if got := FromCgroupFile([]byte("0::/user.slice/user-0.slice/session-1.scope\n")); !got.Host() {
		t.Errorf("host: %+v", got)
	}
	// One hierarchy names the container (a v1 controller the runtime
	// used), another does not (the unified line of a v1 runtime).
	mixed := "4:memory:/docker/" + id + "\n0::/\n"
	if got := FromCgroupFile([]byte(mixed)); got != (Place{"docker", id, ""}) {
		t.Errorf("mixed: %+v", got)
	}
}

func TestParseIDAndPod(t *testing.T) {
	for _, ok := range []string{id, id[:12], "661E5390E538"} {
		if _, err := ParseID(ok); err != nil {
			t.Errorf("ParseID(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "661e5390e53", "bold_curie", id + "0", "661e5390e53g"} {
		if _, err := ParseID(bad); !errors.Is(err, ErrBadID) {
			t.Errorf("ParseID(%q) = %v, want ErrBadID", bad, err)
		}
	}
	for _, ok := range []string{uid, us} {
		if got, err := ParsePod(ok); err != nil || got != uid {
			t.Errorf("ParsePod(%q) = %q, %v", ok, got, err)
		}
	}
	for _, bad := range []string{"", "pod" + uid, uid[:35], "my-pod"} {
		if _, err := ParsePod(bad); !errors.Is(err, ErrBadPod) {
			t.Errorf("ParsePod(%q) = %v, want ErrBadPod", bad, err)
		}
	}
}

func TestScopeHolds(t *testing.T) {
	in := Place{"podman", id, uid}
	other := Place{"podman", "f" + id[1:], ""}
	if !(Scope{ID: id}).Holds(in) || (Scope{ID: id}).Holds(other) || (Scope{ID: id}).Holds(Place{}) {
		t.Error("container scope")
	}
	if !(Scope{Pod: uid}).Holds(in) || (Scope{Pod: uid}).Holds(other) {
		t.Error("pod scope")
	}
	if got := in.String(); got != "podman 661e5390e538, pod "+uid {
		t.Errorf("String: %q", got)
	}
}
