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
 *
 * Per tenant (tenant.bpf.c), the same two with the tenant's numbers: its
 * tasks' buckets use the tenant's burst and rate, and the tenant has a
 * quota of its own per period, so that one tenant's runaway tasks cannot
 * spend another tenant's share. The class quota still applies on top: it
 * bounds all tenants of the class and the tasks in none together. CPUs
 * held idle for a tenant's tasks (hold.bpf.c) count in both quotas too,
 * so one tenant's agents cannot keep the class's held CPUs to themselves.
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

/*
 * Per class: start of the current period, express running time used in it,
 * and CPU time held idle for its tasks (hold.bpf.c) in it.
 */
volatile u64 class_period_start[NR_CLASSES];
volatile u64 class_used_ns[NR_CLASSES];
volatile u64 class_held_ns[NR_CLASSES];

/*
 * Per tenant (by index): the class it applies to (0: no tenant at this
 * index), its bucket (tenants.burst_ms, tenants.rate, as the class's) and
 * its quota per period (tenants.max_share x CPUs x period). Unset ones are
 * the class's values, filled in by userspace.
 */
KNOB u32 tenant_class[MAX_TENANTS];
KNOB u64 tenant_burst_ns[MAX_TENANTS];
KNOB u64 tenant_rate_ppm[MAX_TENANTS];
KNOB u64 tenant_quota_ns[MAX_TENANTS];

/* Per tenant: start of the current period, express time used and CPU time held in it. */
volatile u64 tenant_period_start[MAX_TENANTS];
volatile u64 tenant_used_ns[MAX_TENANTS];
volatile u64 tenant_held_ns[MAX_TENANTS];

/*
 * @tctx's tenant (index + 1) as of its last resolution, if that tenant is
 * still configured for @class (a reload may have changed it); else 0.
 */
__hidden u32 budget_tenant(struct task_ctx *tctx, u32 class)
{
	u32 t = tctx->tenant;

	if (!t || t > MAX_TENANTS || tenant_class[t - 1] != class)
		return 0;
	return t;
}

static void budget_refill(struct task_ctx *tctx, u32 class, u32 t, u64 now)
{
	s64 burst = t ? tenant_burst_ns[t - 1] : class_burst_ns[class];
	u64 rate = t ? tenant_rate_ppm[t - 1] : class_rate_ppm[class];
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
	gain = elapsed / 1000 * rate / 1000;
	tctx->tokens_ns = tctx->tokens_ns + gain > burst ? burst : tctx->tokens_ns + gain;
	tctx->refill_ns = now;
}

/*
 * Start a new period at @now if the one at @start is over: @used (and
 * @held, if given) back to 0. True if it did.
 */
static bool period_roll(volatile u64 *start, volatile u64 *used, volatile u64 *held, u64 now)
{
	if (now - *start < CLASS_PERIOD_NS)
		return false;
	/* A racing CPU doing the same is harmless. */
	*start = now;
	*used = 0;
	if (held)
		*held = 0;
	return true;
}

/* Is the period at @start, with @used of @quota spent, under quota at @now? */
static bool under_quota(volatile u64 *start, volatile u64 *used, volatile u64 *held, u64 quota,
			u64 now)
{
	return period_roll(start, used, held, now) || *used < quota;
}

/*
 * Is there room in the period at @start, with @used run and @held held of
 * @quota, for a hold of @ns more at @now? Holds come after running time:
 * under_quota() looks at @used alone.
 */
static bool hold_room(volatile u64 *start, volatile u64 *used, volatile u64 *held, u64 quota,
		      u64 ns, u64 now)
{
	period_roll(start, used, held, now);
	return *used + *held + ns <= quota;
}

/* Why @tctx may not use the lane now (its lane stat), or NR_LANE_STATS. */
static u32 budget_denial(struct task_ctx *tctx, u32 class, u64 now)
{
	u32 t = budget_tenant(tctx, class);

	budget_refill(tctx, class, t, now);
	if (tctx->tokens_ns <= 0)
		return LANE_NO_TOKENS;
	if (t && t <= MAX_TENANTS &&
	    !under_quota(&tenant_period_start[t - 1], &tenant_used_ns[t - 1],
			 &tenant_held_ns[t - 1], tenant_quota_ns[t - 1], now))
		return LANE_TENANT_CAP;
	if (!under_quota(&class_period_start[class], &class_used_ns[class], &class_held_ns[class],
			 class_quota_ns[class], now))
		return LANE_CLASS_CAP;
	return NR_LANE_STATS;
}

/* The tenant counter of a lane denial. */
static u32 tenant_denial(u32 why)
{
	switch (why) {
	case LANE_NO_TOKENS:
		return TENANT_NO_TOKENS;
	case LANE_TENANT_CAP:
		return TENANT_QUOTA;
	default:
		return TENANT_CLASS_CAP;
	}
}

__hidden bool budget_has_tokens(struct task_ctx *tctx, u32 class, u64 now)
{
	u32 why;

	if (class >= NR_CLASSES)
		return false;
	why = budget_denial(tctx, class, now);
	if (why != NR_LANE_STATS) {
		lane_stat_inc(class, why);
		tenant_stat_inc(budget_tenant(tctx, class), tenant_denial(why));
		return false;
	}
	return true;
}

__hidden void budget_charge(struct task_ctx *tctx, u64 now)
{
	u32 class = tctx->lane_class, t;
	u64 used;

	if (!tctx->express_since_ns || time_before(now, tctx->express_since_ns))
		return;
	used = now - tctx->express_since_ns;
	tctx->tokens_ns -= used;
	tctx->express_exec_ns += used;
	tctx->express_since_ns = 0;
	if (class >= NR_CLASSES)
		return;
	__sync_fetch_and_add(&class_used_ns[class], used);
	t = budget_tenant(tctx, class);
	if (t && t <= MAX_TENANTS)
		__sync_fetch_and_add(&tenant_used_ns[t - 1], used);
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

/*
 * May @class, and @t (tenant index + 1, 0: none), hold a CPU idle for @ns
 * more at @now (hold.bpf.c)? Only in what running time and earlier holds
 * left of this period's quota, the class's and the tenant's: running
 * comes first, so a hold never makes budget_denial() refuse a wakeup.
 */
__hidden bool budget_hold_fits(u32 class, u32 t, u64 ns, u64 now)
{
	if (class >= NR_CLASSES ||
	    !hold_room(&class_period_start[class], &class_used_ns[class], &class_held_ns[class],
		       class_quota_ns[class], ns, now))
		return false;
	return !t || t > MAX_TENANTS ||
	       hold_room(&tenant_period_start[t - 1], &tenant_used_ns[t - 1],
			 &tenant_held_ns[t - 1], tenant_quota_ns[t - 1], ns, now);
}

/* @class's tasks, of tenant @t (index + 1, 0: none), had a CPU held idle for @ns. */
__hidden void budget_charge_hold(u32 class, u32 t, u64 ns)
{
	if (class >= NR_CLASSES)
		return;
	__sync_fetch_and_add(&class_held_ns[class], ns);
	if (t && t <= MAX_TENANTS)
		__sync_fetch_and_add(&tenant_held_ns[t - 1], ns);
}
