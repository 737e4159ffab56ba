/* SPDX-License-Identifier: GPL-2.0 */
/*
 * How a CUDA-probe or marker hit classifies the calling thread: the task-class
 * maps and the rules that write them.
 *
 * Two BPF objects include this file, each from exactly one .bpf.c (it defines
 * maps):
 *   - the scheduler, through classify.bpf.c;
 *   - the probes-only tracer (`scx_express trace`), through trace.bpf.c, so
 *     that trace mode classifies threads exactly as the scheduler would,
 *     on kernels without sched_ext too.
 * The includer provides vmlinux.h, the libbpf helpers and intf.h first, and
 * defines the two knobs, where it keeps its knobs (the scheduler in its
 * reloadable section, the tracer in rodata):
 *   u64 idle_demote_ns: a probe-derived gpu class lapses this long after
 *     the last CUDA call;
 *   bool class_scope_process[NR_CLASSES]: the class applies to the whole
 *     process.
 */
#ifndef __EXPRESS_CLASSIFY_BPF_H
#define __EXPRESS_CLASSIFY_BPF_H

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_class_info);
} task_class SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, u32); /* tgid */
	__type(value, struct task_class_info);
} proc_class SEC(".maps");

/*
 * Set once proc_class has an entry. Until then (no class with process
 * scope has been claimed) a thread without a class of its own is normal
 * without the hash lookup, which every wakeup of every task would pay.
 */
volatile u32 proc_class_used;

/* The class an entry grants now: probe-derived classes lapse when idle. */
static __always_inline u32 effective_class(const struct task_class_info *ci, u64 now)
{
	/* time_after(now, demote_at_ns) */
	if (ci->source == SRC_PROBE && (s64)(ci->demote_at_ns - now) < 0)
		return CLASS_NORMAL;
	return ci->class < NR_CLASSES ? ci->class : CLASS_NORMAL;
}

/* A thread's class at @now: its own entry, else its process's, else normal. */
static __always_inline u32 class_of(struct task_struct *p, u64 now)
{
	struct task_class_info *ci = bpf_task_storage_get(&task_class, p, 0, 0);
	u32 tgid;

	if (ci && ci->source != SRC_NONE)
		return effective_class(ci, now);

	if (!proc_class_used)
		return CLASS_NORMAL;
	tgid = p->tgid;
	ci = bpf_map_lookup_elem(&proc_class, &tgid);
	return ci ? effective_class(ci, now) : CLASS_NORMAL;
}

/* Record @class from @source for @ci unless a higher-ranked source owns it. */
static __always_inline void claim(struct task_class_info *ci, u32 class, u32 source, u64 now)
{
	if (ci->source > source)
		return;
	ci->class = class;
	ci->source = source;
	if (source == SRC_PROBE)
		ci->demote_at_ns = now + idle_demote_ns;
}

static __always_inline void claim_process(u32 class, u32 source, u64 now)
{
	u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct task_class_info *ci = bpf_map_lookup_elem(&proc_class, &tgid);
	struct task_class_info fresh = {};

	if (!ci) {
		claim(&fresh, class, source, now);
		bpf_map_update_elem(&proc_class, &tgid, &fresh, BPF_NOEXIST);
		proc_class_used = 1;
		return;
	}
	claim(ci, class, source, now);
}

/* The calling thread's class record, created on first use. */
static __always_inline struct task_class_info *current_class_info(void)
{
	return bpf_task_storage_get(&task_class, bpf_get_current_task_btf(), 0,
				    BPF_LOCAL_STORAGE_GET_F_CREATE);
}

/*
 * The calling thread claims @class from @source, and so does its process
 * when the class is configured process-wide.
 */
static __always_inline void claim_current(struct task_class_info *ci, u32 class, u32 source,
					  u64 now)
{
	claim(ci, class, source, now);
	if (class < NR_CLASSES && class_scope_process[class])
		claim_process(class, source, now);
}

/* The calling thread made a CUDA call at @now: it is a GPU launcher. */
static __always_inline void note_cuda_call(bool launch, u64 now)
{
	struct task_class_info *ci = current_class_info();

	if (!ci)
		return;
	if (launch)
		ci->launches++;
	else
		ci->syncs++;
	ci->last_gpu_ns = now;
	claim_current(ci, CLASS_GPU, SRC_PROBE, now);
}

/* The calling thread called a marker of @class at @now. */
static __always_inline void note_marker(u32 class, u64 now)
{
	struct task_class_info *ci = current_class_info();

	if (ci)
		claim_current(ci, class, SRC_MARKER, now);
}

#endif /* __EXPRESS_CLASSIFY_BPF_H */
