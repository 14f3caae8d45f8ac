//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR MIT)
//
// The gate: once attached, no process of the chain completes a fork, a
// clone or an exec. It takes one of two forms, and each program loads on
// its own, so a kernel that lacks one program loses only that program
// (gate.go says which are needed and which only speed things up):
//
//   - The refusing form (lsm/task_alloc and lsm/bprm_check_security, or
//     the same bodies as fmod_ret on security_task_alloc and
//     security_bprm_check where the BPF LSM is not active): a fork or
//     clone of the chain fails with EAGAIN inside copy_process, before
//     the address space is copied and before the pids charge, and an exec
//     of the chain fails with EACCES; the caller is stopped too (action),
//     as in the stopping form: a refused chain left running retries its
//     forks in a loop, and in a 2-CPU VM 300 of them starved everything
//     else (a test that takes 4 s with the stop took 104 s). Unlike the
//     stop alone, the refusal is final: a continued process's fork fails
//     again instead of restarting. An exec of a target by a process
//     outside the chain fails too, and that process is not stopped. Needs
//     the BPF LSM in the active list (lsm=, CONFIG_LSM), or trampolines
//     for fmod_ret: Debian's 6.1 and 6.12 load both, the 6.18 kernel
//     freeze was built on neither. Where sys_enter loads too, it is
//     attached first and stays: attaching the LSM programs took 4.5 s on
//     Debian's 6.1 under emulation, sys_enter 23 ms, and the chain is
//     held from the first.
//   - The stopping form (tp_btf/sys_enter, Linux 5.5): each attempt is
//     answered with SIGSTOP (or SIGKILL, see action) to the caller, sent
//     from sys_enter: the pending signal makes copy_process back out
//     before anything is copied, so the fork never happens and the
//     forker stops. Loads wherever tp_btf does.
// In both, fork lineage (tp_btf/sched_process_fork) and a stop at exec
// of a target (tp_btf/sched_process_exec) catch what was in flight when
// the gate attached.
//
// The chain is:
//   - every task whose executable's inode is in `targets` (the files
//     freeze was given; with --arg only until it has read argv), and
//   - every task marked in `gated`: matched by freeze's scan (freeze
//     marks them by pidfd), or born of a gated or target task (lineage,
//     in sched_process_fork). Task-local storage dies with its task, so
//     a reused pid is never gated.
// Never gated: the tgids in `exempt` (freeze and its ancestors), the
// processes in `freed` (let go by freeze: a decoy of an --arg chain), PID 1
// and kernel threads.
//
// A file is known by what the kernel holds for it (the inode number and
// its super_block's s_dev), read through a descriptor freeze opens
// (gate_ident): on btrfs subvolumes and on overlayfs with layers on
// several filesystems, stat(2)'s st_dev is another device.
//
// Syscall numbers are x86_64's.

#include "gate.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#define SIGSTOP 19
#define PF_KTHREAD 0x00200000
#define EACCES 13
#define EAGAIN 11

// What a refused attempt gets: SIGSTOP, or SIGKILL when the run is going
// to kill the chain anyway (set by the loader before loading).
const volatile __u32 action = SIGSTOP;

// The syscall numbers of each target (bpf2go defines __TARGET_ARCH_*).
// arm64 has no fork or vfork (glibc's fork is clone there): their cases
// take numbers no syscall has.
#if defined(__TARGET_ARCH_arm64)
#define NR_clone 220
#define NR_fork (-1001)
#define NR_vfork (-1002)
#define NR_execve 221
#define NR_execveat 281
#define NR_clone3 435
#elif defined(__TARGET_ARCH_x86)
#define NR_clone 56
#define NR_fork 57
#define NR_vfork 58
#define NR_execve 59
#define NR_execveat 322
#define NR_clone3 435
#else
#error "the gate knows the syscall numbers of x86 (amd64) and arm64 only"
#endif

