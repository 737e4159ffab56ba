/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Budget: a token bucket per task, in nanoseconds of CPU time.
 *
 * Capacity is the class's burst; the bucket refills at the class's rate
 * (parts per million of one CPU) of elapsed wall time. Express running time
 * is charged when the task stops. A task that fakes launches to stay
 * express can therefore take at most burst + rate x time of express CPU.
 */
#include "express.bpf.h"

static void budget_refill(struct task_ctx *tctx, u32 class, u64 now)
{
	u64 burst = class_burst_ns[class];
	u64 elapsed, gain;

	if (!tctx->refill_ns) {
		/* First look at this task: start with a full bucket. */
		tctx->tokens_ns = burst;
		tctx->refill_ns = now;
		return;
	}
	if (time_before_eq(now, tctx->refill_ns))
		return;

	elapsed = now - tctx->refill_ns;
	gain = elapsed / 1000 * class_rate_ppm[class] / 1000;
	tctx->tokens_ns = tctx->tokens_ns + gain > burst ? burst : tctx->tokens_ns + gain;
	tctx->refill_ns = now;
}

__hidden bool budget_has_tokens(struct task_ctx *tctx, u32 class, u64 now)
{
	if (class >= NR_CLASSES)
		return false;
	budget_refill(tctx, class, now);
	return tctx->tokens_ns > 0;
}

__hidden void budget_charge(struct task_ctx *tctx, u64 now)
{
	u64 used;

	if (!tctx->express_since_ns || time_before(now, tctx->express_since_ns))
		return;
	used = now - tctx->express_since_ns;
	tctx->tokens_ns = tctx->tokens_ns > used ? tctx->tokens_ns - used : 0;
	tctx->express_since_ns = 0;
}
