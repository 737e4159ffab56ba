/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Budget: how much CPU the express lane may take.
 *
 * Per task, a token bucket in nanoseconds of CPU time: capacity is the
 * class's burst, refilled at the class's rate (parts per million of one CPU)
 * of elapsed time. Express running time is charged when the task stops,
 * and may push the bucket into debt, which refills before the task is
 * express again. A task that fakes launches to stay express takes at most
 * burst + rate x time of express CPU; without tokens it is an ordinary task.
 *
 * Per class, a quota: in each period of CLASS_PERIOD_NS, the class's express
 * running time may not exceed class_quota_ns (max_share x CPUs x period),
 * so many express tasks together cannot starve the rest of the machine.
 */
#include "express.bpf.h"

#define CLASS_PERIOD_NS (100 * NSEC_PER_MSEC)

/*
 * Per class (enum task_class), the token bucket: its capacity in ns of CPU
 * time (classes.*.burst_ms, 0 to 10 s; 0 disables the lane) and its refill
 * rate in parts per million of one CPU (classes.*.rate x 10^6, 0 to 10^6).
 */
KNOB u64 class_burst_ns[NR_CLASSES];
KNOB u64 class_rate_ppm[NR_CLASSES];

/*
 * Per class: express CPU time allowed per CLASS_PERIOD_NS, all CPUs
 * together, in ns (classes.*.max_share x CPUs x period).
 */
KNOB u64 class_quota_ns[NR_CLASSES];

/* Per class: start of the current period and express time used in it. */
volatile u64 class_period_start[NR_CLASSES];
volatile u64 class_used_ns[NR_CLASSES];

static void budget_refill(struct task_ctx *tctx, u32 class, u64 now)
{
	s64 burst = class_burst_ns[class];
	s64 gain;
	u64 elapsed;

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

/* Is @class under its quota in the current period? */
static bool class_under_quota(u32 class, u64 now)
{
	u64 start = class_period_start[class];

	if (now - start >= CLASS_PERIOD_NS) {
		/* New period; a racing CPU doing the same is harmless. */
		class_period_start[class] = now;
		class_used_ns[class] = 0;
		return true;
	}
	return class_used_ns[class] < class_quota_ns[class];
}

/* Why @tctx may not use the lane now (its lane stat), or NR_LANE_STATS. */
static u32 budget_denial(struct task_ctx *tctx, u32 class, u64 now)
{
	budget_refill(tctx, class, now);
	if (tctx->tokens_ns <= 0)
		return LANE_NO_TOKENS;
	if (!class_under_quota(class, now))
		return LANE_CLASS_CAP;
	return NR_LANE_STATS;
}

__hidden bool budget_has_tokens(struct task_ctx *tctx, u32 class, u64 now)
{
	u32 why;

	if (class >= NR_CLASSES)
		return false;
	why = budget_denial(tctx, class, now);
	if (why != NR_LANE_STATS) {
		lane_stat_inc(class, why);
		return false;
	}
	return true;
}

__hidden void budget_charge(struct task_ctx *tctx, u64 now)
{
	u32 class = tctx->lane_class;
	u64 used;

	if (!tctx->express_since_ns || time_before(now, tctx->express_since_ns))
		return;
	used = now - tctx->express_since_ns;
	tctx->tokens_ns -= used;
	tctx->express_exec_ns += used;
	tctx->express_since_ns = 0;
	if (class < NR_CLASSES)
		__sync_fetch_and_add(&class_used_ns[class], used);
}

/*
 * May @tctx, running in the lane since express_since_ns, go on for another
 * slice? Its run so far is charged now, as if it had stopped (refills keep
 * pace with a long run); then the same checks as for a wakeup. A refusal
 * is not counted here: the task is re-enqueued next, and ops.enqueue()
 * counts it once.
 */
__hidden bool budget_extend(struct task_ctx *tctx, u32 class, u64 now)
{
	if (class >= NR_CLASSES || !tctx->express_since_ns ||
	    time_before(now, tctx->express_since_ns))
		return false;
	budget_charge(tctx, now);
	tctx->express_since_ns = now;
	return budget_denial(tctx, class, now) == NR_LANE_STATS;
}
