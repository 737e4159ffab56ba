/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Express placement: where an express task's wakeup lands.
 *
 * With express.irq_shield, device IRQs are steered off a few CPUs
 * (src/irq_shield.rs) and steps 1-3 look at those shielded CPUs first
 * (step 0); without it, step 0 is skipped.
 *
 * Only tasks of an enabled express class with tokens get here (budget.bpf.c).
 * A CPU is *good* if the task may run there, it is IRQ-quiet, not in a
 * deep idle state and, with express.avoid_slow_idle, not slow to start
 * from idle lately (cpu_quality.bpf.c). Order of preference:
 *   1. the previous CPU, if idle and good (warm caches);
 *   2. an idle good CPU in the same LLC;
 *   3. any idle good CPU;
 *   4. preempt a normal task on a quiet CPU (the waker's CPU on a
 *      synchronous wakeup, else the previous CPU, then the same LLC), never
 *      another express task;
 *   5. with no quiet CPU free, steps 1-4 again, IRQ heat and idle depth
 *      notwithstanding (unless express_quiet_only);
 *   6. with every CPU busy with express work, queue behind it on the CPU
 *      with the shortest local queue (unless express_quiet_only); a
 *      task pinned to one CPU (express_lane_enqueue()) queues behind the
 *      express work on it.
 * An express dispatch claims its CPU until its task runs there: step 4
 * passes over a claimed CPU.
 * Steps 0-3 pass over a CPU held for another express task (hold.bpf.c);
 * step 5 may take it, as it takes a hot one.
 * The task is dispatched directly to that CPU's local queue: express
 * wakeups never wait for the userspace round trip. With nowhere to go
 * (express_quiet_only) it takes the fair path.
 *
 * With the shield, tasks that submit block I/O or send network packets
 * are also kept off the shielded CPUs an express task is using
 * (io_task(), below): the IRQs of their completions, and the softirq
 * work of a loopback or veth receive, are what the shield cannot move.
 */
#include "express.bpf.h"

/*
 * classes.<class>.enabled, indexed by enum task_class: a task of a
 * disabled class is an ordinary task. [CLASS_NORMAL] is never read.
 */
KNOB bool class_enabled[NR_CLASSES];

/*
 * express.slice_us, in ns: the slice of an express dispatch, and of each
 * further slice it keeps the CPU for (express_lane_keep()). 100 us to
 * 100 ms; 2 ms by default.
 */
KNOB u64 express_slice_ns = 2 * NSEC_PER_MSEC;

/* May an express wakeup preempt a normal task when no idle CPU is good? */
KNOB bool express_preempt = true;

/*
 * Never place on an IRQ-hot or deep-idle CPU; with no quiet CPU free, take
 * the fair path. Off by default: under load the fair path queues it behind
 * ordinary tasks (milliseconds), which costs more than a hot CPU's IRQ
 * work (microseconds to hundreds of them), and a task's own traffic (a
 * loopback socket's softirqs run on the sender's CPU) can make every CPU
 * it uses IRQ-hot.
 */
KNOB bool express_quiet_only = false;

/*
 * express.irq_shield: CPUs no movable device IRQ lands on (1 = shielded),
 * and how many there are (0: no shield, step 0 skipped). Set at start
 * only: a reload does not move IRQs. A wakeup on a shielded CPU is not
 * delayed by a NIC or NVMe handler and its softirqs (microseconds to
 * milliseconds); the IRQ-hot test sees such a CPU only after the fact.
 */
KNOB u8 cpu_shielded[MAX_CPUS];
KNOB u32 nr_shielded;

/*
 * An express-class task is being placed: resolve its tenant, unless this
 * wakeup's ops.select_cpu() did (wake_ns set); on a wakeup, note when it
 * woke for the latency histogram. Ordinary tasks never get here.
 */
static void note_placement(struct task_struct *p, struct task_ctx *tctx, u32 class, bool wakeup,
			   u64 now)
{
	if (tctx->wake_ns)
		return;
	tctx->tenant = tenant_resolve(p, class);
	if (wakeup) {
		hold_note_wake(tctx, now);
		tctx->wake_ns = now;
		tctx->wake_class = class;
	}
}

/*
 * The express class @p may use now, or CLASS_NORMAL. @from_select: called
 * by ops.select_cpu(), whose verdict for this wakeup ops.enqueue() then
 * keeps (select_fair), so that a denial is checked and counted once.
 */
