/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Hold: the CPU an express task just left stays idle for its return.
 *
 * An express wakeup that finds an idle CPU starts there at once. On a
 * loaded machine none is idle, and the wakeup preempts a normal task: an
 * IPI to a busy CPU, that task's ops.stopping() and ops.enqueue() on the
 * way, then a switch of address space. Natively a few us; under TCG about
 * 100-200 us more than an idle CPU, which put the agent stand-in's cpu4x
 * p99 at 1.2-1.4x its clean p99 (docs/benchmarks.md, "What a wakeup
 * costs in BPF"). A task whose sleeps are short and regular (an agent
 * waiting on a local tool, a launcher waiting on a short kernel) comes
 * back to its CPU before anything else needs it most of the time, so:
 *
 * When an express task of a class with hold_us > 0 goes to sleep on a
 * machine with no idle CPU it may use, and its recent sleeps averaged
 * under hold_us, its CPU is *held* for its return: the fair path places no
 * work there (its wakeup placement, its idle kick and its pick from the
 * shared DSQ pass over a held CPU), nor do other express tasks' steps 0-3
 * (placement.bpf.c), so the task's wakeup finds it idle: no IPI to a busy
 * CPU and no switch-out of another task on the wakeup's path. (Fair work
 * may run there before the window opens, below, so the caches and the
 * address space are those of whatever ran last.) The hold ends when a
 * task that could run elsewhere starts on the CPU (the task itself,
 * another express task) or when it expires; a timer pinned to the CPU
 * then kicks it so queued work runs (a hold that ends first moves its
 * timer out of the way: hold_timer_park()). Work that can run only there
 * (a per-CPU kthread) runs inside the hold and leaves it in place.
 *
 * A hold is a window, not the whole sleep. A task that sleeps 2 ms with a
 * spread of 0.1 ms will not be back in the first 1.5 ms, so fair work runs
 * on its CPU until the window opens at the earliest return expected (the
 * average less twice the mean deviation and an eighth of the average, the
 * margin for clearing the CPU: a few us natively, ~100 us under TCG). The
 * timer then preempts the fair task running there (ops.flags has
 * SCX_OPS_ENQ_LAST, so the kernel does not simply keep it: main.bpf.c's
 * ops.enqueue() sends it to the shared DSQ). The preemption the wakeup
 * would have paid happens before it, when no one waits. The window closes
 * at twice the average (at most hold_us). An irregular sleeper, whose
 * window would open at once, earns no hold (hold_start()). Measured in
 * docs/benchmarks.md, "Holding the CPU for an express task's return".
 *
 * A class with hold_whole holds each sleep from its start instead, an
 * irregular sleeper's too: nothing else runs on the CPU while its task
 * sleeps, so it comes back to its own caches, TLB and address space (a
 * switch from another task's costs ~100 us under TCG, an emptied software
 * TLB; natively us plus cache refills), at the price of the whole sleep,
 * within the same quota. At 8 vCPUs under cpu4x windows left the agent
 * stand-in's typical step well above its clean time, whole sleeps close
 * to it (docs/benchmarks.md, "Whole-sleep holds").
 *
 * The price is the held window's idle time, taken from every other task. It
 * counts against the class quota (classes.*.max_share, budget.bpf.c), and
 * for a tenant's task against the tenant's too, with a lower priority than
 * running: a hold starts only if what running time and earlier holds
 * left of the quota covers it, while wakeups are denied only on running
 * time (the quota's two buckets). So holds never take the lane from the
 * wakeups they serve, and running plus holding stays within max_share of
 * the machine (plus at most one hold per CPU). One CPU is never held
 * (hold_max_cpus), whatever max_share allows.
 * Not the task's token bucket: a hold is not CPU time the task used.
 *
 * A hold serves its task's return, so it never delays what the task waits
 * on: the task it last woke synchronously (its tool server, the other end
 * of its pipe), if on the fair path, may run on the held CPU
 * (held_for_other()), and no hold starts while it waits for a CPU
 * (partner_waiting()). (An express partner takes the lane, and express
 * tasks keep off each other's holds.) Without this, an agent whose tool
 * server is not in its class held one CPU idle while the server queued
 * for the others, and at 2 vCPUs beside network load made a fifth fewer
 * steps a second than under EEVDF (docs/benchmarks.md, "An unmarked tool
 * server pays for the agent's holds").
 *
 * Only with fair.mode = "bpf": in userspace mode userspace places fair
 * tasks and knows nothing of holds (main.bpf.c starts none then).
 */
#include "express.bpf.h"

/*
 * classes.<class>.hold_us, in ns: the longest hold after a sleep of that
 * class's tasks, and the longest average sleep that earns one. 0 (off) to
 * 20 ms. A hold as long as the sleep it covers costs that CPU's time
 * while the task sleeps: for a task that sleeps 2 ms and runs 1 ms, two
 * thirds of a CPU, which is why the class quota bounds it.
 */
KNOB u64 class_hold_ns[NR_CLASSES];

/*
 * classes.<class>.hold_whole: hold each sleep whole, irregular sleepers'
 * too (header comment). Each hold costs its whole sleep, so the class
 * quota binds sooner.
 */
KNOB bool class_hold_whole[NR_CLASSES];

/* Held CPUs now (expired ones included until their timer ends them). */
volatile u32 nr_holds;

/*
 * The most CPUs held at once: every CPU but one (userspace sets it from
 * the topology; 0 on one CPU: no holds). One CPU always stays for
 * everything else, whatever max_share allows: on a 2-CPU machine with
 * the agent class's max_share at 1.0, an agent loop and its tool server
 * held both CPUs, a `scx_express ps` beside them took seconds, and the
 * starvation guard (fair.bpf.c, section 7) was all that ran the rest.
 */
KNOB u32 hold_max_cpus;

/* One timer per CPU, pinned to it: ends that CPU's hold when it expires. */
struct hold_timer {
	struct bpf_timer timer;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_CPUS);
	__type(key, u32);
	__type(value, struct hold_timer);
} hold_timers SEC(".maps");

#ifndef CLOCK_MONOTONIC
#define CLOCK_MONOTONIC 1
#endif

/*
 * A wakeup of express-class @tctx at @now (placement.bpf.c): how long it
 * slept goes into its average, which decides whether its next sleep earns
 * a hold, and into its mean deviation, which decides when the hold's
 * window opens. Weight 1/4 for the newest: a few sleeps of a new rhythm
 * count.
 */
__hidden void hold_note_wake(struct task_ctx *tctx, u64 now)
{
	u64 slept, avg = tctx->sleep_avg_ns, dev;

	if (!tctx->sleep_start_ns || time_before(now, tctx->sleep_start_ns))
		return;
	slept = now - tctx->sleep_start_ns;
	tctx->sleep_start_ns = 0;
	if (!avg) {
		tctx->sleep_avg_ns = slept;
		return;
	}
	/*
	 * A sleep counts up to twice the average: past that it is past any
	 * hold's end, so it says only "longer than a hold", and at full
	 * length one long sleep would move the average for many sleeps. A
	 * 2 ms sleeper whose one sleep took 20 ms (one slow tool call among
	 * local ones, a host preemption under TCG) averaged 6.5 ms after it,
	 * over hold_us = 5 ms, and its next four sleeps got no hold
	 * (hold_long): each of their wakeups preempted a normal task (VM test
	 * 46 checks it with a slow call in every ten; measured in
	 * docs/benchmarks.md, "Issue 18 at 7ec1fee"). Capped, the average
	 * grows at most 1.25x a sleep, so a task whose sleeps really lengthen
	 * past hold_us still stops earning holds within about four sleeps
	 * (each hold then expires, within the class quota). The deviation is
	 * capped with it: one long sleep would otherwise make a steady sleeper
	 * look irregular (hold_start()) for the next ten sleeps.
	 */
	if (slept > 2 * avg)
		slept = 2 * avg;
	dev = slept > avg ? slept - avg : avg - slept;
	tctx->sleep_avg_ns = avg - avg / 4 + slept / 4;
	tctx->sleep_dev_ns = tctx->sleep_dev_ns - tctx->sleep_dev_ns / 4 + dev / 4;
}

/* End @cc's CPU's hold at @now; @back: its task came back to it. */
static void hold_end(struct cpu_ctx *cc, u64 now, bool back)
{
	u64 until = cc->hold_until_ns, held;
	u32 class = cc->hold_class;

	if (!until)
		return;
	cc->hold_until_ns = 0;
	__sync_fetch_and_sub(&nr_holds, 1);
	/* Held: from the window's opening to its end (nothing before it). */
	held = time_before(now, until) ? now : until;
	held = time_before(cc->hold_start_ns, held) ? held - cc->hold_start_ns : 0;
	budget_charge_hold(class, cc->hold_tenant, held);
	lane_stat_add(class, LANE_HELD_NS, held);
	if (back && held && time_before_eq(now, until))
		lane_stat_inc(class, LANE_HOLD_BACK);
	else if (back && !held)
		lane_stat_inc(class, LANE_HOLD_EARLY);
}

/* The hold's timer: at its window's opening, then at its end. */
static int hold_timer_fired(void *map, int *key, struct hold_timer *t)
{
	s32 cpu = *key;
	struct cpu_ctx *cc = cpu_ctx_of(cpu);
	u64 now = bpf_ktime_get_ns(), until;

	if (!cc || !(until = cc->hold_until_ns))
		return 0;
	if (time_before(now, cc->hold_start_ns)) {
		bpf_timer_start(&t->timer, cc->hold_start_ns - now, BPF_F_TIMER_CPU_PIN);
		return 0;
	}
	if (time_before(now, until)) {
		/*
		 * The window opens (the timer fires once inside it: hold_start()
		 * armed it for an opening later than the sleep's start, and it
		 * re-arms for the end): a fair task running here leaves now,
		 * and the fair path (fair_pick()) takes nothing back here. Not
		 * one that can run only here: it would come straight back.
		 */
		if (cc->curr_fair && !cc->hold_curr_pinned)
			scx_bpf_kick_cpu(cpu, SCX_KICK_PREEMPT);
		bpf_timer_start(&t->timer, until - now, BPF_F_TIMER_CPU_PIN);
		return 0;
	}
	hold_end(cc, now, false);
	/* Queued fair work may have passed this CPU over: let it look. */
	scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
	return 0;
}

/*
 * A hold that ends before its timer does (its task came back, or another
 * took the CPU) has no use for the timer: it is moved this far out, and
 * the next hold on the CPU re-arms it. Left armed, it fired for nothing at
 * the hold's end, often inside the task's next run: a tool server's hold
 * ends about 2x its average sleep after it began, which is where its reply
 * is being written. Moved, not cancelled: bpf_timer_cancel() waits for a
 * running callback, which ops.running() (the rq lock held) must never do;
 * a re-arm never waits.
 */
#define HOLD_TIMER_PARK_NS (1000 * NSEC_PER_MSEC)

static void hold_timer_park(u32 cpu)
{
	struct hold_timer *t = bpf_map_lookup_elem(&hold_timers, &cpu);

	if (t)
		bpf_timer_start(&t->timer, HOLD_TIMER_PARK_NS, BPF_F_TIMER_CPU_PIN);
}

/* From ops.init(): the timers, each calling hold_timer_fired(). */
__hidden s32 hold_init(void)
{
	u32 nr = scx_bpf_nr_cpu_ids(), cpu;
	struct hold_timer *t;
	s32 err;

	bpf_for(cpu, 0, nr) {
		if (cpu >= MAX_CPUS)
			break;
		t = bpf_map_lookup_elem(&hold_timers, &cpu);
		if (!t)
			return -ENOENT;
		err = bpf_timer_init(&t->timer, &hold_timers, CLOCK_MONOTONIC);
		if (err)
			return err;
		err = bpf_timer_set_callback(&t->timer, hold_timer_fired);
		if (err)
			return err;
	}
	return 0;
}

/* May @class's tasks hold their CPU when they sleep (hold_us > 0)? */
__hidden bool class_holds(u32 class)
{
	return class < NR_CLASSES && class_hold_ns[class];
}

/* Is any CPU held? One load: the fair path's hot path asks. */
__hidden bool hold_any(void)
{
	return nr_holds;
}

/*
 * Is @cpu held for a task other than @p: its window open (@open), or
 * opening later (the CPU is that task's, but fair work may use it until
 * then)? The fair path asks the first, express placement the second, so
 * that express tasks keep off each other's CPUs for the whole sleep.
 */
static bool held_for_other(s32 cpu, struct task_struct *p, bool open)
{
	struct cpu_ctx *cc;
	u64 now;

	if (!nr_holds)
		return false;
	cc = cpu_ctx_of(cpu);
	if (!cc || !cc->hold_until_ns || (p && p->pid == cc->hold_pid))
		return false;
	/* Lent to what its task waits on, on the fair path (open: the fair path asks). */
	if (open && p && p->pid == cc->hold_partner)
		return false;
	now = bpf_ktime_get_ns();
	return (!open || !time_before(now, cc->hold_start_ns)) &&
	       time_before(now, cc->hold_until_ns);
}

/* Is @cpu held for a task other than @p, its window open? */
__hidden bool cpu_held(s32 cpu, struct task_struct *p)
{
	return held_for_other(cpu, p, true);
}

/* Is @cpu held for a task other than @p, now or later in its sleep? */
__hidden bool cpu_reserved(s32 cpu, struct task_struct *p)
{
	return held_for_other(cpu, p, false);
}

/*
 * Is a CPU @p may use idle, not counting held ones (another task's hold
 * is not a free CPU)? One cpumask test without holds, a pass over the
 * CPUs with some.
 */
static bool idle_unheld(struct task_struct *p, const struct cpumask *idle)
{
	u32 nr = scx_bpf_nr_cpu_ids();
	s32 cpu;

	if (!nr_holds)
		return bpf_cpumask_intersects(idle, p->cpus_ptr);
	bpf_for(cpu, 0, nr) {
		if (cpu >= MAX_CPUS)
			break;
		if (bpf_cpumask_test_cpu(cpu, idle) && bpf_cpumask_test_cpu(cpu, p->cpus_ptr) &&
		    !cpu_reserved(cpu, NULL))
			return true;
	}
	return false;
}

/*
 * Is the fair-path task that @tctx's task last woke synchronously (what it
 * now waits on: its tool server) runnable but on no CPU? Then it waits for
 * one, and a hold would keep this one idle while the reply waits.
 */
static bool partner_waiting(struct task_ctx *tctx)
{
	struct task_struct *q;
	bool waiting;

	if (!tctx->sync_wakee)
		return false;
	q = bpf_task_from_pid(tctx->sync_wakee);
	if (!q)
		return false;
	/* An express partner's wakeup takes the lane: it waits for no hold. */
	waiting = q->on_rq && !q->on_cpu && task_class_of(q) == CLASS_NORMAL;
	bpf_task_release(q);
	return waiting;
}

/*
 * @p, an express run of class tctx->lane_class, goes to sleep on @cpu
 * (ops.stopping(), not runnable): hold the CPU if its sleeps are short
 * and the class quota has room.
 */
__hidden void hold_start(struct task_struct *p, struct task_ctx *tctx, s32 cpu, struct cpu_ctx *cc)
{
	u32 class = tctx->lane_class, key = cpu, tenant;
	u64 now = bpf_ktime_get_ns(), ns, avg = tctx->sleep_avg_ns, early;
	const struct cpumask *idle;
	struct hold_timer *t;
	bool spare;

	tctx->sleep_start_ns = now;
	/*
	 * A hold left from another task (its window not yet open) ends here,
	 * and its timer with it: a new hold below re-arms it.
	 */
	if (cc->hold_until_ns) {
		hold_end(cc, now, false);
		hold_timer_park(cpu);
	}
	if (class >= NR_CLASSES || !(ns = class_hold_ns[class]) || !avg)
		return;
	/*
	 * Its sleeps are longer than a hold may last: a hold would end
	 * before its return. Counted, so that an operator whose agents wait
	 * on slower tools than hold_us sees why they get no holds.
	 */
	if (avg > ns) {
		lane_stat_inc(class, LANE_HOLD_LONG);
		return;
	}
	if (2 * avg < ns)
		ns = 2 * avg;
	/* The window opens this long from now (header comment); below ns. */
	early = 2 * tctx->sleep_dev_ns + avg / 8;
	early = avg > early ? avg - early : 0;
	/*
	 * Another CPU it may use is idle: the machine is not saturated, its
	 * wakeup will find an idle CPU anyway, and the fair path keeps the
	 * kernel's topology-aware idle picker (held CPUs replace it with a
	 * plain scan). Holds are for a machine with no idle CPU.
	 */
	idle = scx_bpf_get_idle_cpumask();
	spare = idle_unheld(p, idle);
	scx_bpf_put_idle_cpumask(idle);
	if (spare) {
		lane_stat_inc(class, LANE_HOLD_SPARE);
		return;
	}
	if (partner_waiting(tctx)) {
		lane_stat_inc(class, LANE_HOLD_PARTNER);
		return;
	}
	/*
	 * Held, this CPU is where its wakeup goes: not one that was slow to
	 * start from idle lately (express.avoid_slow_idle, cpu_quality.bpf.c).
	 */
	if (cpu_slow_idle(cpu, now)) {
		lane_stat_inc(class, LANE_HOLD_SLOW_IDLE);
		return;
	}
	/* hold_whole: the window opens at once (header comment). */
	if (class_hold_whole[class]) {
		early = 0;
	} else if (!early) {
		/*
		 * A sleeper whose deviation is 7/16 of its average or more
		 * could be back at any time: its window would open at once
		 * and cover the whole sleep, a bet of up to 2 x its average
		 * of everyone's CPU time on one preemption saved. Without
		 * hold_whole it earns none: its wakeup preempts. (The bench's
		 * tool server alternates a 2 ms timer sleep with a wait of a
		 * few hundred us for the next request; at 2 vCPUs its
		 * whole-sleep holds took the agent class quota first, and
		 * ~1800 of the agent loop's holds per 6 s cell were refused.)
		 */
		lane_stat_inc(class, LANE_HOLD_IRREGULAR);
		return;
	}
	tenant = budget_tenant(tctx, class);
	if (!budget_hold_fits(class, tenant, ns - early, now)) {
		lane_stat_inc(class, LANE_HOLD_NO_QUOTA);
		return;
	}
	t = bpf_map_lookup_elem(&hold_timers, &key);
	if (!t)
		return;
	/* Reserve its place: two CPUs may ask at once, and one is the last. */
	if (__sync_fetch_and_add(&nr_holds, 1) >= hold_max_cpus) {
		__sync_fetch_and_sub(&nr_holds, 1);
		lane_stat_inc(class, LANE_HOLD_LAST_CPU);
		return;
	}
	cc->hold_start_ns = now + early;
	cc->hold_curr_pinned = 0;
	cc->hold_class = class;
	cc->hold_tenant = tenant;
	cc->hold_pid = p->pid;
	cc->hold_partner = tctx->sync_wakee;
	cc->hold_until_ns = now + ns;
	/*
	 * The timer fires at the window's opening, to clear the CPU of the
	 * fair work that ran there meanwhile, then at its end. A window open
	 * from now (hold_whole) has nothing to clear, as the task holding it
	 * is the one leaving: its timer is armed for the end only. Armed for
	 * 0 ns, it fired as the CPU went idle only to re-arm: one more timer
	 * interrupt and softirq per sleep, tens of us each under TCG
	 * (docs/benchmarks.md, "The hold's timer").
	 */
	bpf_timer_start(&t->timer, early ? early : ns, BPF_F_TIMER_CPU_PIN);
	lane_stat_inc(class, LANE_HOLDS);
	if (!early)
		lane_stat_inc(class, LANE_HOLD_WHOLE);
}

/*
 * ops.running() of @p on @cc's CPU: its task's return, or any other task
 * in the window, ends the hold. Before the window opens, fair-path work
 * (@fair) runs there without ending it: the timer will clear the CPU.
 */
__hidden void hold_running(struct task_struct *p, bool fair, struct cpu_ctx *cc)
{
	u64 now;

	if (!cc || !cc->hold_until_ns)
		return;
	now = bpf_ktime_get_ns();
	if (p->pid != cc->hold_pid && fair && time_before(now, cc->hold_start_ns)) {
		cc->hold_curr_pinned = p->nr_cpus_allowed == 1;
		return;
	}
	/*
	 * Work that can run only here (ksoftirqd, a per-CPU kworker: the
	 * softirqs and timers of the held task's own I/O among them) runs in
	 * the window without ending it: for the microseconds it runs, and
	 * then the CPU is idle again, still held. Ending the hold let the
	 * hogs in behind it, and the task's return preempted one: under
	 * cpu4x, such kthreads ended about 1% of the agent stand-in's holds
	 * (docs/benchmarks.md, "Pinned work inside a hold"). Its run counts
	 * as held time (microseconds), and a pinned task that keeps running
	 * here holds the CPU to the hold's end anyway.
	 */
	if (p->pid != cc->hold_pid && p->nr_cpus_allowed == 1 &&
	    time_before(now, cc->hold_until_ns)) {
		lane_stat_inc(cc->hold_class, LANE_HOLD_PINNED);
		return;
	}
	/*
	 * Taken: another task ran in the open window (not after its end,
	 * which the timer has yet to notice).
	 */
	if (p->pid != cc->hold_pid && time_before(now, cc->hold_until_ns))
		lane_stat_inc(cc->hold_class, LANE_HOLD_TAKEN);
	hold_end(cc, now, p->pid == cc->hold_pid);
	/* ops.running() runs on @cc's CPU, whose timer this is. */
	hold_timer_park(bpf_get_smp_processor_id());
}

/*
 * A synchronous wakeup by the running task: @p is what it will wait on
 * (its tool server, the other end of its pipe). A hold of the waker's CPU
 * is lent to @p on the fair path (held_for_other()), and none starts while
 * @p waits for a CPU (partner_waiting()): the reply needs one.
 */
__hidden void hold_note_wakee(struct task_struct *p, u64 wake_flags)
{
	struct cpu_ctx *cc = cpu_ctx_of(bpf_get_smp_processor_id());
	struct task_ctx *wctx;

	/* Only express wakers hold CPUs; a per-CPU load rules the rest out. */
	if (!(wake_flags & SCX_WAKE_SYNC) || !cc || !cc->curr_express)
		return;
	wctx = task_ctx_get((void *)bpf_get_current_task_btf());
	if (wctx)
		wctx->sync_wakee = p->pid;
}
