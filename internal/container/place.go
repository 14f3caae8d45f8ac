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
	"regexp"
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

var (
	// A container's own group: the runtime's prefix, the 64-hex id, and
	// systemd's .scope; a bare id for the cgroupfs drivers. conmon's
	// groups (libpod-conmon-ID.scope, crio-conmon-ID.scope) do not match:
	// the prefix would have to be "libpod-conmon".
	idPart = regexp.MustCompile(`^(?:(docker|libpod|cri-containerd|crio|nerdctl)-)?([0-9a-f]{64})(?:\.scope)?$`)
	// A pod's group: pod<UID> (cgroupfs) or kubepods[-QOS]-pod<UID>.slice
	// (systemd, with underscores).
	podPart = regexp.MustCompile(`^(?:kubepods(?:-[a-z]+)?-)?pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})(?:\.slice)?$`)
)

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
		if m := podPart.FindStringSubmatch(part); m != nil && kube {
			p.Pod = strings.ReplaceAll(m[1], "_", "-")
			continue
		}
		m := idPart.FindStringSubmatch(part)
		if m == nil {
			continue
		}
		p.ID = m[2]
		switch {
		case m[1] != "":
			p.Runtime = runtimeOf[m[1]]
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

var (
	idForm  = regexp.MustCompile(`^[0-9a-f]{12,64}$`)
	podForm = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
)

// ParseID checks a container id as 'docker ps', 'podman ps', 'crictl ps'
// and nerdctl print it: 12 hex characters, or the full 64 (any length in
// between is taken as a prefix too).
func ParseID(s string) (string, error) {
	id := strings.ToLower(strings.TrimSpace(s))
	if !idForm.MatchString(id) {
		return "", fmt.Errorf("%q: %w: a container id is 12 to 64 hexadecimal characters, as 'podman ps', 'docker ps' or 'crictl ps' print it", s, ErrBadID)
	}
	return id, nil
}

// ParsePod checks a pod uid as 'kubectl get pod -o
// jsonpath={.metadata.uid}' prints it, or with the underscores of the
// systemd driver's slice names, and returns it with dashes.
func ParsePod(s string) (string, error) {
	uid := strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "_", "-")
	if !podForm.MatchString(uid) {
		return "", fmt.Errorf("%q: %w: a pod uid is 36 characters such as 1234abcd-0000-1111-2222-333344445555, as kubectl get pod NAME -o jsonpath='{.metadata.uid}' prints it", s, ErrBadPod)
	}
	return uid, nil
}
