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
 * `task_ctxs` (ctx.bpf.c), so that writers of the class never race with it.
 */
#include "express.bpf.h"

/* A probe-derived gpu class lapses this long after the last CUDA call. */
KNOB u64 idle_demote_ns = 2000 * NSEC_PER_MSEC;
/* Per class: true when the class applies to the whole process. */
KNOB bool class_scope_process[NR_CLASSES];

/* The task-class maps and the probe/marker rules, shared with trace.bpf.c. */
#include "classify.bpf.h"

/*
 * Processes that call exec(), for the library scanner (src/discovery.rs).
 * Only these (and those that ran before the scheduler) can map a library
 * their parent did not: a fork shares its parent's mappings, and a
 * dlopen() grows the mapped size, which the scanner watches. So the
 * scanner reads new processes from here instead of listing /proc, and
 * fork-heavy loads (hundreds of forks a second) cost it nothing. 256 KiB
 * hold about 16K events between two passes (250 ms by default).
 */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} exec_events SEC(".maps");

SEC("tp_btf/sched_process_exec")
int BPF_PROG(note_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	u32 tgid = p->tgid;

	/* The scanner polls; no wakeup (an irq_work per exec) is needed. */
	bpf_ringbuf_output(&exec_events, &tgid, sizeof(tgid), BPF_RB_NO_WAKEUP);
	return 0;
}

__hidden u32 task_class_of(struct task_struct *p)
{
	return class_of(p, bpf_ktime_get_ns());
}

/* Attached by userspace (src/probes.rs) to CUDA launch entry points. */
SEC("uprobe")
int BPF_UPROBE(cuda_launch)
{
	note_cuda_call(true, bpf_ktime_get_ns());
	return 0;
}

/* Attached to CUDA sync and device-to-host copy entry points. */
SEC("uprobe")
int BPF_UPROBE(cuda_sync)
{
	note_cuda_call(false, bpf_ktime_get_ns());
	return 0;
}

/* Attached to express_mark_agent() and configured agent markers. */
SEC("uprobe")
int BPF_UPROBE(mark_agent)
{
	note_marker(CLASS_AGENT, bpf_ktime_get_ns());
	return 0;
}

/* Attached to express_mark_gpu() and configured gpu markers. */
SEC("uprobe")
int BPF_UPROBE(mark_gpu)
{
	note_marker(CLASS_GPU, bpf_ktime_get_ns());
	return 0;
}

/* Attached to express_unmark(). */
SEC("uprobe")
int BPF_UPROBE(mark_normal)
{
	note_marker(CLASS_NORMAL, bpf_ktime_get_ns());
	return 0;
}