// Counters, one slot each. bpf2go generates the names in Go from this
// enum (-type counter), so gate.go reads each slot by its name.
enum counter {
	C_FORK_STOPPED,   // clone-family calls of the chain stopped or refused
	C_EXEC_STOPPED,   // exec-family calls of the chain stopped or refused
	C_TARGET_EXEC,    // execs of a target file by a task not yet gated, stopped or refused
	C_LINEAGE,        // children marked because their parent is gated
	C_KILLED,         // processes the kill iterator signalled
	C_FORK_REFUSED,   // clone-family calls of the chain refused (refusing form)
	C_EXEC_REFUSED,   // exec-family calls of the chain refused (refusing form)
	C_MARKED,         // processes the mark iterator marked
	// Task storage that could not be created. A non-sleepable program
	// allocates it without waiting (GFP_ATOMIC, from the BPF allocator's
	// per-CPU cache), and that may fail: a kill iterator's pass over 300
	// signalled them all and counted 299 (once, in a suite beside other
	// packages).
	C_KILL_UNNOTED,   // processes the kill iterator signalled and could not note as signalled
	C_MARK_FAILED,    // processes the mark iterator could not mark
	C_LINEAGE_FAILED, // children of the chain the lineage could not mark
	C_RECORDED,       // execs whose argv the recorder recorded (record_exec)
	C_RECORD_FAILED,  // execs it could not record: no storage, or argv unreadable
	C_MAX,
};

// Keeps the enum in the object's BTF, for bpf2go's Go constants.
const enum counter *unused_counter __attribute__((unused));

struct file_id {
	__u64 ino;
	__u32 dev; // the kernel's encoding: major<<20 | minor
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, struct file_id);
	__type(value, __u8);
} targets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u8);
} exempt SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u32);
} gated SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, C_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

// freed are the processes freeze let go after holding them by file: a
// chain named with --arg is held by its file (every process running it,
// at once), and the scan then frees each whose argv matched no --arg (a
// decoy). Never gated again, whatever its file or mark. Set on the
// thread group leader, by pidfd; a freed process's children are born
// freed (gate_fork).
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u32);
} freed SEC(".maps");

// stopped_at is when the gate first stopped a process (boot time, ns), on
// its thread group leader: freeze continues a freed process only if the
// gate stopped it, and records how long it was held.
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u64);
} stopped_at SEC(".maps");

// owners limits gating by file to tasks whose effective uid is in it,
// when by_owner[0] is 1 (--uid, and every automatic hold of the guard):
// one user's chain is held, another user's process of the same file is
// not. Filled with the targets, after loading (a guard's spare gate is
// loaded before it knows any).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u8);
} owners SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} by_owner SEC(".maps");

static __always_inline void count(__u32 i)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &i);
	if (v)
		__sync_fetch_and_add(v, 1);
}

static __always_inline int is_target(struct file *f)
{
	struct file_id id = {};
	if (!f)
		return 0;
	id.ino = f->f_inode->i_ino;
	id.dev = f->f_inode->i_sb->s_dev;
	return bpf_map_lookup_elem(&targets, &id) != 0;
}

// owner_ok reports whether t's owner may be gated by file: always,
// unless the run named owners (by_owner), then only theirs.
static __always_inline int owner_ok(struct task_struct *t)
{
	__u32 k = 0;
	__u32 *on = bpf_map_lookup_elem(&by_owner, &k);
	if (!on || !*on)
		return 1;
	const struct cred *c = t->cred;
	if (!c)
		return 0;
	__u32 uid = c->euid.val;
	return bpf_map_lookup_elem(&owners, &uid) != 0;
}

// never reports whether t is one freeze must never gate.
static __always_inline int never(struct task_struct *t)
{
	__u32 tgid = t->tgid;
	if (tgid <= 1 || (t->flags & PF_KTHREAD))
		return 1;
	if (bpf_map_lookup_elem(&exempt, &tgid))
		return 1;
	return bpf_task_storage_get(&freed, t->group_leader, 0, 0) != 0;
}

