/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Classification: the one task-class map.
 *
 * `task_class` holds a struct task_class_info per thread (BPF task storage).
 * Its writers:
 *   - CUDA uprobes (below): a thread calling a launch or sync entry point
 *     becomes `gpu`; the class lapses idle_demote_ns after its last call.
 *   - Opt-in marker uprobes (below): express_mark_agent() & co.
 *   - Userspace (src/classify.rs): config rules and `scx_express mark`,
 *     through the map pinned under /sys/fs/bpf/scx_express (root only).
 * A source never overrides one of higher rank (enum class_source).
 *
 * With a class's scope set to `process`, probe and marker hits also mark the
 * whole process in `proc_class`, consulted when a thread has no class.
 *
 * The scheduler itself keeps its per-task state (tokens) apart, in
 * `task_ctxs`, so that writers of the class never race with it.
 */
#include "express.bpf.h"

/* A probe-derived gpu class lapses this long after the last CUDA call. */
KNOB u64 idle_demote_ns = 2000 * NSEC_PER_MSEC;
/* Per class: true when the class applies to the whole process. */
KNOB bool class_scope_process[NR_CLASSES];

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_class_info);
} task_class SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, u32);			/* tgid */
	__type(value, struct task_class_info);
} proc_class SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_ctx);
} task_ctxs SEC(".maps");

__hidden struct task_ctx *task_ctx_get(struct task_struct *p)
{
	return bpf_task_storage_get(&task_ctxs, p, 0, 0);
}

__hidden struct task_ctx *task_ctx_create(struct task_struct *p)
{
	return bpf_task_storage_get(&task_ctxs, p, 0,
				    BPF_LOCAL_STORAGE_GET_F_CREATE);
}

/* The class an entry grants now: probe-derived classes lapse when idle. */
static u32 effective_class(const struct task_class_info *ci, u64 now)
{
	if (ci->source == SRC_PROBE && time_after(now, ci->demote_at_ns))
		return CLASS_NORMAL;
	return ci->class < NR_CLASSES ? ci->class : CLASS_NORMAL;
}

__hidden u32 task_class_of(struct task_struct *p)
{
	struct task_class_info *ci = bpf_task_storage_get(&task_class, p, 0, 0);
	u64 now = bpf_ktime_get_ns();
	u32 tgid;

	if (ci && ci->source != SRC_NONE)
		return effective_class(ci, now);

	tgid = p->tgid;
	ci = bpf_map_lookup_elem(&proc_class, &tgid);
	return ci ? effective_class(ci, now) : CLASS_NORMAL;
}

/* Record @class from @source for @ci unless a higher-ranked source owns it. */
static void claim(struct task_class_info *ci, u32 class, u32 source, u64 now)
{
	if (ci->source > source)
		return;
	ci->class = class;
	ci->source = source;
	if (source == SRC_PROBE)
		ci->demote_at_ns = now + idle_demote_ns;
}

static void claim_process(u32 class, u32 source, u64 now)
{
	u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct task_class_info *ci = bpf_map_lookup_elem(&proc_class, &tgid);
	struct task_class_info fresh = {};

	if (!ci) {
		claim(&fresh, class, source, now);
		bpf_map_update_elem(&proc_class, &tgid, &fresh, BPF_NOEXIST);
		return;
	}
	claim(ci, class, source, now);
}

/* The calling thread made a CUDA call: it is a GPU launcher. */
static void note_cuda_call(bool launch)
{
	struct task_struct *cur = bpf_get_current_task_btf();
	struct task_class_info *ci;
	u64 now = bpf_ktime_get_ns();

	ci = bpf_task_storage_get(&task_class, cur, 0,
				  BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!ci)
		return;
	if (launch)
		ci->launches++;
	else
		ci->syncs++;
	ci->last_gpu_ns = now;
	claim(ci, CLASS_GPU, SRC_PROBE, now);
	if (class_scope_process[CLASS_GPU])
		claim_process(CLASS_GPU, SRC_PROBE, now);
}

static void note_marker(u32 class)
{
	struct task_struct *cur = bpf_get_current_task_btf();
	struct task_class_info *ci;
	u64 now = bpf_ktime_get_ns();

	ci = bpf_task_storage_get(&task_class, cur, 0,
				  BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!ci)
		return;
	claim(ci, class, SRC_MARKER, now);
	if (class < NR_CLASSES && class_scope_process[class])
		claim_process(class, SRC_MARKER, now);
}

/* Attached by userspace (src/probes.rs) to CUDA launch entry points. */
SEC("uprobe")
int BPF_UPROBE(cuda_launch)
{
	note_cuda_call(true);
	return 0;
}

/* Attached to CUDA sync and device-to-host copy entry points. */
SEC("uprobe")
int BPF_UPROBE(cuda_sync)
{
	note_cuda_call(false);
	return 0;
}

/* Attached to express_mark_agent() and configured agent markers. */
SEC("uprobe")
int BPF_UPROBE(mark_agent)
{
	note_marker(CLASS_AGENT);
	return 0;
}

/* Attached to express_mark_gpu() and configured gpu markers. */
SEC("uprobe")
int BPF_UPROBE(mark_gpu)
{
	note_marker(CLASS_GPU);
	return 0;
}

/* Attached to express_unmark(). */
SEC("uprobe")
int BPF_UPROBE(mark_normal)
{
	note_marker(CLASS_NORMAL);
	return 0;
}
