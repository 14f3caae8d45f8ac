package gate

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// Kind is one BPF program kind and whether it loads here.
type Kind struct {
	Name string // as a SEC() would name it: tp_btf/sys_enter, lsm/task_alloc
	OK   bool
	Why  string
}

// Probe loads (and never attaches) what the gate is made of, and the
// stronger forms it could take where they load, and says which load here.
// Reading the kernel's config does not tell: many kernels build the BPF
// LSM without enabling it, and lockdown refuses trampolines on others.
func Probe(btfPath string) []Kind {
	var out []Kind
	g, err := Load(Config{BTF: btfPath})
	if err != nil {
		out = append(out, Kind{"tp_btf (the gate: sys_enter, sched_process_fork, sched_process_exec)", false, Explain(err)})
	} else {
		g.Close()
		out = append(out, Kind{"tp_btf (the gate: sys_enter, sched_process_fork, sched_process_exec)", true, fmt.Sprintf("loaded in %v", g.LoadTook.Round(1e5))})
	}
	for _, k := range []struct {
		name   string
		typ    ebpf.ProgramType
		attach ebpf.AttachType
		to     string
	}{
		{"lsm/task_alloc (would refuse forks with an error instead of a stop)", ebpf.LSM, ebpf.AttachLSMMac, "task_alloc"},
		{"fmod_ret/security_task_alloc", ebpf.Tracing, ebpf.AttachModifyReturn, "security_task_alloc"},
	} {
		p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
			Type: k.typ, AttachType: k.attach, AttachTo: k.to, License: "GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
		})
		if err != nil {
			out = append(out, Kind{k.name, false, Explain(err)})
			continue
		}
		p.Close()
		out = append(out, Kind{k.name, true, "loads (not used: freeze has no such form yet)"})
	}
	return out
}

// Explain turns a load error into what the operator can act on.
func Explain(err error) string {
	// cilium/ebpf suggests RLIMIT_MEMLOCK on any EPERM; kernels since
	// 5.11 charge BPF memory to the cgroup instead, so that is noise.
	msg := strings.Replace(err.Error(), " (MEMLOCK may be too low, consider rlimit.RemoveMemlock)", "", 1)
	switch {
	case errors.Is(err, ErrUnsupported):
		return msg
	case errors.Is(err, unix.EPERM):
		return msg + " (not root, or refused by lockdown or a security module)"
	case errors.Is(err, ebpf.ErrNotSupported), strings.Contains(msg, "btf"), strings.Contains(msg, "BTF"):
		return msg + " (the kernel lacks BTF or this program type; freeze uses the cgroup methods)"
	}
	return msg
}
