/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Express placement: where an express task's wakeup lands.
 *
 * Only tasks of an enabled express class that still have tokens get here.
 * Order of preference: the previous CPU if idle (warm caches), then an idle
 * CPU chosen by the default picker (which prefers the same LLC). With no
 * idle CPU, ops.enqueue() puts the task at the head of its CPU's local
 * queue, ahead of everything the fair path queued.
 */
#include "express.bpf.h"

/* The task's context if it may take the express lane right now. */
static struct task_ctx *express_ctx(struct task_struct *p)
{
	u32 class = task_class_of(p);
	struct task_ctx *tctx;

	if (class == CLASS_NORMAL || class >= NR_CLASSES || !class_enabled[class])
		return NULL;
	tctx = task_ctx_get(p);
	if (!tctx)
		return NULL;
	if (!budget_has_tokens(tctx, class, bpf_ktime_get_ns())) {
		stat_inc(STAT_EXPRESS_NO_TOKENS);
		return NULL;
	}
	return tctx;
}

__hidden s32 express_lane_select_cpu(struct task_struct *p, s32 prev_cpu, u64 wake_flags)
{
	struct task_ctx *tctx = express_ctx(p);
	bool is_idle = false;
	s32 cpu;

	if (!tctx)
		return -1;

	if (bpf_cpumask_test_cpu(prev_cpu, p->cpus_ptr) &&
	    scx_bpf_test_and_clear_cpu_idle(prev_cpu)) {
		cpu = prev_cpu;
	} else {
		cpu = scx_bpf_select_cpu_dfl(p, prev_cpu, wake_flags, &is_idle);
		if (!is_idle)
			return -1;
	}

	tctx->express_queued = 1;
	scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, express_slice_ns, 0);
	stat_inc(STAT_EXPRESS);
	return cpu;
}

__hidden bool express_lane_enqueue(struct task_struct *p, u64 enq_flags)
{
	struct task_ctx *tctx = express_ctx(p);

	if (!tctx)
		return false;

	tctx->express_queued = 1;
	scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, express_slice_ns,
			   enq_flags | SCX_ENQ_HEAD);
	stat_inc(STAT_EXPRESS);
	return true;
}

__hidden void express_lane_running(struct task_struct *p)
{
	struct task_ctx *tctx = task_ctx_get(p);

	if (!tctx || !tctx->express_queued)
		return;
	tctx->express_queued = 0;
	tctx->express_since_ns = bpf_ktime_get_ns();
}

__hidden void express_lane_stopping(struct task_struct *p)
{
	struct task_ctx *tctx = task_ctx_get(p);

	if (tctx)
		budget_charge(tctx, bpf_ktime_get_ns());
}
