package gate

import (
	"fmt"
	"os"
	"strings"
)

// lsmList is where the kernel lists its active security modules
// (securityfs).
const lsmList = "/sys/kernel/security/lsm"

// bpfLSMActive says whether the BPF LSM's hooks run: an lsm program
// loads and attaches wherever CONFIG_BPF_LSM is built, but the kernel
// calls it only when bpf is in the active list (lsm= on the command
// line, else CONFIG_LSM). Where the list cannot be read, the refusing
// form goes through fmod_ret instead, which hooks security_* itself.
func bpfLSMActive() error {
	b, err := os.ReadFile(lsmList)
	if err != nil {
		return fmt.Errorf("cannot read %s (securityfs not mounted?), so whether the BPF LSM runs is unknown: %w", lsmList, err)
	}
	for _, m := range strings.Split(strings.TrimSpace(string(b)), ",") {
		if m == "bpf" {
			return nil
		}
	}
	return fmt.Errorf("bpf is not in the active LSM list (%s: %s): its hooks would not run; boot with lsm=...,bpf", lsmList, strings.TrimSpace(string(b)))
}

// Form is how the gate keeps the chain from growing.
type Form uint8

const (
	// FormAuto takes the first form that loads: FormLSM, FormFmodRet,
	// then FormStop.
	FormAuto Form = iota
	// FormLSM refuses: lsm/task_alloc fails the chain's forks and clones
	// with EAGAIN, lsm/bprm_check_security its execs (and any exec of a
	// target) with EACCES, and the chain's caller is stopped as in
	// FormStop. Needs bpf in the active LSM list.
	FormLSM
	// FormFmodRet refuses as FormLSM does, through fmod_ret programs on
	// security_task_alloc and security_bprm_check: where the BPF LSM is
	// built but not active, and trampolines load.
	FormFmodRet
	// FormStop stops: tp_btf/sys_enter answers each fork, clone or exec
	// of the chain with SIGSTOP (or SIGKILL) before the kernel acts on
	// it. Loads where tracing programs do, trampolines or not.
	FormStop
)

// programs are the form's own programs, besides lineage and exec.
func (f Form) programs() []string {
	switch f {
	case FormLSM:
		return []string{"gate_task_alloc", "gate_bprm_check"}
	case FormFmodRet:
		return []string{"gate_task_alloc_ret", "gate_bprm_check_ret"}
	case FormStop:
		return []string{"gate_sys_enter"}
	}
	return nil
}

// Refuses reports whether the form makes a fork fail (and stops its
// caller), rather than only stopping the caller before the fork.
func (f Form) Refuses() bool { return f == FormLSM || f == FormFmodRet }

// String is the form's name in the timeline and the probe.
func (f Form) String() string {
	switch f {
	case FormLSM:
		return "refuse (lsm)"
	case FormFmodRet:
		return "refuse (fmod_ret)"
	case FormStop:
		return "stop (tp_btf)"
	}
	return "auto"
}

// Word is the form's short name, as FREEZE_GATE_FORM takes it.
func (f Form) Word() string {
	switch f {
	case FormLSM:
		return "lsm"
	case FormFmodRet:
		return "fmod_ret"
	case FormStop:
		return "tp_btf"
	}
	return "auto"
}

// ParseForm reads a form's short name: auto, lsm, fmod_ret or tp_btf.
func ParseForm(s string) (Form, error) {
	for _, f := range []Form{FormAuto, FormLSM, FormFmodRet, FormStop} {
		if s == f.Word() {
			return f, nil
		}
	}
	return FormAuto, fmt.Errorf("gate form %q: want auto, lsm, fmod_ret or tp_btf", s)
}
