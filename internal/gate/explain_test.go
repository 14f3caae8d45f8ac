package gate

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Explain names what the operator can act on, as the kernel matrix met
// it: 5.10's missing task storage (its maps failed with EINVAL once
// RLIMIT_MEMLOCK no longer failed them with EPERM first), a kfunc of a
// later release, and the cilium/ebpf MEMLOCK hint dropped where it is
// noise.
// eperm is what Explain says of EPERM to the user the test runs as.
func eperm() string {
	if os.Geteuid() == 0 {
		return "operation not permitted (refused to root: kernel lockdown"
	}
	return "operation not permitted (not root: run freeze as root)"
}

func TestExplain(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("create the gate's maps: map gated: map create: %w", unix.EINVAL), "task-local storage, which the gate keeps its marks in: Linux 5.11"},
		{fmt.Errorf(`load program: fixing up kfuncs: kfunc "bpf_send_signal_task": not supported`), "Linux 6.13 has"},
		// Who is refused decides what to say: root was told "not root"
		// before (#37).
		{fmt.Errorf("load program: %w (MEMLOCK may be too low, consider rlimit.RemoveMemlock)", unix.EPERM), eperm()},
	} {
		got := Explain(c.err)
		if !strings.Contains(got, c.want) {
			t.Errorf("Explain(%v) = %q, want it to say %q", c.err, got, c.want)
		}
		if strings.Contains(got, "MEMLOCK") {
			t.Errorf("Explain(%v) = %q: the MEMLOCK hint is noise", c.err, got)
		}
	}
}
