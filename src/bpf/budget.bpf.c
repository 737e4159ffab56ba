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
 * Per class, a quota, so that many express tasks together cannot starve
 * the rest of the machine: a bucket of lane time that refills at max_share
 * of all CPUs and holds at most one QUOTA_PERIOD_MS's worth
 * (class_quota_ns = max_share x CPUs x period). Express running time
 * drains it; while it is empty the class's wakeups take the fair path.
 * A bucket, not a budget reset every period: a class that wants a little
 * more than its share gets the fair path for one wakeup in a few, spread
 * out, not for the end of every period. At 2 vCPUs under cpu4x, an agent
 * loop with a 200 us tool call and its tool server wanted more than the
 * agent class's half CPU; with a reset every 100 ms they ran the end of
 * each period on the fair path only, their virtual time charged for every
 * run there, and after a few steps waited behind the CPU hogs: a p99
 * over 10 ms, twice EEVDF's; as a bucket, less than half that, about
 * EEVDF's (docs/benchmarks.md, "Agent shapes"). A class over its share
 * is on the fair path as often either way: the bucket only spreads it.
 *
 * Per tenant (tenant.bpf.c), the same two with the tenant's numbers: its
 * tasks' buckets use the tenant's burst and rate, and the tenant has a
 * quota of its own, so that one tenant's runaway tasks cannot
 * spend another tenant's share. The class quota still applies on top: it
 * bounds all tenants of the class and the tasks in none together. CPUs
 * held idle for a tenant's tasks (hold.bpf.c) count in both quotas too,
 * so one tenant's agents cannot keep the class's held CPUs to themselves.
 */
#include "express.bpf.h"

/*
 * Per class (enum task_class), the token bucket: its capacity in ns of CPU
 * time (classes.*.burst_ms, 0 to 10 s; 0 disables the lane) and its refill
 * rate in parts per million of one CPU (classes.*.rate x 10^6, 0 to 10^6).
 */
KNOB u64 class_burst_ns[NR_CLASSES];
KNOB u64 class_rate_ppm[NR_CLASSES];

/*
 * Per class: the quota's capacity, in ns of lane time, all CPUs together
 * (classes.*.max_share x CPUs x QUOTA_PERIOD_MS); it refills that much per
 * period.
 */
KNOB u64 class_quota_ns[NR_CLASSES];

/*
 * A quota's two buckets, each at most its capacity and refilled at the
 * same pace. `run` is drawn by express running time and decides wakeups
 * (budget_denial()); `all` by running time and by CPU time held idle for
 * the class's tasks (hold.bpf.c), and decides holds (budget_hold_fits()).
 * So a hold never takes the lane from a wakeup, and running plus holding
 * stays within the share. Either may go below zero (a run is charged when
 * it stops): the debt refills first.
 */
struct quota {
	u64 stamp; /* refilled up to here (0: never: full) */
	s64 run;
	s64 all;
};

/* Per class (enum task_class). */
struct quota class_quota[NR_CLASSES];

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

/* Per tenant (by index), its own quota. */
struct quota tenant_quota[MAX_TENANTS];

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

/* Add @gain to bucket @v, up to @cap (racing charges are kept). */
static void bucket_add(s64 *v, s64 gain, s64 cap)
{
	s64 old = __sync_fetch_and_add(v, gain);

	if (old + gain > cap)
		__sync_fetch_and_sub(v, old + gain - cap);
}

/*
 * Refill @q, of capacity @cap, for the time since its last refill. Whole
 * microseconds only, the stamp advancing by what was credited, so frequent
 * calls lose nothing to rounding. Of racing CPUs, the one that moves the
 * stamp refills.
 */
static void quota_refill(struct quota *q, u64 cap, u64 now)
{
	u64 then = q->stamp, us, gain, next;

	if (then && !time_after(now, then))
		return;
	us = then ? (now - then) / NSEC_PER_USEC : 0;
	if (then && !us)
		return;
	if (!then || us >= QUOTA_PERIOD_MS * 1000) {
		/* New, or idle for a period or more: full. */
		next = now;
		gain = cap;
	} else {
		next = then + us * NSEC_PER_USEC;
		/* us < 10^5, cap < 1024 CPUs x 10^8 ns: no overflow. */
		gain = us * cap / (QUOTA_PERIOD_MS * 1000);
	}
	if (__sync_val_compare_and_swap(&q->stamp, then, next) != then)
		return;
	bucket_add(&q->run, gain, cap);
	bucket_add(&q->all, gain, cap);
}

/* May a task of quota @q (capacity @cap) use the lane at @now? */
static bool under_quota(struct quota *q, u64 cap, u64 now)
{
	quota_refill(q, cap, now);
	return q->run > 0;
}

/* Is there room in @q (capacity @cap) for a hold of @ns more at @now? */
static bool hold_room(struct quota *q, u64 cap, u64 ns, u64 now)
{
	quota_refill(q, cap, now);
	return q->all >= (s64)ns;
}

/* @q's tasks ran in the lane for @ns (@held: no, a CPU was held for them). */
static void quota_charge(struct quota *q, u64 ns, bool held)
{
	if (!held)
		__sync_fetch_and_sub(&q->run, ns);
	__sync_fetch_and_sub(&q->all, ns);
}

/* Why @tctx may not use the lane now (its lane stat), or NR_LANE_STATS. */
static u32 budget_denial(struct task_ctx *tctx, u32 class, u64 now)
{
	u32 t = budget_tenant(tctx, class);

	budget_refill(tctx, class, t, now);
	if (tctx->tokens_ns <= 0)
		return LANE_NO_TOKENS;
	if (t && t <= MAX_TENANTS &&
	    !under_quota(&tenant_quota[t - 1], tenant_quota_ns[t - 1], now))
		return LANE_TENANT_CAP;
	if (!under_quota(&class_quota[class], class_quota_ns[class], now))
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
	lane_stat_add(class, LANE_RUN_NS, used);
	quota_charge(&class_quota[class], used, false);
	t = budget_tenant(tctx, class);
	if (t && t <= MAX_TENANTS)
		quota_charge(&tenant_quota[t - 1], used, false);
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
 * left of the class's and the tenant's quota (their `all` buckets):
 * running comes first, so a hold never makes budget_denial() refuse a
 * wakeup.
 */
__hidden bool budget_hold_fits(u32 class, u32 t, u64 ns, u64 now)
{
	if (class >= NR_CLASSES || !hold_room(&class_quota[class], class_quota_ns[class], ns, now))
		return false;
	return !t || t > MAX_TENANTS ||
	       hold_room(&tenant_quota[t - 1], tenant_quota_ns[t - 1], ns, now);
}

/* @class's tasks, of tenant @t (index + 1, 0: none), had a CPU held idle for @ns. */
__hidden void budget_charge_hold(u32 class, u32 t, u64 ns)
{
	if (class >= NR_CLASSES)
		return;
	quota_charge(&class_quota[class], ns, true);
	if (t && t <= MAX_TENANTS)
		quota_charge(&tenant_quota[t - 1], ns, true);
}
