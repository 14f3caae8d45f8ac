package gate

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Kind is one BPF program and whether it loads here.
type Kind struct {
	Name string // as a SEC() would name it: tp_btf/sys_enter, lsm/task_alloc
	OK   bool
	Why  string
}

// Says is whether the kind loads, in the words the dry run and the drill
// print: a kind that does not load is a fact of this kernel (a stronger
// form freeze does without), not a failure of the run.
func (k Kind) Says() string {
	if k.OK {
		return "loads"
	}
	return "does not load here"
}

// probed are the gate's programs in the order the probe reports them,
// each with what it is for.
var probed = []struct{ name, role string }{
	{"gate_fork", "fork lineage: needed"},
	{"gate_exec", "stop at exec of a target: needed"},
	{"gate_task_alloc", "refusing form: forks"},
	{"gate_bprm_check", "refusing form: execs"},
	{"gate_task_alloc_ret", "refusing form without the active BPF LSM: forks"},
	{"gate_bprm_check_ret", "refusing form without the active BPF LSM: execs"},
	{"gate_sys_enter", "stopping form"},
	{"gate_ident", "files by the kernel's identity (btrfs, overlayfs)"},
	{"gate_kill", "the chain killed in one pass (else by pidfd)"},
	{"gate_tasks", "scans in one pass (else /proc)"},
	{"record_exec", "a guard's argv at exec, for --arg (else /proc)"},
}

// Probe loads (and never attaches) each of the gate's programs on its
// own, and says which load here. Its first Kind is the gate as a whole:
// OK when a form loads with what it needs, naming the form Load would
// take, and freeze runs in the host's pid namespace (else the programs
// load, and Load refuses them: ErrPidNamespace). Reading the kernel's
// config does not tell: many kernels build the BPF LSM without enabling
// it, and lockdown refuses trampolines on others.
func Probe(btfPath string) []Kind {
	ld, err := newLoader(btfPath, uint32(unix.SIGSTOP))
	if err != nil {
		return []Kind{{Name: "the gate", Why: Explain(err)}}
	}
	defer ld.close()
	ok := map[string]bool{}
	var out []Kind
	for _, p := range probed {
		t0 := time.Now()
		prog, err := ld.prog(p.name)
		k := Kind{Name: sections[p.name] + " (" + p.role + ")"}
		if err != nil {
			k.Why = Explain(err)
		} else {
			prog.Close()
			k.OK, k.Why, ok[p.name] = true, fmt.Sprintf("in %v", time.Since(t0).Round(100*time.Microsecond)), true
		}
		out = append(out, k)
	}
	whole := Kind{Name: "the gate"}
	if err := bpfLSMActive(); err != nil {
		ok["gate_task_alloc"] = false // loads, but its hook would not run
		out = append(out, Kind{Name: "the BPF LSM's hooks", Why: err.Error()})
	}
	if ok["gate_fork"] && ok["gate_exec"] {
		for _, f := range []Form{FormLSM, FormFmodRet, FormStop} {
			all := true
			for _, name := range f.programs() {
				all = all && ok[name]
			}
			if all {
				whole.OK, whole.Why = true, "form "+f.String()+", what auto takes"
				break
			}
		}
	}
	switch {
	case !whole.OK:
		whole.Why = "no form loads: " + firstFailure(out)
	case !initPidNS():
		// The programs load, but Load refuses to run them here.
		whole.OK, whole.Why = false, ErrPidNamespace.Error()
	}
	return append([]Kind{whole}, out...)
}

func firstFailure(ks []Kind) string {
	for _, k := range ks {
		if !k.OK {
			return k.Name + ": " + k.Why
		}
	}
	return "?"
}

// kfuncSince names the kernel release that first has each kfunc the gate
// calls.
var kfuncSince = map[string]string{
	"bpf_send_signal_task": "6.13",
}

var kfuncRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`kfunc "([a-z_0-9]+)": not supported`) })

// Explain turns a load error into what the operator can act on.
func Explain(err error) string {
	// cilium/ebpf suggests RLIMIT_MEMLOCK on any EPERM; kernels since
	// 5.11 charge BPF memory to the cgroup instead, so that is noise.
	msg := strings.Replace(err.Error(), " (MEMLOCK may be too low, consider rlimit.RemoveMemlock)", "", 1)
	if m := kfuncRE().FindStringSubmatch(msg); m != nil {
		since := kfuncSince[m[1]]
		if since == "" {
			since = "a newer release"
		}
		return msg + " (this kernel lacks the kfunc " + m[1] + ", which Linux " + since + " has)"
	}
	switch {
	case errors.Is(err, ErrUnsupported):
		return msg
	case errors.Is(err, unix.EINVAL) && strings.Contains(msg, "map create") && (strings.Contains(msg, "map gated") || strings.Contains(msg, "map killed")):
		// Seen on Debian 11's 5.10: the gate's marks are task-local
		// storage, a map type from 5.11.
		return msg + " (this kernel lacks task-local storage, which the gate keeps its marks in: Linux 5.11 has it)"
	case errors.Is(err, unix.EPERM) && os.Geteuid() == 0:
		// Root was refused: not a question of who runs freeze.
		return msg + " (refused to root: kernel lockdown, a security module, or a sandbox that filters bpf(2))"
	case errors.Is(err, unix.EPERM):
		return msg + " (not root: run freeze as root)"
	case errors.Is(err, unix.EINVAL) && strings.Contains(msg, "lsm"):
		return msg + " (the BPF LSM is not in the active list: boot with lsm=...,bpf)"
	case errors.Is(err, ebpf.ErrNotSupported):
		return msg + " (this kernel lacks this program type or hook)"
	case strings.Contains(msg, "BTF") || strings.Contains(msg, "btf"):
		return msg + " (the kernel's BTF does not have what this program needs)"
	}
	return msg
}