static u32 express_class(struct task_struct *p, struct task_ctx **tctxp, bool wakeup,
			 bool from_select)
{
	u32 class = task_class_of(p);
	struct task_ctx *tctx;
	u64 now;

	if (class == CLASS_NORMAL || class >= NR_CLASSES || !class_enabled[class])
		return CLASS_NORMAL;
	tctx = task_ctx_get(p);
	if (!tctx)
		return CLASS_NORMAL;
	if (from_select) {
		tctx->select_fair = 0;
	} else if (wakeup && tctx->select_fair) {
		/* ops.select_cpu() sent this wakeup to the fair path. */
		tctx->select_fair = 0;
		return CLASS_NORMAL;
	}
	now = bpf_ktime_get_ns();
	note_placement(p, tctx, class, wakeup, now);
	if (!budget_has_tokens(tctx, class, now)) {
		tctx->select_fair = from_select;
		return CLASS_NORMAL;
	}
	*tctxp = tctx;
	return class;
}

/* One wakeup being placed (BPF functions take at most five arguments). */
struct pick {
	u64 now;
	u64 wake_flags;
	s32 prev_cpu;
	u32 class;
	bool quiet;		  /* IRQ-quiet, shallow CPUs only (steps 1-4) */
	bool idle_any;		  /* some CPU it may use is idle: steps 0-3 may find one */
	bool shielded;		  /* shielded CPUs only (step 0) */
	enum lane_stat_idx where; /* out: the step that found the CPU */
};

/*
 * Idle, allowed and, for a quiet pick, quiet, shallow and not held for
 * another task; counts skips.
 * The shield test (an array read) goes before the two cpumask kfuncs:
 * step 0 passes over every unshielded CPU.
 */
static bool good_idle(struct task_struct *p, const struct cpumask *idle, s32 cpu,
		      const struct pick *pk)
{
	if (pk->shielded && (cpu < 0 || cpu >= MAX_CPUS || !cpu_shielded[cpu]))
		return false;
	if (!bpf_cpumask_test_cpu(cpu, idle) || !bpf_cpumask_test_cpu(cpu, p->cpus_ptr))
		return false;
	if (!pk->quiet)
		return true;
	/* Held for another express task's return (hold.bpf.c): step 5 only. */
	if (cpu_reserved(cpu, p))
		return false;
	if (cpu_irq_hot(cpu, pk->now)) {
		lane_stat_inc(pk->class, LANE_IRQ_HOT_SKIP);
		return false;
	}
	if (cpu_deep_idle(cpu)) {
		lane_stat_inc(pk->class, LANE_DEEP_IDLE_SKIP);
		return false;
	}
	if (cpu_slow_idle(cpu, pk->now)) {
		lane_stat_inc(pk->class, LANE_SLOW_IDLE_SKIP);
		return false;
	}
	return true;
}

/*
 * A CPU an express task was dispatched to is *claimed* until that task runs
 * there (express_lane_running()). Until then the CPU still shows what the
 * task is about to replace (a normal task, or nothing: a claimed idle CPU
 * is no longer idle), and a second express wakeup that picked it for step 4
 * would land in the same local queue with a preemption: one of the two
 * is cut short or waits a whole run of the other, up to express.slice_us. With
 * four launchers and two agents on 8 vCPUs under cpu4x, tens of express
 * runs per 5 s were cut short that way (docs/benchmarks.md, "Express
 * wakeups claim their CPU").
 * A claim is stale after CLAIM_NS, the most a dispatch takes to run under
 * TCG but for a handful (natively microseconds): its task ran elsewhere or
 * left.
 */
#define CLAIM_NS NSEC_PER_MSEC

/* A claim made at @at (0: none) still holds at @now. */
static bool claim_fresh(u64 at, u64 now)
{
	return at && time_before(now, at + CLAIM_NS);
}

static bool cpu_claimed(const struct cpu_ctx *cc, u64 now)
{
	return claim_fresh(cc->express_claim_ns, now);
}

/*
 * The class of the express task dispatched to @cpu that has not run there
 * yet, CLASS_NORMAL if none.
 */
__hidden u32 cpu_express_claim(s32 cpu)
{
	struct cpu_ctx *cc = cpu_ctx_of(cpu);

	/* Most fair enqueues find no claim: no clock read for them. */
	if (!cc || !cc->express_claim_ns || !cpu_claimed(cc, bpf_ktime_get_ns()))
		return CLASS_NORMAL;
	return cc->express_claim_class;
}

