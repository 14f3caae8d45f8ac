//go:build ignore

// SPDX-License-Identifier: GPL-2.0
//
// The gate: once attached, no process of the chain completes a fork, a
// clone or an exec. Each attempt is answered with SIGSTOP (or SIGKILL, see
// action) to the caller,
// sent from sys_enter: the pending signal makes copy_process back out
// before anything is copied (and before the pids cgroup charge), so the
// fork never happens and the forker stops. An exec of a target file by
// anyone is stopped before its first instruction.
//
// The chain is:
//   - every task whose executable's inode is in `targets` (when freeze
//     was given files, not --arg), and
//   - every task marked in `gated`: matched by freeze's scan (freeze
//     marks them by pidfd), or born of a gated or target task (lineage,
//     in sched_process_fork). Task-local storage dies with its task, so
//     a reused pid is never gated.
// Never gated: the tgids in `exempt` (freeze and its ancestors), PID 1
// and kernel threads.
//
// Only tp_btf programs: lsm, fentry and fmod_ret do not load on the
// machines freeze was built on (see the README). Syscall numbers are
// x86_64's.

#include "gate.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#define SIGSTOP 19
#define PF_KTHREAD 0x00200000

// What a refused attempt gets: SIGSTOP, or SIGKILL when the run is going
// to kill the chain anyway (set by the loader before loading).
const volatile __u32 action = SIGSTOP;

// x86_64 syscall numbers.
#define NR_clone 56
#define NR_fork 57
#define NR_vfork 58
#define NR_execve 59
#define NR_execveat 322
#define NR_clone3 435

// Counters, one slot each (index names in gate.go).
enum {
	C_FORK_STOPPED,   // clone-family calls of the chain answered with SIGSTOP
	C_EXEC_STOPPED,   // exec-family calls of the chain answered with SIGSTOP
	C_TARGET_EXEC,    // execs of a target file by a task not yet gated
	C_LINEAGE,        // children marked because their parent is gated
	C_KILLED,         // processes the kill iterator signalled
	C_MAX,
};

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

// never reports whether t is one freeze must never gate.
static __always_inline int never(struct task_struct *t)
{
	__u32 tgid = t->tgid;
	if (tgid <= 1 || (t->flags & PF_KTHREAD))
		return 1;
	return bpf_map_lookup_elem(&exempt, &tgid) != 0;
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
	return mm && is_target(mm->exe_file);
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
	// Mark it too: a task gated by its file stays gated after it execs
	// another one.
	bpf_task_storage_get(&gated, t, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	bpf_send_signal(action);
	count(c);
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(gate_fork, struct task_struct *parent, struct task_struct *child)
{
	if (!in_chain(parent))
		return 0;
	if (bpf_task_storage_get(&gated, child, 0, BPF_LOCAL_STORAGE_GET_F_CREATE))
		count(C_LINEAGE);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(gate_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	if (never(p) || marked(p) || !is_target(bprm->file))
		return 0;
	bpf_task_storage_get(&gated, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	bpf_send_signal(action);
	count(C_TARGET_EXEC);
	return 0;
}

// The kill: one pass over every task in the kernel (a task iterator,
// run by reading its link), SIGKILL to each process of the chain, by the
// same test as the gate's. One system call for the whole chain, as
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
	if (bpf_send_signal_task(t, 9, PIDTYPE_TGID, 0) == 0 && k && !*k) {
		*k = 1;
		count(C_KILLED);
	}
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

char LICENSE[] SEC("license") = "GPL";
