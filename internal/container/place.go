// Package container says which container and which Kubernetes pod a
// process runs in, from its cgroup path alone: no runtime's API, no exec
// of a runtime's client, nothing a container's owner can answer for it.
//
// The layouts are the ones the runtimes and the kubelet make (see
// layouts_test.go, a row each, with where each comes from):
//
//	docker      /docker/ID                      (cgroupfs driver)
//	            /system.slice/docker-ID.scope   (systemd driver)
//	podman      /libpod_parent/libpod-ID        (cgroupfs; PARENT/libpod-ID with --cgroup-parent)
//	            /machine.slice/libpod-ID.scope  (systemd; .../container below it with split cgroups)
//	containerd  .../cri-containerd-ID.scope     (CRI, systemd driver)
//	            /nerdctl.slice/nerdctl-ID.scope, /NAMESPACE/ID (nerdctl, ctr)
//	cri-o       .../crio-ID.scope, .../crio-ID
//	kubelet     /kubepods/[burstable|besteffort/]podUID/ID           (cgroupfs driver)
//	            /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podUID.slice/RUNTIME-ID.scope
//	            (systemd driver: the UID's dashes become underscores)
//
// A runtime's monitor (podman's and CRI-O's conmon) runs on the host, in
// a group of its own beside the container's: it is not in the container.
package container

import (
	"errors"
	"fmt"
	"strings"
)

// A Place is where a process runs: the host (the zero Place), or a
// container, and the pod that holds the container, if any.
type Place struct {
	Runtime string `json:"runtime,omitempty"` // docker, podman, containerd, cri-o; "" unnamed by the path
	ID      string `json:"container,omitempty"`
	Pod     string `json:"pod,omitempty"` // the pod's uid, with dashes
}

// Host reports whether the process runs in no container and no pod.
func (p Place) Host() bool { return p.ID == "" && p.Pod == "" }

// Short is the id as 'docker ps' and 'podman ps' print it: 12 characters.
func (p Place) Short() string {
	if len(p.ID) > 12 {
		return p.ID[:12]
	}
	return p.ID
}

// String names the place as an operator reads it: "host", "podman
// 661e5390e538", "containerd 3f25a1b2c3d4, pod 1234abcd-...".
func (p Place) String() string {
	if p.Host() {
		return "host"
	}
	var parts []string
	if p.ID != "" {
		rt := p.Runtime
		if rt == "" {
			rt = "container"
		}
		parts = append(parts, rt+" "+p.Short())
	}
	if p.Pod != "" {
		parts = append(parts, "pod "+p.Pod)
	}
	return strings.Join(parts, ", ")
}

// The group names below are matched by hand, not by regexp: compiled at
// package init, the four regexps cost every freeze command 2.3 ms
// before main (#51), and the scan reads a place per process.

// idPart reads a container's own group: the runtime's prefix, the 64-hex
// id, and systemd's .scope; a bare id for the cgroupfs drivers. conmon's
// groups (libpod-conmon-ID.scope, crio-conmon-ID.scope) do not match:
// the prefix would have to be "libpod-conmon".
func idPart(part string) (prefix, id string, ok bool) {
	s := strings.TrimSuffix(part, ".scope")
	if i := strings.LastIndexByte(s, '-'); i >= 0 {
		prefix, s = s[:i], s[i+1:]
		if _, known := runtimeOf[prefix]; !known {
			return "", "", false
		}
	}
	if len(s) != 64 || !hex(s) {
		return "", "", false
	}
	return prefix, s, true
}

// podPart reads a pod's group: pod<UID> (cgroupfs) or
// kubepods[-QOS]-pod<UID>.slice (systemd, with underscores).
func podPart(part string) (uid string, ok bool) {
	s := strings.TrimSuffix(part, ".slice")
	if len(s) < 39 {
		return "", false
	}
	uid, head := s[len(s)-36:], s[:len(s)-36]
	pre, isPod := strings.CutSuffix(head, "pod")
	if !isPod || !uidForm(uid, "-_") {
		return "", false
	}
	if pre != "" {
		qos, ok := strings.CutPrefix(pre, "kubepods")
		if !ok || !strings.HasSuffix(qos, "-") {
			return "", false
		}
		if qos = strings.TrimSuffix(qos, "-"); qos != "" && (qos[0] != '-' || len(qos) < 2 || strings.TrimLeft(qos[1:], "abcdefghijklmnopqrstuvwxyz") != "") {
			return "", false
		}
	}
	return uid, true
}