/*
 * Claim @cpu for an express dispatch of @class: false if another wakeup
 * has it.
 */
static bool cpu_claim(s32 cpu, u64 now, u32 class)
{
	struct cpu_ctx *cc = cpu_ctx_of(cpu);
	u64 at;

	if (!cc)
		return false;
	/* One read: the compare-and-swap below expects this very value. */
	at = cc->express_claim_ns;
	if (claim_fresh(at, now))
		return false;
	/* Two wakeups on two CPUs may pick this one at once: one wins. */
	if (__sync_val_compare_and_swap(&cc->express_claim_ns, at, now) != at)
		return false;
	/* Whose claim: fair_keep_preempted() asks. */
	cc->express_claim_class = class;
	return true;
}

/*
 * A busy CPU running a normal task (quiet, for a quiet pick), not claimed
 * by another express wakeup: preemptible.
 */
static bool preemptible(struct task_struct *p, const struct cpumask *idle, s32 cpu,
			const struct pick *pk)
{
	struct cpu_ctx *cc = cpu_ctx_of(cpu);

	/* Not one an RT task took (rt_held): it would wait for the ext server. */
	return cc && !cc->curr_express && !cc->rt_held && !cpu_claimed(cc, pk->now) &&
	       bpf_cpumask_test_cpu(cpu, p->cpus_ptr) && !bpf_cpumask_test_cpu(cpu, idle) &&
	       !(pk->quiet && cpu_irq_hot(cpu, pk->now));
}

/* Step 4's pick: @cpu is preemptible and this wakeup claims it. */
static bool take_preempt(struct task_struct *p, const struct cpumask *idle, s32 cpu,
			 const struct pick *pk)
{
	return preemptible(p, idle, cpu, pk) && cpu_claim(cpu, pk->now, pk->class);
}

/* Step 1: the previous CPU if it is idle and good, claimed. */
static bool take_prev(struct task_struct *p, const struct cpumask *idle, const struct pick *pk)
{
	return good_idle(p, idle, pk->prev_cpu, pk) &&
	       scx_bpf_test_and_clear_cpu_idle(pk->prev_cpu);
}

/* Steps 2 and 3: an idle good CPU in LLC @llc (any LLC if < 0), claimed. */
static s32 scan_idle(struct task_struct *p, const struct cpumask *idle, s64 llc,
		     const struct pick *pk)
{
	u32 nr = scx_bpf_nr_cpu_ids();
	s32 cpu;

	bpf_for(cpu, 0, nr) {
		if (cpu >= MAX_CPUS)
			break;
		if (llc >= 0 && cpu_llc_of(cpu) != llc)
			continue;
		if (good_idle(p, idle, cpu, pk) && scx_bpf_test_and_clear_cpu_idle(cpu))
			return cpu;
	}
	return -1;
}

/*
 * Step 4: a CPU to preempt. A synchronous wakeup (the waker is about to
 * sleep, as a tool server does after its reply) takes the waker's CPU: no
 * IPI to wait for, and the data just sent is in its caches. Otherwise the
 * previous CPU first, then the same LLC, then any.
 */
static s32 scan_preempt(struct task_struct *p, const struct cpumask *idle, const struct pick *pk)
{
	u32 nr = scx_bpf_nr_cpu_ids(), llc = cpu_llc_of(pk->prev_cpu);
	s32 cpu, other = -1, this_cpu = bpf_get_smp_processor_id();

	if ((pk->wake_flags & SCX_WAKE_SYNC) && take_preempt(p, idle, this_cpu, pk)) {
		lane_stat_inc(pk->class, LANE_PREEMPT_WAKER);
		return this_cpu;
	}
	if (take_preempt(p, idle, pk->prev_cpu, pk))
		return pk->prev_cpu;
	bpf_for(cpu, 0, nr) {
		if (cpu >= MAX_CPUS)
			break;
		if (!preemptible(p, idle, cpu, pk))
			continue;
		if (cpu_llc_of(cpu) == llc && cpu_claim(cpu, pk->now, pk->class))
			return cpu;
		if (other < 0)
			other = cpu;
	}
	return other >= 0 && cpu_claim(other, pk->now, pk->class) ? other : -1;
}