// hold marks t, notes when its process was first stopped, then stops it
// (or kills it: action). The note comes first: freeze frees a process,
// then reads the note to know whether to continue it, and a stop sent
// before the note would be missed by that read.
static __always_inline void hold(struct task_struct *t)
{
	bpf_task_storage_get(&gated, t, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	__u64 *at = bpf_task_storage_get(&stopped_at, t->group_leader, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (at && !*at)
		*at = bpf_ktime_get_boot_ns();
	bpf_send_signal(action);
}

// marked reports whether t, or its thread group's leader, was marked.
static __always_inline int marked(struct task_struct *t)
{
	if (bpf_task_storage_get(&gated, t, 0, 0))
		return 1;
	return bpf_task_storage_get(&gated, t->group_leader, 0, 0) != 0;
}

static __always_inline int in_chain(struct task_struct *t)
{
	if (never(t))
		return 0;
	if (marked(t))
		return 1;
	struct mm_struct *mm = t->mm;
	return mm && is_target(mm->exe_file) && owner_ok(t);
}

SEC("tp_btf/sys_enter")
int BPF_PROG(gate_sys_enter, struct pt_regs *regs, long id)
{
	__u32 c;
	switch (id) {
	case NR_clone:
	case NR_fork:
	case NR_vfork:
	case NR_clone3:
		c = C_FORK_STOPPED;
		break;
	case NR_execve:
	case NR_execveat:
		c = C_EXEC_STOPPED;
		break;
	default:
		return 0;
	}
	struct task_struct *t = bpf_get_current_task_btf();
	if (!in_chain(t))
		return 0;
	// Marked too (hold): a task gated by its file stays gated after it
	// execs another one.
	hold(t);
	count(c);
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(gate_fork, struct task_struct *parent, struct task_struct *child)
{
	if (bpf_task_storage_get(&freed, parent->group_leader, 0, 0)) {
		// A freed process's children are freed too: a decoy's fork runs
		// the chain's file until it execs, and must never be marked by
		// file (the mark iterator) or stopped.
		bpf_task_storage_get(&freed, child, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		return 0;
	}
	if (!in_chain(parent))
		return 0;
	if (bpf_task_storage_get(&gated, child, 0, BPF_LOCAL_STORAGE_GET_F_CREATE))
		count(C_LINEAGE);
	else
		count(C_LINEAGE_FAILED);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(gate_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	if (never(p) || marked(p) || !is_target(bprm->file) || !owner_ok(p))
		return 0;
	hold(p);
	count(C_TARGET_EXEC);
	return 0;
}

// The refusing form. One body for each hook, shared by the LSM program and
// its fmod_ret twin. ret is what an earlier program of the hook returned:
// a refusal already made is kept.
static __always_inline int refuse_fork(int ret)
{
	if (ret)
		return ret;
	struct task_struct *t = bpf_get_current_task_btf();
	if (!in_chain(t))
		return 0;
	hold(t);
	count(C_FORK_REFUSED);
	return -EAGAIN; // what fork(2) gives at a pids cap
}

static __always_inline int refuse_exec(struct linux_binprm *bprm, int ret)
{
	if (ret)
		return ret;
	struct task_struct *t = bpf_get_current_task_btf();
	if (never(t))
		return 0;
	if (in_chain(t)) {
		hold(t);
		count(C_EXEC_REFUSED);
		return -EACCES;
	}
	if (is_target(bprm->file) && owner_ok(t)) {
		// Someone outside the chain starting a new hop: refused, and not
		// marked (an operator's shell that tried stays free).
		count(C_TARGET_EXEC);
		return -EACCES;
	}
	return 0;
}

// lsm/task_alloc: called in copy_process after sched_fork and before
// copy_files, copy_mm, alloc_pid and the pids charge (Linux 5.7 BPF LSM).
SEC("lsm/task_alloc")
int BPF_PROG(gate_task_alloc, struct task_struct *task, unsigned long clone_flags, int ret)
{
	return refuse_fork(ret);
}

// lsm/bprm_check_security: called in exec_binprm's search for a handler,
// before the old image is dropped (Linux 5.7 BPF LSM).
SEC("lsm/bprm_check_security")
int BPF_PROG(gate_bprm_check, struct linux_binprm *bprm, int ret)
{
	return refuse_exec(bprm, ret);
}

// The same, where the BPF LSM is built but not active: fmod_ret on the
// security_* wrappers (Linux 5.7; security_ functions take fmod_ret without
// error injection).
SEC("fmod_ret/security_task_alloc")
int BPF_PROG(gate_task_alloc_ret, struct task_struct *task, unsigned long clone_flags, int ret)
{
	return refuse_fork(ret);
}

SEC("fmod_ret/security_bprm_check")
int BPF_PROG(gate_bprm_check_ret, struct linux_binprm *bprm, int ret)
{
	return refuse_exec(bprm, ret);
}

// The identity of freeze's own open files as the kernel holds them: one
// record per descriptor of the loader (self_tgid, set before loading).
// freeze opens each target O_PATH and reads here what mm->exe_file of a
// process running it will show (iter/task_file, Linux 5.8).
const volatile __u32 self_tgid = 0;

struct fd_rec {
	__u64 ino;
	__u32 dev; // the kernel's encoding: major<<20 | minor
	__u32 fd;
};

const struct fd_rec *unused_fd_rec __attribute__((unused));

SEC("iter/task_file")
int gate_ident(struct bpf_iter__task_file *ctx)
{
	struct task_struct *t = ctx->task;
	struct file *f = ctx->file;
	if (!t || !f || t->tgid != self_tgid)
		return 0;
	struct fd_rec r = {};
	r.fd = ctx->fd;
	r.ino = f->f_inode->i_ino;
	r.dev = f->f_inode->i_sb->s_dev;
	bpf_seq_write(ctx->meta->seq, &r, sizeof(r));
	return 0;
}

// The kill: one pass over every task in the kernel (a task iterator,
// run by reading its link), SIGKILL to each process of the chain, by the
// same test as the gate's. bpf_send_signal_task is a kfunc of Linux 6.13:
// where it is missing, only this program fails to load, and the kill
// rounds signal by pidfd. One system call for the whole chain, as
// cgroup.kill is for a group, without moving anything into one.
extern int bpf_send_signal_task(struct task_struct *task, int sig, enum pid_type type, __u64 value) __ksym;

// killed marks the processes the kill iterator has signalled, so that
// each is counted once: a pass may show a task twice (the iterator's read
// restarts at the last object), and the kill rounds run passes while
// anything is alive.
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u32);
} killed SEC(".maps");

SEC("iter/task")
int gate_kill(struct bpf_iter__task *ctx)
{
	struct task_struct *t = ctx->task;
	if (!t || t->pid != t->tgid || t->exit_state)
		return 0;
	if (!in_chain(t))
		return 0;
	__u32 *k = bpf_task_storage_get(&killed, t, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (bpf_send_signal_task(t, 9, PIDTYPE_TGID, 0) != 0)
		return 0;
	if (!k) {
		// Signalled, but not noted: counted now, and again if a later
		// pass meets it still dying.
		count(C_KILLED);
		count(C_KILL_UNNOTED);
	} else if (!*k) {
		*k = 1;
		count(C_KILLED);
	}
	return 0;
}

// The mark: one pass over every task, marking each process the gate
// holds by its file. A chain named with --arg is held by file until the
// scan has read argv; its decoys are then freed, and this marks the rest
// (the chain) in one system call, before the gate forgets the file:
// 2,000 marks by pidfd took 25 ms.
SEC("iter/task")
int gate_mark(struct bpf_iter__task *ctx)
{
	struct task_struct *t = ctx->task;
	if (!t || t->pid != t->tgid || t->exit_state)
		return 0;
	if (never(t) || marked(t))
		return 0;
	struct mm_struct *mm = t->mm;
	if (!mm || !is_target(mm->exe_file) || !owner_ok(t))
		return 0;
	if (bpf_task_storage_get(&gated, t, 0, BPF_LOCAL_STORAGE_GET_F_CREATE))
		count(C_MARKED);
	else
		count(C_MARK_FAILED);
	return 0;
}

// The scan: one record per process (thread group leader), what a scan
// reads from /proc/PID/stat and a stat of /proc/PID/exe, in one pass in
// the kernel. Reading 12,000 processes through /proc takes about 0.2 s
// here (a directory read, then a stat read and an exe stat each); this
// takes a few milliseconds, and does not contend with the chain's exits
// on /proc's locks.
struct task_rec {
	__u32 pid;
	__u32 ppid;
	__u64 start_ns; // start_boottime: /proc's field 22 is this / (1e9 / USER_HZ)
	__u64 ino;
	__u32 dev;   // the kernel's encoding: major<<20 | minor
	__u32 nlink; // 0: the executable was deleted
	__u32 state; // __state; /proc's letter is computed from it and exit_state
	__s32 exit_state;
	__u32 flags; // PF_KTHREAD for kernel threads
	__u32 has_exe;
	char comm[16];
};

// Keeps the record's type in the object's BTF, for bpf2go's Go type.
const struct task_rec *unused_task_rec __attribute__((unused));

SEC("iter/task")
int gate_tasks(struct bpf_iter__task *ctx)
{
	struct task_struct *t = ctx->task;
	if (!t || t->pid != t->tgid)
		return 0;
	struct task_rec r = {};
	r.pid = t->tgid;
	r.ppid = t->real_parent->tgid;
	r.start_ns = t->start_boottime;
	r.state = t->__state;
	r.exit_state = t->exit_state;
	r.flags = t->flags;
	bpf_probe_read_kernel(&r.comm, sizeof(r.comm), &t->comm);
	struct mm_struct *mm = t->mm;
	if (mm) {
		struct file *f = mm->exe_file;
		if (f) {
			r.has_exe = 1;
			r.ino = f->f_inode->i_ino;
			r.dev = f->f_inode->i_sb->s_dev;
			r.nlink = f->f_inode->i_nlink;
		}
	}
	bpf_seq_write(ctx->meta->seq, &r, sizeof(r));
	return 0;
}

// The counter: fork attempts per executable, whoever makes them, for the
// guard's automatic mode. It refuses nothing. Attempts a pids cap refuses
// are counted too, so a chain spinning at its cap, which /proc shows as
// flat, is seen. Only this program is attached by gate.Counter.
//
// count_ns_ino 0 counts every task on the machine (a guard in the host's
// pid namespace). Else only the tasks of one pid namespace are counted
// (count_ns_dev and count_ns_ino, as stat(2) gives them for
// /proc/self/ns/pid): a guard in a pid namespace of its own sees only
// that namespace's processes in its /proc, and must not act on its own
// processes of a file for forks made elsewhere on the machine.
const volatile __u64 count_ns_dev = 0;
const volatile __u64 count_ns_ino = 0;

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct file_id);
	__type(value, __u64);
} fork_counts SEC(".maps");

SEC("tp_btf/sys_enter")
int BPF_PROG(count_sys_enter, struct pt_regs *regs, long id)
{
	if (id != NR_clone && id != NR_fork && id != NR_vfork && id != NR_clone3)
		return 0;
	if (count_ns_ino) {
		struct bpf_pidns_info ns;
		if (bpf_get_ns_current_pid_tgid(count_ns_dev, count_ns_ino, &ns, sizeof(ns)))
			return 0;
	}
	struct task_struct *t = bpf_get_current_task_btf();
	if (t->flags & PF_KTHREAD)
		return 0;
	struct mm_struct *mm = t->mm;
	if (!mm)
		return 0;
	struct file *f = mm->exe_file;
	if (!f)
		return 0;
	struct file_id k = {};
	k.ino = f->f_inode->i_ino;
	k.dev = f->f_inode->i_sb->s_dev;
	__u64 *v = bpf_map_lookup_elem(&fork_counts, &k);
	if (v) {
		__sync_fetch_and_add(v, 1);
	} else {
		__u64 one = 1;
		bpf_map_update_elem(&fork_counts, &k, &one, BPF_NOEXIST);
	}
	return 0;
}

// The argv recorder: the guard keeps it attached while armed, so that a
// run named with --arg reads a process's argv as it was at its exec, from
// the kernel, where /proc/PID/cmdline would wait for the process's
// address-space lock. A fork bomb's root is always in the middle of a
// fork at its cap, preempted among thousands of runnable processes with
// that lock held for the copy: one match in five waited 90-430 ms on it
// (issue #51). Here the argv is read in the exec's own context, from the
// new stack it was just copied to (resident: no fault, no lock), once per
// exec, into the exec'ing task's storage (the thread group's leader once
// exec returns; a pidfd finds it). A fork inherits no record: a process
// that has not exec'd since the recorder attached has none.
#define ARGV_REC 256

struct argv_rec {
	__u32 len;  // bytes of argv in buf (0: not read, see full)
	__u32 full; // 1: buf holds the whole argv; 0: its first ARGV_REC bytes, or none
	char buf[ARGV_REC];
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct argv_rec);
} argv_recs SEC(".maps");

SEC("tp_btf/sched_process_exec")
int BPF_PROG(record_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	struct argv_rec *r = bpf_task_storage_get(&argv_recs, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!r) {
		// None, nor an earlier one (a record is looked up before one is
		// made): a run reads /proc.
		count(C_RECORD_FAILED);
		return 0;
	}
	r->len = 0;
	r->full = 0;
	struct mm_struct *mm = p->mm;
	unsigned long start = 0, end = 0;
	if (mm) {
		start = mm->arg_start;
		end = mm->arg_end;
	}
	if (end <= start) {
		count(C_RECORD_FAILED);
		return 0;
	}
	__u64 n = end - start;
	__u32 full = 1;
	if (n > ARGV_REC) {
		n = ARGV_REC;
		full = 0;
	}
	if (bpf_probe_read_user(r->buf, n, (const void *)start)) {
		count(C_RECORD_FAILED);
		return 0;
	}
	r->len = n;
	r->full = full;
	count(C_RECORDED);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
