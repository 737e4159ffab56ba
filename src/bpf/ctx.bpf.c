/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The scheduler's own state: per task (`task_ctxs`, struct task_ctx) and
 * per CPU (`cpu_ctxs`, struct cpu_ctx), both in intf.h.
 *
 * Every part of the scheduler reads and writes them: tokens (budget.bpf.c),
 * the lane a task was dispatched by (placement.bpf.c, fair.bpf.c), IRQ time
 * and idle depth (cpu_quality.bpf.c), what runs on each CPU (both lanes).
 * So they live here, in a file that uses nothing, rather than with one of
 * their users. The task class is not here: it has writers outside the
 * scheduler and its own map (classify.bpf.c), so that they never race
 * with the scheduler's writes.
 */
#include "express.bpf.h"

/*
 * Created in ops.init_task() for every task the scheduler sees. Userspace
 * pins it (src/classify.rs, PIN_TASK_CTXS) for `scx_express ps`.
 */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_ctx);
} task_ctxs SEC(".maps");

/* One entry per possible CPU id; userspace reads the IRQ load from it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_CPUS);
	__type(key, u32);
	__type(value, struct cpu_ctx);
} cpu_ctxs SEC(".maps");

__hidden struct task_ctx *task_ctx_get(struct task_struct *p)
{
	return bpf_task_storage_get(&task_ctxs, p, 0, 0);
}

__hidden struct task_ctx *task_ctx_create(struct task_struct *p)
{
	return bpf_task_storage_get(&task_ctxs, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
}

__hidden struct cpu_ctx *cpu_ctx_of(s32 cpu)
{
	u32 key = cpu;

	return bpf_map_lookup_elem(&cpu_ctxs, &key);
}

/*
 * Is @cpu taken by an RT task (cpu_ctx.rt_held, set by ops.cpu_release()
 * and kept by ops.dispatch(), main.bpf.c)? A task sent to its local DSQ
 * would run only in the ext deadline server's 50 ms a second, behind the
 * tasks pinned there (docs/operations.md, "RT hogs").
 */
__hidden bool cpu_rt_held(s32 cpu)
{
	struct cpu_ctx *cc = cpu_ctx_of(cpu);

	return cc && cc->rt_held;
}