/*
 * Step 0: steps 1 and 3 over the shielded CPUs only (the previous CPU,
 * then any; shielded CPUs are few, so no LLC pass). One more scan of the
 * CPUs per quiet express wakeup with a shield, none without.
 */
static s32 pick_shielded(struct task_struct *p, const struct cpumask *idle, struct pick *pk)
{
	s32 cpu = -1;

	if (!nr_shielded || !pk->quiet)
		return -1;
	pk->shielded = true;
	pk->where = LANE_PREV;
	if (take_prev(p, idle, pk)) {
		cpu = pk->prev_cpu;
	} else {
		pk->where = LANE_ANY;
		cpu = scan_idle(p, idle, -1, pk);
	}
	pk->shielded = false;
	return cpu;
}

/*
 * ---- Block and network I/O off the shielded CPUs (express.irq_shield) ----
 *
 * A multi-queue block device (NVMe) has one queue per CPU, and each
 * queue's completion IRQ is managed: the kernel keeps it on that CPU, so
 * src/irq_shield.rs cannot move it. An I/O completes on the queue of the
 * CPU that submitted it. The only way to keep those IRQs, and the
 * submitter itself, off a shielded CPU is to run the tasks that submit
 * block I/O elsewhere. Under TCG, fio's random writes sharing the decode
 * stand-in's CPU cost it over half of its launches, IRQs about a tenth of
 * its CPU (docs/benchmarks.md, "Disk noise"); on hardware an NVMe
 * completion costs microseconds, a few per cent of a CPU at 100k IOPS.
 *
 * Only while an express task uses the CPU (running, or stopped less than
 * EXPRESS_CPU_NS ago): a shield with no express task on it takes I/O
 * tasks like any CPU. Only tasks allowed on more CPUs than are shielded,
 * so each has an unshielded CPU to go to; a CPU-pinned task is never kept
 * off. The fair path applies it at the three points where a task gets a
 * CPU: the wakeup (pick_cpu_avoiding()), the idle kick (fair_kick_idle()) and
 * the pick from the shared DSQ (fair_pick()).
 */

/* A task that submitted block I/O or sent a packet this long ago still counts as one. */
#define IO_TASK_NS     (100 * NSEC_PER_MSEC)
/* A shielded CPU counts as in use this long after its last express run. */
#define EXPRESS_CPU_NS (100 * NSEC_PER_MSEC)

/*
 * Every bio submitted, in the submitter's context (where its queue, and
 * so its completion IRQ's CPU, is chosen; a bio resubmitted from an IRQ
 * marks the task it interrupted, for at most IO_TASK_NS). Not loaded
 * without a shield (src/scheduler.rs): then it costs nothing.
 */
SEC("tp_btf/block_bio_queue")
int BPF_PROG(express_bio_queue, struct bio *bio)
{
	struct task_ctx *tctx;

	if (!nr_shielded)
		return 0;
	tctx = task_ctx_get(bpf_get_current_task_btf());
	if (tctx)
		tctx->io_submit_ns = bpf_ktime_get_ns();
	return 0;
}

/*
 * Every packet queued to a network device, in the sender's context. A
 * loopback or veth transmit (containers talking on one host) runs its
 * receiver's protocol work in softirq on the sender's CPU at once
 * (netif_rx() to the backlog, processed at the sender's
 * local_bh_enable()), so a heavy sender brings that work to its CPU as a
 * block submitter brings its completions: in the bench's loopback iperf3
 * under TCG, on the order of 100 µs of softirq per agent step on a CPU
 * the agent shares with it (docs/benchmarks.md, "The socket agent under
 * net at 2 vCPUs against its isolation control"). So a sender counts as
 * an I/O task too. Express tasks are not stamped: a tool server replying
 * over TCP loopback must not be kept off the shield when it falls back to
 * the fair path. A packet forwarded from a NIC's softirq stamps the task
 * it interrupted, for at most IO_TASK_NS after the last one. Cost: a
 * clock read per skb (with GSO up to 64 KiB each: about 20k a second at
 * 10 Gbit/s), and a stamp written at most once a millisecond. Not loaded
 * without a shield.
 */
