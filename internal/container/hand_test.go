package container

import (
	"regexp"
	"strings"
	"testing"
)

// The regexps the hand matchers replaced (#51: compiled at init they cost
// every command 2.3 ms): the matchers must agree with them on every
// group name.
var (
	idRE  = regexp.MustCompile(`^(?:(docker|libpod|cri-containerd|crio|nerdctl)-)?([0-9a-f]{64})(?:\.scope)?$`)
	podRE = regexp.MustCompile(`^(?:kubepods(?:-[a-z]+)?-)?pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})(?:\.slice)?$`)
)

func agree(t *testing.T, part string) {
	prefix, id, ok := idPart(part)
	m := idRE.FindStringSubmatch(part)
	if ok != (m != nil) || ok && (prefix != m[1] || id != m[2]) {
		t.Errorf("idPart(%q) = %q, %q, %v; the regexp says %q", part, prefix, id, ok, m)
	}
	uid, ok := podPart(part)
	m = podRE.FindStringSubmatch(part)
	if ok != (m != nil) || ok && uid != m[1] {
		t.Errorf("podPart(%q) = %q, %v; the regexp says %q", part, uid, ok, m)
	}
}

const hex64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestHandMatchersAgreeWithTheRegexps(t *testing.T) {
	uid := "1234abcd-0000-1111-2222-333344445555"
	for _, part := range []string{
		hex64, hex64 + ".scope", "docker-" + hex64 + ".scope", "libpod-" + hex64 + ".scope", "cri-containerd-" + hex64 + ".scope",
		"crio-" + hex64 + ".scope", "nerdctl-" + hex64, "libpod-conmon-" + hex64 + ".scope", "crio-conmon-" + hex64 + ".scope",
		"podman-" + hex64, hex64[:63], hex64 + "0", strings.ToUpper(hex64), "-" + hex64, hex64 + ".scope.scope", hex64 + ".slice",
		"pod" + uid, "pod" + strings.ReplaceAll(uid, "-", "_") + ".slice", "kubepods-pod" + uid + ".slice",
		"kubepods-besteffort-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice", "kubepods-burstable-pod" + uid,
		"kubepods--pod" + uid, "kubepods-Best-pod" + uid, "kubepodspod" + uid, "xpod" + uid, "pod" + uid[:35],
		"pod" + uid + "0", "pod" + strings.ToUpper(uid), "kubepods-b3-pod" + uid, "", "pod", "kubepods", "system.slice",
	} {
		agree(t, part)
	}
}

func FuzzHandMatchers(f *testing.F) {
	f.Add(hex64)
	f.Add("kubepods-besteffort-pod1234abcd_0000_1111_2222_333344445555.slice")
	f.Fuzz(func(t *testing.T, part string) { agree(t, part) })
}
