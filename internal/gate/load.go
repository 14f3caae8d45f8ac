package gate

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"

	"freeze/internal/proc"
)

// loader loads the gate's programs one at a time against one set of
// maps: a kernel that lacks what one program needs (a kfunc, a hook, a
// program type) then loses that program alone. cilium/ebpf loads a
// collection as a whole, so each program is loaded as a collection of
// its own whose maps are all replaced by the shared ones.
type loader struct {
	// mu: auto's refusing form loads in the background (StartRest)
	// while the run loads its iterators.
	mu   sync.Mutex
	spec *ebpf.CollectionSpec
	opts ebpf.CollectionOptions
	maps map[string]*ebpf.Map
}

// sections names each program as its SEC() does, for the messages.
var sections = map[string]string{
	"gate_sys_enter":      "tp_btf/sys_enter",
	"gate_fork":           "tp_btf/sched_process_fork",
	"gate_exec":           "tp_btf/sched_process_exec",
	"gate_task_alloc":     "lsm/task_alloc",
	"gate_bprm_check":     "lsm/bprm_check_security",
	"gate_task_alloc_ret": "fmod_ret/security_task_alloc",
	"gate_bprm_check_ret": "fmod_ret/security_bprm_check",
	"gate_ident":          "iter/task_file (identity reader)",
	"gate_kill":           "iter/task (kill iterator)",
	"gate_mark":           "iter/task (mark iterator)",
	"gate_tasks":          "iter/task (scan iterator)",
	"count_sys_enter":     "tp_btf/sys_enter (fork counter)",
	"record_exec":         "tp_btf/sched_process_exec (argv recorder)",
}

// newLoader reads the object, sets its constants (the action of the
// stopping form, and the loader's own tgid for the identity reader) and
// creates every map once.
func newLoader(btfPath string, action uint32) (*loader, error) {
	// Before 5.11 the kernel charged BPF maps and programs to
	// RLIMIT_MEMLOCK (64 KiB from an init that sets nothing): on Debian
	// 11's 5.10 every map of the gate failed with EPERM. The limit is
	// raised here, where the gate loads: cilium/ebpf's rlimit package
	// probes for memcg accounting at package init, 0.9-2.3 ms that every
	// freeze command paid before main (#51). The raise is best effort:
	// root without CAP_SYS_RESOURCE (a container, a sandbox: this
	// machine's CI) may not raise its hard limit, and a kernel that
	// accounts BPF memory to the cgroup (5.11 on) needs no raise at all.
	// A refused raise is named only if the load then fails.
	raised := raiseMemlock()
	ld, err := loadObject(btfPath, action)
	if err != nil && raised != nil {
		return nil, fmt.Errorf("%w (RLIMIT_MEMLOCK could not be raised: %v; kernels before 5.11 charge the gate's maps to it)", err, raised)
	}
	return ld, err
}

// raiseMemlock lifts RLIMIT_MEMLOCK as far as this process may: to
// infinity, or, where that is refused, its soft limit to its hard one.
// It returns the refusal of the first.
func raiseMemlock() error {
	inf := unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}
	err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &inf)
	if err == nil {
		return nil
	}
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim) == nil && lim.Cur < lim.Max {
		lim.Cur = lim.Max
		unix.Setrlimit(unix.RLIMIT_MEMLOCK, &lim)
	}
	return err
}

// loadObject reads the gate's object and creates its maps.
func loadObject(btfPath string, action uint32) (*loader, error) {
	spec, err := loadGate()
	if err != nil {
		return nil, fmt.Errorf("the gate's object: %w", err)
	}
	if err := spec.Variables["action"].Set(action); err != nil {
		return nil, fmt.Errorf("the gate's action: %w", err)
	}
	if err := spec.Variables["self_tgid"].Set(uint32(os.Getpid())); err != nil {
		return nil, fmt.Errorf("the gate's tgid: %w", err)
	}
	if !initPidNS() {
		// The counter then counts this pid namespace's forks alone: the
		// processes freeze's /proc shows (Load refuses here anyway).
		dev, ino, err := proc.OwnPidNS()
		if err != nil {
			return nil, fmt.Errorf("the counter's pid namespace: %w", err)
		}
		if err := spec.Variables["count_ns_dev"].Set(dev); err != nil {
			return nil, fmt.Errorf("the counter's pid namespace: %w", err)
		}
		if err := spec.Variables["count_ns_ino"].Set(ino); err != nil {
			return nil, fmt.Errorf("the counter's pid namespace: %w", err)
		}
	}
	// One decoding of the kernel's types for all the loads: each
	// collection load decodes them again otherwise (about 25 ms each
	// here, most of a load).
	ld := &loader{spec: spec, maps: map[string]*ebpf.Map{}, opts: ebpf.CollectionOptions{Cache: btf.NewCache()}}
	if btfPath != "" {
		k, err := btf.LoadSpec(btfPath)
		if err != nil {
			return nil, fmt.Errorf("kernel BTF %s: %w", btfPath, err)
		}
		ld.opts.Programs.KernelTypes = k
	}
	only := spec.Copy()
	only.Programs = nil
	coll, err := ebpf.NewCollectionWithOptions(only, ld.opts)
	if err != nil {
		return nil, fmt.Errorf("create the gate's maps: %w", err)
	}
	for name := range coll.Maps {
		ld.maps[name] = coll.DetachMap(name)
	}
	coll.Close()
	ld.opts.MapReplacements = ld.maps
	return ld, nil
}

// prog loads one program by name.
func (ld *loader) prog(name string) (*ebpf.Program, error) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	ps, ok := ld.spec.Programs[name]
	if !ok {
		return nil, fmt.Errorf("no program %s in the gate's object", name)
	}
	one := ld.spec.Copy()
	one.Programs = map[string]*ebpf.ProgramSpec{name: ps.Copy()}
	coll, err := ebpf.NewCollectionWithOptions(one, ld.opts)
	if err != nil {
		return nil, err
	}
	defer coll.Close()
	return coll.DetachProgram(name), nil
}

// form loads the programs of form f: all of them, or none (those that
// loaded are closed again) and the first one's error, named by section.
func (ld *loader) form(f Form) ([]*ebpf.Program, error) {
	var progs []*ebpf.Program
	for _, name := range f.programs() {
		p, err := ld.prog(name)
		if err != nil {
			for _, q := range progs {
				q.Close()
			}
			return nil, fmt.Errorf("%s: %w", sections[name], err)
		}
		progs = append(progs, p)
	}
	return progs, nil
}

// done drops the decoded kernel types once nothing more is loaded.
func (ld *loader) done() {
	ld.mu.Lock()
	ld.opts.Cache = nil
	ld.mu.Unlock()
}

func (ld *loader) close() error {
	var errs []error
	for name, m := range ld.maps {
		errs = append(errs, m.Close())
		delete(ld.maps, name)
	}
	return errors.Join(errs...)
}