SEC("tp_btf/net_dev_queue")
int BPF_PROG(express_net_queue, struct sk_buff *skb)
{
	struct task_struct *p;
	struct task_ctx *tctx;
	u64 now;

	if (!nr_shielded)
		return 0;
	p = bpf_get_current_task_btf();
	tctx = task_ctx_get(p);
	if (!tctx)
		return 0;
	now = bpf_ktime_get_ns();
	if (now - tctx->io_submit_ns < NSEC_PER_MSEC || task_class_of(p) != CLASS_NORMAL)
		return 0;
	tctx->io_submit_ns = now;
	return 0;
}

/*
 * @p submitted block I/O or sent packets lately and may run on an
 * unshielded CPU. Without a shield, one load and no clock read: the fair
 * path's hot path calls it.
 */
__hidden bool io_task(struct task_struct *p)
{
	struct task_ctx *tctx;

	if (!nr_shielded || p->nr_cpus_allowed <= nr_shielded)
		return false;
	tctx = task_ctx_get(p);
	return tctx && tctx->io_submit_ns && bpf_ktime_get_ns() - tctx->io_submit_ns < IO_TASK_NS;
}

/* @cpu is shielded and an express task uses it: no I/O task goes there. */
__hidden bool io_guarded(s32 cpu)
{
	struct cpu_ctx *cc;

	if (!nr_shielded || cpu < 0 || cpu >= MAX_CPUS || !cpu_shielded[cpu])
		return false;
	cc = cpu_ctx_of(cpu);
	return cc &&
	       (cc->curr_express || bpf_ktime_get_ns() - cc->express_stop_ns < EXPRESS_CPU_NS);
}

/*
 * A CPU for @p's wakeup or idle kick off the CPUs it must avoid: held ones
 * (hold.bpf.c) and, for an I/O task (@io), guarded ones. @prev_cpu, then
 * any, idle ones first (claimed: *is_idle set), else the first allowed
 * one for its enqueue (fair_enqueue() then queues it on the shared DSQ).
 * One pass over the CPUs, instead of the kernel's idle picker, only while
 * a CPU is held or for an I/O task. An I/O task's placement whose
 * @prev_cpu is guarded counts in io_kept_off.
 */
__hidden s32 pick_cpu_avoiding(struct task_struct *p, s32 prev_cpu, bool io, bool *is_idle)
{
	u32 nr = scx_bpf_nr_cpu_ids();
	s32 cpu, busy = -1;

	*is_idle = false;
	if (io && io_guarded(prev_cpu))
		stat_inc(STAT_IO_KEPT_OFF);
	else if (!cpu_held(prev_cpu, p) && bpf_cpumask_test_cpu(prev_cpu, p->cpus_ptr)) {
		if (scx_bpf_test_and_clear_cpu_idle(prev_cpu)) {
			*is_idle = true;
			return prev_cpu;
		}
		busy = prev_cpu;
	}
	bpf_for(cpu, 0, nr) {
		if (cpu >= MAX_CPUS)
			break;
		if ((io && io_guarded(cpu)) || cpu_held(cpu, p) ||
		    !bpf_cpumask_test_cpu(cpu, p->cpus_ptr))
			continue;
		if (scx_bpf_test_and_clear_cpu_idle(cpu)) {
			*is_idle = true;
			return cpu;
		}
		if (busy < 0)
			busy = cpu;
	}
	return busy >= 0 ? busy : prev_cpu;
}

/* Steps 0-3: an idle CPU, claimed, or -1; sets pk->where. */
static s32 pick_idle(struct task_struct *p, const struct cpumask *idle, struct pick *pk)
{
	s32 cpu;

	if ((cpu = pick_shielded(p, idle, pk)) >= 0)
		return cpu;
	pk->where = LANE_PREV;
	if (take_prev(p, idle, pk))
		return pk->prev_cpu;
	pk->where = LANE_LLC;
	if ((cpu = scan_idle(p, idle, cpu_llc_of(pk->prev_cpu), pk)) >= 0)
		return cpu;
	pk->where = LANE_ANY;
	return scan_idle(p, idle, -1, pk);
}