// hex reports whether s is lower-case hexadecimal.
func hex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// uidForm reports whether s is a uid, 8-4-4-4-12 hex characters, with
// separators from seps.
func uidForm(s, seps string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < 36; i++ {
		switch i {
		case 8, 13, 18, 23:
			if strings.IndexByte(seps, s[i]) < 0 {
				return false
			}
		default:
			if !hex(s[i : i+1]) {
				return false
			}
		}
	}
	return true
}

var runtimeOf = map[string]string{
	"docker": "docker", "libpod": "podman", "cri-containerd": "containerd",
	"crio": "cri-o", "nerdctl": "containerd",
}

// Parse reads a cgroup path (as /proc/PID/cgroup gives it) for the
// container and the pod it names. The deepest container group wins: a
// container nested in another's group is the inner one.
func Parse(path string) Place {
	var p Place
	parts := strings.Split(strings.Trim(path, "/"), "/")
	kube := false
	for i, part := range parts {
		if strings.HasPrefix(part, "kubepods") {
			kube = true
		}
		if uid, ok := podPart(part); ok && kube {
			p.Pod = strings.ReplaceAll(uid, "_", "-")
			continue
		}
		prefix, id, ok := idPart(part)
		if !ok {
			continue
		}
		p.ID = id
		switch {
		case prefix != "":
			p.Runtime = runtimeOf[prefix]
		case i > 0 && parts[i-1] == "docker":
			p.Runtime = "docker"
		case p.Pod != "":
			p.Runtime = "" // the kubelet's cgroupfs layout does not name its runtime
		default:
			p.Runtime = "containerd" // /NAMESPACE/ID: nerdctl's and ctr's cgroupfs layout
		}
	}
	return p
}

// FromCgroupFile reads a /proc/PID/cgroup file's lines and returns the
// place the most specific one names: on a hybrid host each hierarchy has
// its own line, and the runtimes make the container's group in all.
func FromCgroupFile(b []byte) Place {
	var best Place
	for _, line := range strings.Split(string(b), "\n") {
		// hierarchy-ID:controller-list:cgroup-path
		_, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		_, path, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		p := Parse(path)
		if p.ID != "" && best.ID == "" || p.Pod != "" && best.Pod == "" && (best.ID == "" || p.ID == best.ID) {
			best = p
		}
	}
	return best
}

// Errors of what an operator typed.
var (
	ErrBadID  = errors.New("not a container id")
	ErrBadPod = errors.New("not a pod uid")
)

// ParseID checks a container id as 'docker ps', 'podman ps', 'crictl ps'
// and nerdctl print it: 12 hex characters, or the full 64 (any length in
// between is taken as a prefix too).
func ParseID(s string) (string, error) {
	id := strings.ToLower(strings.TrimSpace(s))
	if len(id) < 12 || len(id) > 64 || !hex(id) {
		return "", fmt.Errorf("%q: %w: a container id is 12 to 64 hexadecimal characters, as 'podman ps', 'docker ps' or 'crictl ps' print it", s, ErrBadID)
	}
	return id, nil
}

// ParsePod checks a pod uid as 'kubectl get pod -o
// jsonpath={.metadata.uid}' prints it, or with the underscores of the
// systemd driver's slice names, and returns it with dashes.
func ParsePod(s string) (string, error) {
	uid := strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "_", "-")
	if !uidForm(uid, "-") {
		return "", fmt.Errorf("%q: %w: a pod uid is 36 characters such as 1234abcd-0000-1111-2222-333344445555, as kubectl get pod NAME -o jsonpath='{.metadata.uid}' prints it", s, ErrBadPod)
	}
	return uid, nil
}
