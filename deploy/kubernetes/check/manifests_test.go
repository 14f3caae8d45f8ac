// Package check decodes freeze's Kubernetes manifests strictly against
// the Kubernetes API types, offline: a misspelt or unknown field, a
// duplicate field or a wrong type fails. It is a module of its own, so
// that k8s.io/api stays out of freeze's module; freeze's suite runs it
// (cmd/freeze's TestKubernetesManifests).
package check

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
)

// decoder decodes YAML strictly into the typed objects of the API groups
// the manifests use.
func decoder(t *testing.T) runtime.Decoder {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{appsv1.AddToScheme, batchv1.AddToScheme, corev1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	return json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme, json.SerializerOptions{Yaml: true, Strict: true})
}

// documents splits a YAML file into its documents.
func documents(b []byte) [][]byte {
	var out [][]byte
	for _, d := range bytes.Split(b, []byte("\n---")) {
		if len(bytes.TrimSpace(stripComments(d))) > 0 {
			out = append(out, d)
		}
	}
	return out
}

func stripComments(b []byte) []byte {
	var keep []string
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			keep = append(keep, l)
		}
	}
	return []byte(strings.Join(keep, "\n"))
}

func decodeFile(t *testing.T, dec runtime.Decoder, path string) []runtime.Object {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var objs []runtime.Object
	for i, d := range documents(b) {
		obj, _, err := dec.Decode(d, nil, nil)
		if err != nil {
			t.Fatalf("%s, document %d: %v", path, i+1, err)
		}
		objs = append(objs, obj)
	}
	return objs
}

func TestManifestsDecodeStrictly(t *testing.T) {
	dec := decoder(t)
	files, _ := filepath.Glob("../*.yaml")
	if len(files) < 2 {
		t.Fatalf("manifests found: %v", files)
	}
	kinds := map[string]int{}
	for _, f := range files {
		for _, obj := range decodeFile(t, dec, f) {
			switch o := obj.(type) {
			case *appsv1.DaemonSet:
				kinds["DaemonSet"]++
				checkGuard(t, o)
			case *batchv1.Job:
				kinds["Job"]++
				checkJob(t, o)
			default:
				t.Errorf("%s: unexpected %T", f, obj)
			}
		}
	}
	if kinds["DaemonSet"] != 1 || kinds["Job"] != 1 {
		t.Fatalf("kinds %v: want one DaemonSet (the guard) and one Job (one-shot)", kinds)
	}
}

// node checks what both need to act on a node's processes.
func node(t *testing.T, what string, spec corev1.PodSpec) corev1.Container {
	t.Helper()
	if !spec.HostPID {
		t.Errorf("%s: hostPID is not set: freeze would see only its own pod", what)
	}
	if spec.PriorityClassName != "system-node-critical" {
		t.Errorf("%s: priorityClassName %q", what, spec.PriorityClassName)
	}
	every := false
	for _, tol := range spec.Tolerations {
		every = every || (tol.Key == "" && tol.Operator == corev1.TolerationOpExists && tol.Effect == "")
	}
	if !every {
		t.Errorf("%s: no toleration of every taint (operator Exists, no key, no effect): %+v", what, spec.Tolerations)
	}
	// freeze reaches the node through PID 1 ('freeze node': chroot to
	// /proc/1/root), not through hostPath mounts: none is needed.
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			t.Errorf("%s: a hostPath volume %s: freeze runs in the node's root (freeze node), so none is needed", what, v.HostPath.Path)
		}
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%s: %d containers", what, len(spec.Containers))
	}
	c := spec.Containers[0]
	if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Errorf("%s: not privileged", what)
	}
	cmd := strings.Join(c.Command, " ")
	if !strings.HasPrefix(cmd, "/freeze node -- ") {
		t.Errorf("%s: command %q does not run freeze in the node's root (/freeze node -- ...)", what, cmd)
	}
	return c
}

func checkGuard(t *testing.T, ds *appsv1.DaemonSet) {
	c := node(t, "DaemonSet "+ds.Name, ds.Spec.Template.Spec)
	if !strings.Contains(strings.Join(c.Command, " "), "/freeze node -- guard --run-dir /run/freeze") {
		t.Errorf("the DaemonSet does not run the guard: %q", c.Command)
	}
	if len(ds.Spec.Template.Spec.InitContainers) != 0 {
		t.Errorf("an init container: the image's freeze runs on the node without a copy there")
	}
	sel := ds.Spec.Selector.MatchLabels
	for k, v := range sel {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("the selector %v does not select the template's labels %v", sel, ds.Spec.Template.Labels)
		}
	}
}

func checkJob(t *testing.T, j *batchv1.Job) {
	spec := j.Spec.Template.Spec
	node(t, "Job "+j.Name, spec)
	if spec.NodeName != "NODE_NAME" || spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("Job: nodeName %q restartPolicy %q", spec.NodeName, spec.RestartPolicy)
	}
	if j.Spec.BackoffLimit == nil || *j.Spec.BackoffLimit != 0 {
		t.Errorf("Job: a failed freeze run must not be retried blindly (backoffLimit 0)")
	}
}

// The decoder really is strict: a misspelt field, an unknown one and a
// wrong type each fail, so the test above would catch them.
func TestStrictDecodingCatchesMistakes(t *testing.T) {
	dec := decoder(t)
	b, err := os.ReadFile("../freeze-guard.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(string) string{
		"misspelt (case)": func(s string) string { return strings.Replace(s, "hostPID: true", "hostPid: true", 1) },
		"misspelt":        func(s string) string { return strings.Replace(s, "tolerations:", "toleration:", 1) },
		"unknown field": func(s string) string {
			return strings.Replace(s, "      hostPID: true", "      hostPID: true\n      hostPIDs: true", 1)
		},
		"wrong type": func(s string) string { return strings.Replace(s, "privileged: true", "privileged: \"yes\"", 1) },
		"duplicate field": func(s string) string {
			return strings.Replace(s, "      hostPID: true", "      hostPID: true\n      hostPID: false", 1)
		},
		"misspelt in a probe": func(s string) string {
			return strings.Replace(s, "path: /healthz", "Path: /healthz", 1)
		},
	} {
		bad := mutate(string(b))
		if bad == string(b) {
			t.Fatalf("%s: the mutation changed nothing", name)
		}
		var err error
		for _, d := range documents([]byte(bad)) {
			if _, _, e := dec.Decode(d, nil, nil); e != nil {
				err = e
			}
		}
		if err == nil {
			t.Errorf("%s: decoded without an error", name)
		}
	}
}