/* Steps 0-4 over the CPUs @pk allows: a CPU, or -1; sets pk->where. */
static s32 pick_cpu(struct task_struct *p, const struct cpumask *idle, struct pick *pk)
{
	s32 cpu;

	/*
	 * Steps 0-3 pass over the CPUs up to three times, two kfunc tests per
	 * CPU, on the wakeup's own path: a few hundred ns natively, growing
	 * with the CPUs, and at 2 vCPUs under TCG a third of the pick's cost
	 * (docs/benchmarks.md, "What a wakeup costs in BPF"). On a saturated
	 * machine, where express wakeups preempt, no CPU is idle, and one
	 * word-wide test (pk->idle_any, made once for steps 1-5) says so.
	 */
	if (pk->idle_any && (cpu = pick_idle(p, idle, pk)) >= 0)
		return cpu;
	pk->where = LANE_PREEMPT;
	if (express_preempt)
		return scan_preempt(p, idle, pk);
	return -1;
}

/*
 * Step 6: no CPU is idle or preemptible: every one @p may use runs or was
 * claimed by express work. The CPU with the shortest local queue (the
 * previous CPU if its queue is empty), where @p runs after that work,
 * within a slice or two, and before any fair-path task. The fair path
 * would make it wait behind the hogs there: at 2 vCPUs with a launcher,
 * two agents and their tool servers under cpu4x, the agents' wakeups that
 * fell back waited 8-64 ms. Tokens and class caps bound how many get here.
 */
static s32 pick_behind(struct task_struct *p, s32 prev_cpu)
{
	u32 nr = scx_bpf_nr_cpu_ids();
	s32 cpu, best = -1;
	u64 best_nr = ~0ULL, q;

	/*
	 * Not behind an RT task (cpu_rt_held()): an RT-held CPU's local DSQ
	 * is empty (ops.cpu_release() emptied it), and a task queued there
	 * would wait for the ext server's 50 ms a second.
	 */
	if (bpf_cpumask_test_cpu(prev_cpu, p->cpus_ptr) && !cpu_rt_held(prev_cpu) &&
	    !scx_bpf_dsq_nr_queued(SCX_DSQ_LOCAL_ON | prev_cpu))
		return prev_cpu;
	bpf_for(cpu, 0, nr) {
		if (cpu >= MAX_CPUS)
			break;
		if (!bpf_cpumask_test_cpu(cpu, p->cpus_ptr) || cpu_rt_held(cpu))
			continue;
		q = scx_bpf_dsq_nr_queued(SCX_DSQ_LOCAL_ON | cpu);
		if (q < best_nr) {
			best = cpu;
			best_nr = q;
		}
	}
	return best;
}

/*
 * Dispatch @p now, for @class, to the local queue of @cpu (the CPU that
 * ops.select_cpu() returns, or in ops.enqueue() the task's own). What
 * that CPU has run and spent in IRQs so far is noted for
 * express_lane_running()'s account of a slow start.
 */
static void dispatch_express(struct task_struct *p, struct task_ctx *tctx, u32 class, s32 cpu,
			     u64 enq_flags)
{
	struct cpu_ctx *cc = cpu_ctx_of(cpu);

	tctx->express_queued = 1;
	tctx->express_queued_ns = bpf_ktime_get_ns();
	tctx->queued_cpu = cpu;
	tctx->queued_stops = cc ? cc->stops : 0;
	tctx->queued_irq_ns = cc ? cc->hardirq_total_ns + cc->softirq_total_ns : 0;
	tctx->lane_class = class;
	tctx->fair_dispatched = 0;
	scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, express_slice_ns, enq_flags);
	tenant_stat_inc(budget_tenant(tctx, class), TENANT_EXPRESS);
}

