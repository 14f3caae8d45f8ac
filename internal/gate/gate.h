// SPDX-License-Identifier: (GPL-2.0-only OR MIT)
//
// The few kernel types the gate reads. preserve_access_index makes every
// field access a CO-RE relocation: the loader finds each field's offset in
// the running kernel's BTF, so no vmlinux.h is needed and the object is
// not tied to one kernel build. A field that moved (mm_struct's exe_file
// sits in an anonymous struct) is still found by name.
#ifndef FREEZE_GATE_H
#define FREEZE_GATE_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef short __s16;
typedef __u16 __be16;
typedef unsigned int __u32;
typedef int __s32;
typedef unsigned long long __u64;
typedef long long __s64;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef __u32 dev_t;
typedef int pid_t;

#define __PRESERVE __attribute__((preserve_access_index))

// UAPI (linux/bpf.h): what bpf_get_ns_current_pid_tgid fills.
struct bpf_pidns_info {
	__u32 pid;
	__u32 tgid;
};

struct super_block {
	dev_t s_dev;
} __PRESERVE;

struct inode {
	unsigned long i_ino;
	unsigned int i_nlink; // in an anonymous union: found by name
	struct super_block *i_sb;
} __PRESERVE;

struct file {
	struct inode *f_inode;
} __PRESERVE;

struct mm_struct {
	struct file *exe_file;
	unsigned long arg_start; // in an anonymous struct: found by name
	unsigned long arg_end;
} __PRESERVE;

typedef struct {
	__u32 val;
} kuid_t;

struct cred {
	kuid_t euid;
} __PRESERVE;

struct task_struct {
	unsigned int __state;
	unsigned int flags;
	int exit_state;
	pid_t pid;
	pid_t tgid;
	struct mm_struct *mm;
	struct task_struct *real_parent;
	struct task_struct *group_leader;
	__u64 start_boottime;
	char comm[16];
	const struct cred *cred;
} __PRESERVE;

struct linux_binprm {
	struct file *file;
} __PRESERVE;

struct pt_regs;

struct seq_file;

struct bpf_iter_meta {
	struct seq_file *seq;
} __PRESERVE;

struct bpf_iter__task {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
} __PRESERVE;

struct bpf_iter__task_file {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
	__u32 fd;
	struct file *file;
} __PRESERVE;

enum pid_type {
	PIDTYPE_PID,
	PIDTYPE_TGID,
};

enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_TASK_STORAGE = 29,
};

enum {
	BPF_F_NO_PREALLOC = 1,
};

enum {
	BPF_NOEXIST = 1,
};

enum {
	BPF_LOCAL_STORAGE_GET_F_CREATE = 1,
};

#endif