__hidden s32 express_lane_select_cpu(struct task_struct *p, s32 prev_cpu, u64 wake_flags)
{
	struct task_ctx *tctx = NULL;
	const struct cpumask *idle;
	u32 class = express_class(p, &tctx, true, true);
	u64 now = bpf_ktime_get_ns();
	struct pick pk;
	s32 cpu;

	if (class == CLASS_NORMAL || !tctx)
		return EXPRESS_NONE;
	pk = (struct pick){ .now = now,
			    .wake_flags = wake_flags,
			    .prev_cpu = prev_cpu,
			    .class = class,
			    .quiet = true };

	idle = scx_bpf_get_idle_cpumask();
	pk.idle_any = bpf_cpumask_intersects(idle, p->cpus_ptr);
	cpu = pick_cpu(p, idle, &pk);
	if (cpu < 0 && !express_quiet_only) {
		/* Step 5: no quiet CPU free; a hot or deep one beats the fair path. */
		pk.quiet = false;
		cpu = pick_cpu(p, idle, &pk);
		if (cpu >= 0)
			lane_stat_inc(class, LANE_NOT_QUIET);
	}
	scx_bpf_put_idle_cpumask(idle);
	/* An idle pick is exclusive (its idle bit): mark it claimed too. */
	if (cpu >= 0 && pk.where != LANE_PREEMPT) {
		struct cpu_ctx *cc = cpu_ctx_of(cpu);

		if (cc) {
			cc->express_claim_ns = now;
			cc->express_claim_class = class;
		}
	}

	if (cpu < 0 && !express_quiet_only && (cpu = pick_behind(p, prev_cpu)) >= 0) {
		/* No kick: the express work there yields at its slice's end. */
		dispatch_express(p, tctx, class, cpu, 0);
		lane_stat_inc(class, LANE_BEHIND);
		return cpu;
	}
	if (cpu < 0) {
		/* ops.enqueue() must not take it back into the lane. */
		tctx->select_fair = 1;
		lane_stat_inc(class, LANE_FALLBACK);
		return EXPRESS_FAIR;
	}
	dispatch_express(p, tctx, class, cpu, pk.where == LANE_PREEMPT ? SCX_ENQ_PREEMPT : 0);
	lane_stat_inc(class, pk.where);
	return cpu;
}

__hidden bool express_lane_enqueue(struct task_struct *p, u64 enq_flags)
{
	struct task_ctx *tctx = NULL;
	bool wakeup = enq_flags & SCX_ENQ_WAKEUP;
	u32 class = express_class(p, &tctx, wakeup, false);
	struct cpu_ctx *cc;
	u64 flags = SCX_ENQ_HEAD;
	s32 cpu;

	if (class == CLASS_NORMAL || !tctx)
		return false;

	/*
	 * No ops.select_cpu() on this path: a slice ran out, or a wakeup that
	 * skipped it (a pinned or migration-disabled task). The task stays on
	 * its CPU, ahead of fair-path work. A wakeup also preempts the normal
	 * task running there, as step 4 of the placement would; without that
	 * it would wait for the end of that task's slice (up to a tick: 4 ms
	 * at HZ=250).
	 */
	cpu = scx_bpf_task_cpu(p);
	cc = cpu_ctx_of(cpu);
	if (!cc) {
		lane_stat_inc(class, wakeup ? LANE_FALLBACK : LANE_SLICE_FALLBACK);
		return false;
	}
	if (cc->curr_express || !cpu_claim(cpu, bpf_ktime_get_ns(), class)) {
		/*
		 * Another express task runs or was dispatched here. A task
		 * pinned to this CPU queues behind it, as step 6 does: the
		 * fair path would queue it behind the hogs too (with a
		 * launcher and two agents pinned to one CPU under cpu4x, 93%
		 * of the agents' wakeups did; VM test 57). Any other task
		 * (a slice's end on a CPU just claimed) takes the fair path,
		 * where any CPU may take it; a local queue would tie it to
		 * this one. Queueing those behind too measured the same,
		 * within run-to-run spread (docs/benchmarks.md, "Pinned
		 * express tasks queue behind too").
		 */
		if (express_quiet_only || p->nr_cpus_allowed > 1) {
			lane_stat_inc(class, wakeup ? LANE_FALLBACK : LANE_SLICE_FALLBACK);
			return false;
		}
		dispatch_express(p, tctx, class, cpu, enq_flags);
		lane_stat_inc(class, LANE_BEHIND);
		return true;
	}
	if (wakeup && express_preempt)
		flags |= SCX_ENQ_PREEMPT;
	/* A slice ran out and express work waits here (step 6): after it. */
	if (!wakeup && scx_bpf_dsq_nr_queued(SCX_DSQ_LOCAL_ON | cpu))
		flags = 0;
	dispatch_express(p, tctx, class, cpu, enq_flags | flags);
	lane_stat_inc(class, wakeup ? LANE_PREEMPT : LANE_REQUEUE);
	return true;
}

/*
 * ops.dispatch() on a CPU whose express task @prev used up its slice and is
 * still runnable: give it another slice if its class and budget allow.
 */
__hidden bool express_lane_keep(struct task_struct *prev)
{
	struct task_ctx *tctx;
	u32 class;

	if (!prev || !(prev->scx.flags & SCX_TASK_QUEUED))
		return false;
	tctx = task_ctx_get(prev);
	if (!tctx || !tctx->express_since_ns)
		return false;
	class = tctx->lane_class;
	if (class >= NR_CLASSES || !class_enabled[class] || task_class_of(prev) != class ||
	    !budget_extend(tctx, class, bpf_ktime_get_ns()))
		return false;
	scx_bpf_task_set_slice(prev, express_slice_ns);
	lane_stat_inc(class, LANE_REQUEUE);
	return true;
}

/*
 * @tctx's wakeup as an express-class task ends: it runs now, by whichever
 * lane. Count the wait for its class and tenant.
 */
static void note_wakeup_latency(struct task_ctx *tctx, u64 now)
{
	u32 class = tctx->wake_class;

	if (time_after(now, tctx->wake_ns))
		lat_record(class, budget_tenant(tctx, class), now - tctx->wake_ns);
	tctx->wake_ns = 0;
}

/*
 * An express dispatch waited @wait (over 1 ms) to run on @cc's CPU, the
 * one it was sent to. Waits that long are rare (a few per 10,000
 * dispatches on an idle machine) and the fix depends on why, so say
 * which: IRQs and softirqs on that CPU took half of it or more (see
 * irq_hot_pct and express.irq_shield); other tasks ran there first (the
 * express work it queued behind, an RT task, a kthread); or the CPU ran
 * nothing at all: it was slow to start running, coming out of a deep
 * idle state (express.pm_qos_resume_latency_us) or, in a VM, a vCPU the
 * host did not run. A task found running elsewhere is not counted.
 */
static void slow_start(const struct task_ctx *tctx, struct cpu_ctx *cc, u64 wait)
{
	u64 irq;

	if (!cc || cpu_ctx_of(tctx->queued_cpu) != cc)
		return;
	irq = cc->hardirq_total_ns + cc->softirq_total_ns - tctx->queued_irq_ns;
	if (2 * irq >= wait)
		lane_stat_inc(tctx->lane_class, LANE_SLOW_IRQ);
	/* A run going on at the dispatch, or one started since, is one not ended then. */
	else if (cc->runs != tctx->queued_stops)
		lane_stat_inc(tctx->lane_class, LANE_SLOW_BEHIND);
	else {
		lane_stat_inc(tctx->lane_class, LANE_SLOW_IDLE);
		cc->slow_idle_ns = bpf_ktime_get_ns();
	}
}

__hidden void express_lane_running(struct task_ctx *tctx, struct cpu_ctx *cc)
{
	bool express = tctx && tctx->express_queued;
	u64 now, wait;

	if (cc) {
		cc->curr_express = express;
		if (express) {
			cc->express_runs++;
			/* curr_express guards the CPU from here on. */
			cc->express_claim_ns = 0;
		}
	}
	if (tctx && tctx->wake_ns)
		note_wakeup_latency(tctx, bpf_ktime_get_ns());
	if (!express)
		return;
	now = bpf_ktime_get_ns();
	tctx->express_queued = 0;
	tctx->express_since_ns = now;
	/* How long the dispatch took to take effect: the lane's own latency. */
	if (time_after(now, tctx->express_queued_ns)) {
		wait = now - tctx->express_queued_ns;
		lane_stat_add(tctx->lane_class, LANE_WAIT_NS, wait);
		if (wait > NSEC_PER_MSEC) {
			lane_stat_inc(tctx->lane_class, LANE_WAIT_OVER_1MS);
			slow_start(tctx, cc, wait);
		}
	}
}

/*
 * An express run stops. If the task is still runnable it lost its CPU:
 * its slice ran out (another task was queued there first) or, before
 * that, something took the slice away. The policy never preempts an
 * express task for a normal one, so cut_short stays near zero.
 */
__hidden void express_lane_stopping(struct task_struct *p, bool runnable, struct task_ctx *tctx,
				    struct cpu_ctx *cc)
{
	u64 now = bpf_ktime_get_ns();

	if (cc && cc->curr_express && tctx && runnable) {
		lane_stat_inc(tctx->lane_class, LANE_LOST_CPU);
		if (!p->scx.slice && tctx->express_since_ns &&
		    now - tctx->express_since_ns < express_slice_ns)
			lane_stat_inc(tctx->lane_class, LANE_CUT_SHORT);
	}
	if (cc) {
		if (cc->curr_express)
			cc->express_stop_ns = now;
		cc->curr_express = 0;
	}
	if (tctx)
		budget_charge(tctx, now);
}
