/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Fair path: every task that is not in the express lane.
 *
 * With fair.mode = "bpf" (the default) the whole policy runs here, on the
 * wakeup and enqueue path; userspace is never on a task's way to a CPU.
 * With fair.mode = "userspace", usersched.bpf.c hands each task to the
 * userspace scheduler and inserts its decision; the DSQs, the pick and
 * wakeup preemption below serve both modes.
 *
 * 1. Virtual runtime and deadline
 *
 *    A task's vruntime advances by the CPU time it used on the fair path,
 *    scaled by 100 / weight (p->scx.weight: 100 is nice 0, nice 5 about
 *    33), charged when it stops or keeps its CPU for another slice. Express
 *    runs are not charged: the token bucket pays for them. Its deadline is
 *    vruntime + slice x 100 / weight, and the earliest deadline runs next:
 *    a nice 0 task gets three times the CPU of a nice 5 one.
 *
 * 2. Clocks
 *
 *    Unpinned tasks count on the shared clock: the vruntime of the last
 *    unpinned task started, never going back (the front of the runnable
 *    tasks). The tasks pinned to one CPU count on that CPU's own clock, the
 *    front of their group (their latest vruntime, charged or started), and
 *    compete with the rest through an offset that
 *    keeps that front within [shared - slice_max, shared + slice_max]. So a
 *    CPU crowded with pinned tasks moves its clock slowly, and a task waking
 *    there is placed against its own group, not against a faster clock it
 *    would wait seconds to catch up with; a group that ran alone carries no
 *    debt when shared tasks arrive, and a lone pinned sleeper gets the same
 *    bounded credit as any other. The shift moves a whole group, so the
 *    order inside it, and nice within it, is kept.
 *
 * 3. Sleepers
 *
 *    A waking task comes back at most one slice_max behind its clock's
 *    front, as under EEVDF: sleeping buys a prompt wakeup, never a
 *    monopoly. A task that stayed runnable keeps its position within
 *    runnable_lag() of the front (slice_max - slice_min at nice 0, more
 *    for lighter tasks, whose slices span more virtual time), so nice
 *    splits are kept. Without that bound a hog alone on its CPU falls
 *    behind the shared front whenever hogs elsewhere run ahead, and its
 *    deadline beats every wakeup: a timer-driven task beside one hog per
 *    CPU waited whole slices (p99 tens of ms where EEVDF's is a few ms,
 *    docs/benchmarks.md, "Wakeups beside one hog per CPU"). The bound is
 *    slice_min short of a sleeper's credit, so the two never tie. A task
 *    that keeps its CPU with nothing queued competed with no one and is
 *    pulled to the front. At the other end, a task more than two of its
 *    own slices ahead of the front ran where the front did not
 *    follow, and it comes back at that bound instead of waiting for
 *    everyone else (what the bound drops is counted as fair_forgiven_ms).
 *
 * 4. Placement
 *
 *    A synchronous wakeup whose waker hands its CPU over (a pipe or
 *    socket reply: the waker sleeps next) and whose deadline would put it
 *    first in line waits on the waker's CPU and runs there when the waker
 *    stops (fair_sync_waker_cpu()). Any other wakeup goes straight to an
 *    idle CPU when the kernel's idle picker finds one (the previous CPU,
 *    then its LLC, then any), dispatched there at once. Otherwise it
 *    joins its DSQ (the CPU's own for a pinned task, the shared one for
 *    the rest, both ordered by deadline) and an idle CPU that may run it
 *    is kicked. One shared DSQ: the hosts this serves have one LLC per
 *    socket, and a shared queue balances load for free; with tens of
 *    CPUs per LLC its lock is the first thing to split.
 *
 *    A CPU held for an express task's return (hold.bpf.c), once its
 *    window opened, is passed over by the wakeup, the idle kick and the
 *    shared DSQ's pick. While any CPU is held, one pass over the CPUs
 *    replaces the kernel's idle picker (a few hundred ns natively at tens
 *    of CPUs).
 *
 * 5. Wakeup preemption
 *
 *    A woken task whose deadline is earlier than that of the fair task
 *    running on its CPU takes that CPU at once. Not on a synchronous
 *    wakeup: the waker is about to sleep (a pipe or socket reply) and the
 *    wakee gets the CPU then; preempting it would turn every message into
 *    two context switches. Requeued tasks (slice used up) never preempt.
 *    The kicked CPU honours the decision: its running task does not get
 *    to keep the CPU for another slice (fair_preempt_pending).
 *
 *    A fair task an express dispatch preempts keeps its place instead: it
 *    goes back to its own CPU's local DSQ with the rest of its slice and
 *    resumes when the express run ends, as EEVDF leaves a task an RT one
 *    preempted on its run queue (fair_keep_preempted()). The kernel
 *    re-enqueues it before the express task starts, so through the
 *    shared DSQ it would take that DSQ's lock, which every CPU's enqueues
 *    and picks take, on the express task's way to the CPU, and most
 *    likely migrate afterwards. Not when a CPU is idle (it goes there),
 *    nor on a CPU held for an express task's return (it must go idle),
 *    nor behind an express task of a class that holds CPUs (its CPU may
 *    be held once it sleeps).
 *
 * 6. Slices
 *
 *    target_latency / (tasks waiting per CPU + 1), within [slice_min,
 *    slice_max]: every queued task should run once within about
 *    target_latency.
 *
 * 7. Starvation guard
 *
 *    Deadlines alone bound no task's wait in real time. A task's
 *    deadline lies slice x 100 / weight past its vruntime: for a nice 19
 *    kernel thread (weight 1) that is 100 slices. The clocks advance only
 *    as tasks start with later vruntimes, and a storm of short-lived
 *    tasks each starts at the front and exits within its first slice, so
 *    the front barely moves while the CPUs stay busy. In a fork storm,
 *    khugepaged, preempted inside an RCU read-side section, waited 21 s
 *    in the shared DSQ; the kernel reported an RCU stall and ejected the
 *    scheduler (docs/operations.md, "What the hostile-conditions tests
 *    found"). So a timer looks at the fair DSQs every STARVE_SCAN_NS, and
 *    a task queued for over STARVE_NS goes to its CPU's local DSQ, where
 *    it runs when the current slice ends. The order is bent only for
 *    tasks that waited a second or more, well inside the RCU stall
 *    timeout (21 s) and the sched_ext watchdog's (30 s). Counted as
 *    fair_starved. Not only light tasks reach it: in hackbench -g 8 (320
 *    tasks on 2 vCPUs) a few tens of nice 0 tasks per run do. Each of
 *    the many sleepers wakes up to slice_max behind the front, and must
 *    run that far before its start moves the front, so a task requeued
 *    ahead of them waits for about (tasks x slice_max) / CPUs. A front
 *    also moved by the service given (EEVDF's average vruntime) did not
 *    lower the count: at 250 tasks on 2 CPUs it moves about 8 ms a
 *    second, and a task 3 ms past it still waits most of a second
 *    (docs/benchmarks.md, "Who reaches the starvation guard").
 */
#include "express.bpf.h"

/*
 * fair.mode: false = "bpf" (this file decides), true = "userspace"
 * (usersched.bpf.c asks the userspace scheduler). Fixed at load.
 */
const volatile bool fair_user_mode;

/* Longest fair slice; also the sleeper credit. See configs/default.toml. */
KNOB u64 slice_max_ns = 5 * NSEC_PER_MSEC;

/*
 * Shortest slice, and the period in which every queued task should run
 * once. More queued tasks mean shorter slices, down to slice_min_ns.
 */
KNOB u64 slice_min_ns = 500 * NSEC_PER_USEC;
KNOB u64 target_latency_ns = 20 * NSEC_PER_MSEC;

/* A woken fair task may preempt a later-deadline one (section 5). */
KNOB bool fair_wakeup_preempt = true;

/*
 * Virtual clocks (section 2): [cpu] is the front of the tasks pinned to
 * that CPU, [SHARED_CLOCK] the front of all other tasks.
 */
volatile u64 fair_clock[NR_FAIR_CLOCKS];

/* Per CPU: what to add to its pinned group's times to compare them with the shared clock. */
volatile s64 pinned_offset[MAX_CPUS];

/*
 * The one clock of userspace mode, where all deadlines count on it: the
 * front of the runnable tasks' deadlines (the earlier of the task last
 * started and the shared DSQ's head), never going back. Userspace places
 * waking and new tasks relative to it; usersched.bpf.c advances it
 * (usersched_running()). Defined with the other clocks, which clock_read()
 * picks from, so that this file needs nothing from usersched.bpf.c.
 */
volatile u64 vtime_now;

/*
 * Section 7. A queued task waits at most about STARVE_NS + STARVE_SCAN_NS
 * + one slice. A scan reads each queued task once, tens of ns each: with
 * a thousand tasks queued, 10 scans a second cost well under 0.1% of a
 * CPU, and with none queued a scan only reads the DSQs' counts.
 */
#define STARVE_NS      (1000 * NSEC_PER_MSEC)
#define STARVE_SCAN_NS (100 * NSEC_PER_MSEC)

struct starve_timer {
	struct bpf_timer timer;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct starve_timer);
} starve_timer SEC(".maps");

/* ---- Clocks ---- */

/* The clock a task's deadline counts on. */
static u32 clock_of_task(const struct task_struct *p)
{
	s32 cpu;

	if (fair_user_mode || p->nr_cpus_allowed != 1)
		return SHARED_CLOCK;
	cpu = scx_bpf_task_cpu(p);
	return cpu >= 0 && cpu < MAX_CPUS ? cpu : SHARED_CLOCK;
}

/* The clock the deadlines of DSQ @dsq count on. */
static u32 clock_of_dsq(u64 dsq)
{
	return fair_user_mode || dsq >= MAX_CPUS ? SHARED_CLOCK : (u32)dsq;
}

static u64 clock_read(u32 idx)
{
	/* Userspace's deadlines all count on its one virtual time. */
	if (fair_user_mode)
		return vtime_now;
	/*
	 * Callers' indexes are in range, but clang may drop this check where
	 * it can prove that, in a form the verifier cannot follow.
	 */
	barrier_var(idx);
	if (idx >= NR_FAIR_CLOCKS)
		return 0;
	return fair_clock[idx];
}

/* Move clock @idx forward to @v; it never goes back. */
static void clock_advance(u32 idx, u64 v)
{
	u64 old;

	barrier_var(idx); /* as in clock_read() */
	if (fair_user_mode || idx >= NR_FAIR_CLOCKS)
		return;
	old = fair_clock[idx];
	/* A racing CPU that moved it first wins; either value is a fair front. */
	if (time_before(old, v))
		__sync_val_compare_and_swap(&fair_clock[idx], old, v);
}

/*
 * The offset of CPU @cpu's pinned group, first moved (the least it can)
 * so that the group's front lies within slice_max of the shared front.
 */
static s64 group_offset(u32 cpu)
{
	s64 front, shared, off, lo, hi;

	barrier_var(cpu); /* as in clock_read() */
	if (cpu >= MAX_CPUS)
		return 0;
	front = fair_clock[cpu];
	shared = fair_clock[SHARED_CLOCK];
	off = pinned_offset[cpu];
	lo = shared - (s64)slice_max_ns - front;
	hi = shared + (s64)slice_max_ns - front;
	if (off < lo || off > hi) {
		off = off < lo ? lo : hi;
		pinned_offset[cpu] = off;
	}
	return off;
}

/* Time @t of clock @idx on the shared clock, where all deadlines compare. */
static u64 to_shared(u64 t, u32 idx)
{
	if (fair_user_mode || idx == SHARED_CLOCK)
		return t;
	return t + group_offset(idx);
}

/* The least vruntime a waking task may hold on a clock at @front (section 3). */
static u64 lag_floor(u64 front)
{
	return front > slice_max_ns ? front - slice_max_ns : 0;
}

/*
 * How far behind its clock's front a runnable task may fall (section 3):
 * slice_min less than a sleeper's credit, so that a sleeper and a lagging
 * runner never tie. A lighter task's slices span more virtual time, and it
 * lags a heavier one sharing its CPU by about one of them in normal
 * alternation: its bound grows with 100 / weight, or the bound would cut
 * into its share.
 */
static u64 runnable_lag(const struct task_struct *p)
{
	u64 base = slice_max_ns > slice_min_ns ? slice_max_ns - slice_min_ns : slice_max_ns;
	u64 scaled = scale_by_task_weight_inverse(p, base);

	return scaled > base ? scaled : base;
}

static u64 runnable_floor(u64 front, u64 lag)
{
	return front > lag ? front - lag : 0;
}

/* ---- Per-task accounting ---- */

/* @p starts a run (or a kept slice) of @slice_ns: what the next charge measures from. */
__hidden void note_fair_run(struct task_struct *p, struct task_ctx *tctx, u64 slice_ns)
{
	tctx->fair_run_slice_ns = slice_ns;
	tctx->fair_run_exec_ns = p->se.sum_exec_runtime;
}

/* Remember whether @p's next run was ordered by the fair path's vtime. */
__hidden void note_fair_dispatch(struct task_struct *p, bool fair)
{
	struct task_ctx *tctx = task_ctx_get(p);

	if (!tctx)
		return;
	tctx->fair_dispatched = fair;
	if (fair && tctx->fair_woken_ns)
		tctx->fair_decided_ns = bpf_ktime_get_ns();
}

/* Charge @p's fair CPU time since its run started (or was last charged). */
static void fair_charge(struct task_struct *p, struct task_ctx *tctx)
{
	u64 exec = p->se.sum_exec_runtime, used;

	if (exec <= tctx->fair_run_exec_ns)
		return;
	used = exec - tctx->fair_run_exec_ns;
	tctx->fair_run_exec_ns = exec;
	tctx->fair_run_slice_ns =
		used < tctx->fair_run_slice_ns ? tctx->fair_run_slice_ns - used : 0;
	tctx->fair_vruntime += scale_by_task_weight_inverse(p, used);
	stat_add(STAT_FAIR_CHARGED_NS, used);
	/*
	 * A pinned group's front follows its tasks' charged time too, not
	 * only their starts. Its offset holds the front near the shared one;
	 * a front left at the last start would count the run just charged
	 * against the group, and a lone pinned task would always sit one run
	 * ahead of shared tasks that keep their CPUs, and get a small fraction
	 * of its share of its CPU.
	 */
	if (tctx->fair_clock && tctx->fair_clock - 1 < MAX_CPUS)
		clock_advance(tctx->fair_clock - 1, tctx->fair_vruntime);
}

/*
 * Section 6: the slice of the next fair run. The shared DSQ feeds every
 * CPU, so what waits for one CPU is its share of the queue: counting the
 * whole queue would shrink slices with the number of CPUs (32 hogs on 8
 * CPUs would get 0.8 ms where 8 on 2 get 3 ms, and every extra switch on
 * a shared queue is likely a migration).
 */
static u64 fair_slice(void)
{
	u64 waiting = scx_bpf_dsq_nr_queued(SHARED_DSQ) / scx_bpf_nr_cpu_ids();
	u64 slice = target_latency_ns / (waiting + 1);

	if (slice < slice_min_ns)
		slice = slice_min_ns;
	if (slice > slice_max_ns)
		slice = slice_max_ns;
	return slice;
}

/*
 * Sections 1-3: position @p on its clock for a run of @slice_ns and set
 * its deadline. Returns the clock.
 */
static u32 fair_place(struct task_struct *p, struct task_ctx *tctx, bool wakeup, u64 slice_ns)
{
	u32 idx = clock_of_task(p);
	u64 clock = clock_read(idx), debt = 2 * scale_by_task_weight_inverse(p, slice_max_ns);

	if (tctx->fair_clock != idx + 1) {
		/*
		 * New to the fair path, or its affinity moved it to another
		 * clock. CPU time it used before counted on the old clock: a
		 * task that pins itself is enqueued on its new clock before the
		 * run that called sched_setaffinity() stops, and charging that
		 * run here would put it tens of ms behind its new group.
		 */
		tctx->fair_vruntime = clock;
		tctx->fair_clock = idx + 1;
		tctx->fair_run_exec_ns = p->se.sum_exec_runtime;
	} else if (wakeup && time_before(tctx->fair_vruntime, lag_floor(clock))) {
		tctx->fair_vruntime = lag_floor(clock);
	} else if (!wakeup &&
		   time_before(tctx->fair_vruntime, runnable_floor(clock, runnable_lag(p)))) {
		tctx->fair_vruntime = runnable_floor(clock, runnable_lag(p));
	} else if (time_after(tctx->fair_vruntime, clock + debt)) {
		/*
		 * Ahead of its clock's front by more than two of its slices:
		 * it ran where the front did not follow (a run the kernel
		 * extended, a clock it just joined). Competing from there, it
		 * would wait for everyone else to catch up.
		 */
		stat_add(STAT_FAIR_FORGIVEN_NS,
			 scale_by_task_weight(p, tctx->fair_vruntime - clock - debt));
		tctx->fair_vruntime = clock + debt;
	}
	tctx->fair_deadline = tctx->fair_vruntime + scale_by_task_weight_inverse(p, slice_ns);
	return idx;
}

/* ---- DSQs and CPUs ---- */

/* Deadline of DSQ @dsq's head on the shared clock, or U64 max if empty. */
static u64 head_key(u64 dsq)
{
	struct task_struct *p = __COMPAT_scx_bpf_dsq_peek(dsq);

	return p ? to_shared(p->scx.dsq_vtime, clock_of_dsq(dsq)) : (u64)-1;
}

/* The fair DSQ a task goes to: its CPU's DSQ if pinned or asked for, else shared. */
__hidden u64 fair_dsq(const struct task_struct *p, s32 cpu)
{
	if (p->nr_cpus_allowed == 1)
		return scx_bpf_task_cpu(p);
	if (cpu >= 0 && cpu < MAX_CPUS && bpf_cpumask_test_cpu(cpu, p->cpus_ptr))
		return cpu;
	return SHARED_DSQ;
}

/*
 * The I/O rule (placement.bpf.c: tasks that submit block I/O stay off a
 * shielded CPU an express task uses) belongs to the BPF fair path; in
 * userspace mode userspace places fair tasks. These two are its gates.
 */
__hidden bool fair_io_task(struct task_struct *p)
{
	return !fair_user_mode && io_task(p);
}

static bool fair_io_guarded(s32 cpu)
{
	return !fair_user_mode && io_guarded(cpu);
}

/*
 * Must @p's placement (wakeup or idle kick) pass over some CPUs: held ones
 * (hold.bpf.c), or for an I/O task (*@io) guarded ones? Then
 * pick_cpu_avoiding() places it instead of the kernel's idle picker.
 */
__hidden bool fair_avoids_cpus(struct task_struct *p, bool *io)
{
	*io = fair_io_task(p);
	return *io || hold_any();
}

/*
 * Wake an idle CPU that can run @p, so queued work does not wait for a
 * tick: not a held one (hold.bpf.c), nor for an I/O task a guarded one
 * (placement.bpf.c). Returns whether one was kicked.
 */
__hidden bool fair_kick_idle(struct task_struct *p, u64 dsq)
{
	bool idle, io;
	s32 cpu;

	if (dsq != SHARED_DSQ) {
		if (!scx_bpf_test_and_clear_cpu_idle(dsq))
			return false;
		scx_bpf_kick_cpu(dsq, SCX_KICK_IDLE);
		return true;
	}
	if (fair_avoids_cpus(p, &io)) {
		cpu = pick_cpu_avoiding(p, scx_bpf_task_cpu(p), io, &idle);
		if (!idle)
			return false;
	} else {
		cpu = scx_bpf_pick_idle_cpu(p->cpus_ptr, 0);
		if (cpu < 0)
			return false;
	}
	scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
	return true;
}

/*
 * Section 5: @p, just queued with deadline @dl on clock @idx, takes @cpu
 * if the fair task running there has a later deadline. Only that one CPU
 * is looked at: O(1) per wakeup, and on a saturated machine one busy CPU
 * is as good as another. Never an express task's CPU.
 */
__hidden void fair_preempt_check(struct task_struct *p, s32 cpu, u64 dl, u32 idx)
{
	struct cpu_ctx *cc;
	u64 curr_dl, floor;

	if (!fair_wakeup_preempt || cpu < 0 || !bpf_cpumask_test_cpu(cpu, p->cpus_ptr))
		return;
	cc = cpu_ctx_of(cpu);
	if (!cc || !cc->curr_fair)
		return;
	curr_dl = cc->curr_fair_deadline;
	if (!fair_user_mode) {
		/*
		 * Section 3: where the running task would be queued if it
		 * stopped now, so that the pick after the kick agrees.
		 */
		floor = runnable_floor(clock_read(SHARED_CLOCK), cc->curr_fair_lag);
		if (time_before(cc->curr_fair_vstart, floor))
			curr_dl += floor - cc->curr_fair_vstart;
	}
	if (time_after(to_shared(dl, idx), curr_dl))
		return;
	cc->fair_preempt_pending = 1;
	scx_bpf_kick_cpu(cpu, SCX_KICK_PREEMPT);
	stat_inc(STAT_FAIR_PREEMPT);
}

/*
 * Section 5: @p left its CPU without sleeping. If an express dispatch
 * preempted it, put it back on that CPU behind the express task, with the
 * rest of its slice. Returns whether it did.
 */
__hidden bool fair_keep_preempted(struct task_struct *p, u64 enq_flags)
{
	s32 cpu = scx_bpf_task_cpu(p);
	struct task_ctx *tctx;
	const struct cpumask *idle;
	bool any_idle;
	u32 claim;

	if (fair_user_mode || (enq_flags & (SCX_ENQ_WAKEUP | SCX_ENQ_REENQ)))
		return false;
	/*
	 * Not behind a task whose class holds its CPU while it sleeps
	 * (hold.bpf.c): queued on that CPU, the hog would run there as soon as
	 * the hold began. Kept behind the agent class, hogs took 1,560 of
	 * 2,693 agent holds in 6 s at 2 vCPUs under cpu4x.
	 */
	claim = cpu_express_claim(cpu);
	if (claim == CLASS_NORMAL || class_holds(claim) ||
	    !bpf_cpumask_test_cpu(cpu, p->cpus_ptr) || cpu_held(cpu, NULL) || cpu_rt_held(cpu))
		return false;
	tctx = task_ctx_get(p);
	/* fair_charge() left what remains of its slice in fair_run_slice_ns. */
	if (!tctx || !tctx->fair_dispatched || tctx->fair_run_slice_ns < FAIR_MIN_LEFT_NS)
		return false;
	/*
	 * An idle CPU would run it at once. Held ones count as idle too, to
	 * keep this one mask test: beside held CPUs the hog takes the shared
	 * DSQ (with four launchers and two holding agents on 8 vCPUs, about
	 * one preempted hog in eight).
	 */
	idle = scx_bpf_get_idle_cpumask();
	any_idle = bpf_cpumask_intersects(idle, p->cpus_ptr);
	scx_bpf_put_idle_cpumask(idle);
	if (any_idle)
		return false;
	scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, tctx->fair_run_slice_ns, enq_flags);
	stat_inc(STAT_FAIR_KEPT_LOCAL);
	return true;
}

/* ---- The BPF policy's entry points (fair.mode = "bpf") ---- */

/* ops.select_cpu() saw @p's wakeup: remember whether it was synchronous. */
__hidden void fair_note_wakeup(struct task_struct *p, u64 wake_flags)
{
	struct task_ctx *tctx = task_ctx_get(p);

	if (tctx)
		tctx->wake_sync = !!(wake_flags & SCX_WAKE_SYNC);
}

/*
 * Run @p at once on an idle CPU through @dsq_id (SCX_DSQ_LOCAL from
 * ops.select_cpu(), SCX_DSQ_LOCAL_ON | cpu from ops.enqueue()).
 */
__hidden void fair_dispatch_idle(struct task_struct *p, u64 dsq_id, u64 enq_flags)
{
	struct task_ctx *tctx = task_ctx_get(p);
	u64 slice = slice_max_ns;

	if (fair_user_mode || !tctx) {
		/* Userspace orders only what it decided: this run is outside its order. */
		note_fair_dispatch(p, false);
	} else {
		fair_place(p, tctx, true, slice);
		tctx->fair_woken_ns = 0;
		note_fair_dispatch(p, true);
	}
	scx_bpf_dsq_insert(p, dsq_id, slice, enq_flags);
	stat_inc(STAT_DIRECT_IDLE);
}

/*
 * Section 4: the waker's CPU for a synchronous wakeup (a pipe or socket
 * reply, a futex handoff: the waker sleeps next), or -1. @p is inserted
 * into that CPU's local DSQ and runs as soon as the waker stops: no
 * migration, and no idle CPU woken for a run of a few us, which costs an
 * IPI and an idle exit (a few us natively, more from deep idle; tens of
 * us in a TCG guest). Taken even when CPUs are idle: ping-pong pairs
 * kept on one CPU each ran about 1.5x the round trips per second of
 * pairs split across two, at 2 and at 8 vCPUs (docs/benchmarks.md,
 * "Other ordinary workloads").
 *
 * Only when the waker hands its CPU over: its last run made one
 * synchronous wakeup and then slept, and this is its first in this run.
 * A sender that wakes many readers and keeps running (hackbench's: 20
 * per run) would hold each of them a slice on its CPU while other CPUs
 * could run them; without this gate that cost hackbench at 8 vCPUs
 * (docs/benchmarks.md). The waker's history is its previous run's: a
 * ping-pong pair misses once, then stays.
 *
 * The local DSQ runs before any fair DSQ, so only a wakee that would run
 * next anyway goes there: its deadline is no later than the heads of the
 * shared DSQ and of that CPU's pinned DSQ. A sleeper with its credit
 * (section 3) beats the hogs queued beside it; a ping-pong pair that keeps
 * a CPU to itself moves its vruntime on, and within a slice or so its
 * wakeups go back to the queue: it never takes a CPU from tasks with
 * earlier deadlines, and nice still counts. At most one task waits there
 * per CPU, and never on a CPU held for an express task or running one.
 */
__hidden s32 fair_sync_waker_cpu(struct task_struct *p, u64 wake_flags)
{
	struct task_struct *waker = (void *)bpf_get_current_task_btf();
	s32 cpu = bpf_get_smp_processor_id();
	struct task_ctx *tctx, *wctx;
	struct cpu_ctx *cc;
	u64 slice, dl, now;
	u32 idx;

	if (fair_user_mode || !(wake_flags & SCX_WAKE_SYNC) || (waker->flags & PF_EXITING))
		return -1;
	wctx = task_ctx_get(waker);
	if (!wctx || ++wctx->sync_wakes != 1 || !wctx->sync_handoff ||
	    !bpf_cpumask_test_cpu(cpu, p->cpus_ptr))
		return -1;
	cc = cpu_ctx_of(cpu);
	tctx = task_ctx_get(p);
	/* curr_fair: the waker is a fair task, not express nor a kthread run out of order. */
	if (!cc || !cc->curr_fair || !tctx || cpu_held(cpu, NULL) ||
	    scx_bpf_dsq_nr_queued(SCX_DSQ_LOCAL_ON | cpu))
		return -1;
	slice = fair_slice();
	idx = fair_place(p, tctx, true, slice);
	dl = to_shared(tctx->fair_deadline, idx);
	/* Plain comparisons: an empty DSQ's key is U64 max. */
	if (dl > head_key(SHARED_DSQ) || dl > head_key(cpu))
		return -1;
	now = bpf_ktime_get_ns();
	tctx->fair_queued_ns = now;
	/* It waits for the waker: fair_wait_us counts that wait. */
	tctx->fair_woken_ns = tctx->fair_decided_ns = now;
	tctx->fair_dispatched = 1;
	scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, slice, 0);
	stat_inc(STAT_FAIR_SYNC_WAKER);
	return cpu;
}

/* Sections 1-5: queue @p by deadline, then find it a CPU. */
__hidden void fair_enqueue(struct task_struct *p, u64 enq_flags)
{
	struct task_ctx *tctx = task_ctx_get(p);
	bool wakeup = enq_flags & SCX_ENQ_WAKEUP, sync;
	u64 slice = fair_slice(), dsq = fair_dsq(p, -1), dl, now;
	u32 idx;

	if (!tctx) {
		/* No context (allocation failed): run it soon, unordered. */
		scx_bpf_dsq_insert_vtime(p, dsq, slice, clock_read(clock_of_dsq(dsq)), enq_flags);
		fair_kick_idle(p, dsq);
		return;
	}
	idx = fair_place(p, tctx, wakeup, slice);
	dl = tctx->fair_deadline;
	sync = tctx->wake_sync;
	tctx->wake_sync = 0;
	now = bpf_ktime_get_ns();
	tctx->fair_queued_ns = now;
	/* Wakeup latency (fair_wait_us) runs from here to ops.running(). */
	tctx->fair_woken_ns = tctx->fair_decided_ns = wakeup ? now : 0;
	tctx->fair_dispatched = 1;
	scx_bpf_dsq_insert_vtime(p, dsq, slice, dl, enq_flags);
	stat_inc(STAT_FAIR_QUEUED);

	if (fair_kick_idle(p, dsq) || !wakeup || sync)
		return;
	fair_preempt_check(p, scx_bpf_task_cpu(p), dl, idx);
}

/* ---- ops.dispatch(): what runs next ---- */

/*
 * @prev used up its slice and is still runnable. If its deadline for one
 * more slice is still earlier than every queued one, it keeps the CPU:
 * without this, two tasks sharing a CPU would simply alternate and nice
 * would not count.
 */
static bool keep_prev(struct task_struct *prev, u64 best)
{
	struct task_ctx *tctx;
	struct cpu_ctx *cc;
	u64 slice = slice_max_ns, next, floor;
	u32 idx = SHARED_CLOCK;

	if (!prev || !(prev->scx.flags & SCX_TASK_QUEUED))
		return false;
	/* Only the fair path's vtime is meaningful here (not express runs). */
	tctx = task_ctx_get(prev);
	if (!tctx || !tctx->fair_dispatched)
		return false;
	/*
	 * A wakeup kicked this CPU to preempt @prev (section 5). Deciding
	 * again here, without the floor that decision used, could keep a task
	 * with banked credit on the CPU and waste the kick.
	 */
	cc = cpu_ctx_of(scx_bpf_task_cpu(prev));
	if (cc && cc->fair_preempt_pending) {
		cc->fair_preempt_pending = 0;
		return false;
	}
	if (fair_user_mode) {
		next = prev->scx.dsq_vtime + scale_by_task_weight_inverse(prev, slice);
	} else {
		/* Charge the slice it used, as if it had stopped and started again. */
		fair_charge(prev, tctx);
		slice = fair_slice();
		idx = clock_of_task(prev);
		/*
		 * Section 3: its lag is bounded like any runnable task's, and
		 * with nothing queued it competed with no one: it has none.
		 */
		floor = best == (u64)-1 ? clock_read(idx)
					: runnable_floor(clock_read(idx), runnable_lag(prev));
		if (time_before(tctx->fair_vruntime, floor))
			tctx->fair_vruntime = floor;
		next = tctx->fair_vruntime + scale_by_task_weight_inverse(prev, slice);
	}
	if (to_shared(next, idx) >= best)
		return false;
	scx_bpf_task_set_dsq_vtime(prev, next);
	scx_bpf_task_set_slice(prev, slice);
	note_fair_run(prev, tctx, slice);
	if (!fair_user_mode) {
		tctx->fair_deadline = next;
		clock_advance(idx, tctx->fair_vruntime);
		cc = cpu_ctx_of(scx_bpf_task_cpu(prev));
		if (cc) {
			cc->curr_fair_deadline = to_shared(next, idx);
			cc->curr_fair_vstart = to_shared(tctx->fair_vruntime, idx);
			cc->curr_fair_lag = runnable_lag(prev);
		}
	}
	return true;
}

/*
 * Cache affinity on the shared DSQ: among its first LOCALITY_SCAN tasks,
 * one that last ran on @cpu goes first if its deadline is within one
 * slice of the head's (@head). A shared queue otherwise hands each task to
 * whichever CPU frees up first, so with a few hogs per CPU nearly every
 * switch is a migration, which cost CPU hogs in an 8-vCPU VM up to tens of
 * percent of their throughput (docs/benchmarks.md, "Ordinary tasks"). The
 * order bends by at most one slice.
 *
 * Each step of the scan takes the shared DSQ's lock, which every CPU's
 * enqueues and picks also take: with hackbench's hundreds of tasks on 8
 * CPUs, the depth showed in its run time. If one queued task in eight
 * last ran on this CPU, three steps find one a third of the time and
 * eight two thirds, but eight cost hackbench about 4% at 8 vCPUs and the
 * hogs gained nothing measurable from them (docs/benchmarks.md, "The
 * locality scan's depth at 8 vCPUs"). At 2 CPUs three steps nearly
 * always find one.
 *
 * A task that used up its slice never passes a wakeup this way. A
 * sleeper's lead over the hogs' deadlines is about slice_min (section
 * 3), less than the one slice the scan may bend, so a hog that last ran
 * here could go first and the wakeup wait a whole hog slice (ms): a
 * synchronous wakeup (a pipe's reader) preempts no one and relies on
 * this pick (docs/benchmarks.md, "Other ordinary workloads"). A wakeup
 * that last ran here may still pass one that did not: stopping at every
 * wakeup split ping-pong pairs across CPUs and halved their round trips.
 */
#define LOCALITY_SCAN 3

static bool queued_wakeup(struct task_struct *p)
{
	struct task_ctx *tctx = task_ctx_get(p);

	return tctx && tctx->fair_woken_ns;
}

static bool move_shared_local(s32 cpu, u64 head)
{
	struct task_struct *p;
	bool passed_wakeup = false;
	u32 n = 0;

	if (fair_user_mode)
		return false;
	/*
	 * Whether a task is a wakeup costs a task-storage lookup, so it is
	 * asked only where the answer matters: of a local candidate once a
	 * wakeup was passed, of the others until one was.
	 */
	bpf_for_each(scx_dsq, p, SHARED_DSQ, 0) {
		if (++n > LOCALITY_SCAN || p->scx.dsq_vtime - head > slice_max_ns)
			break;
		if (scx_bpf_task_cpu(p) == cpu && bpf_cpumask_test_cpu(cpu, p->cpus_ptr)) {
			if (passed_wakeup && !queued_wakeup(p))
				break;
			return scx_bpf_dsq_move(BPF_FOR_EACH_ITER, p, SCX_DSQ_LOCAL, 0);
		}
		passed_wakeup = passed_wakeup || queued_wakeup(p);
	}
	return false;
}

/*
 * A guarded CPU (placement.bpf.c: shielded, an express task on it) takes
 * from the shared DSQ the first of its first GUARDED_SCAN tasks that is
 * not an I/O task; if all are, it takes none of them (an unshielded CPU
 * will, or the starvation guard after STARVE_NS). Deeper than the
 * locality scan: not finding one leaves the CPU idle, and this scan runs
 * only on the few shielded CPUs.
 */
#define GUARDED_SCAN 8

static bool move_shared_guarded(void)
{
	struct task_struct *p;
	u32 n = 0;

	bpf_for_each(scx_dsq, p, SHARED_DSQ, 0) {
		if (++n > GUARDED_SCAN)
			break;
		if (!io_task(p))
			return scx_bpf_dsq_move(BPF_FOR_EACH_ITER, p, SCX_DSQ_LOCAL, 0);
		stat_inc(STAT_IO_KEPT_OFF);
	}
	return false;
}

/* The shared DSQ's next task for @cpu: cache-warm first, I/O kept off a guarded CPU. */
static bool move_shared(s32 cpu, u64 head)
{
	if (fair_io_guarded(cpu))
		return move_shared_guarded();
	return move_shared_local(cpu, head) || scx_bpf_dsq_move_to_local(SHARED_DSQ, 0);
}

/*
 * @prev may keep the CPU, else the earliest deadline runs. @rt_held: an RT
 * task holds this CPU (main.bpf.c, rt_waits_here()), so the ext deadline
 * server's few ms a second here belong to a @prev pinned to it; the shared
 * DSQ's tasks can run elsewhere. Without this, the lag bound (section 3)
 * makes a pinned hog alternate with shared ones and it kept about half the
 * server's time (docs/operations.md, "What the hostile-conditions
 * tests found").
 */
__hidden void fair_pick(s32 cpu, struct task_struct *prev, bool rt_held)
{
	u64 local = head_key(cpu), shared = head_key(SHARED_DSQ);

	/*
	 * Held for an express task's return (hold.bpf.c): only work that can
	 * run nowhere else (this CPU's own DSQ), which runs inside the hold.
	 */
	if (cpu_held(cpu, NULL)) {
		scx_bpf_dsq_move_to_local(cpu, 0);
		return;
	}

	if (rt_held && prev && prev->nr_cpus_allowed == 1) {
		struct cpu_ctx *cc = cpu_ctx_of(cpu);

		/* Nor may a wakeup's preemption (section 5) hand it over. */
		if (cc)
			cc->fair_preempt_pending = 0;
		shared = (u64)-1;
	}

	if (keep_prev(prev, local < shared ? local : shared))
		return;

	/*
	 * Pinned work and shared work compete on deadline, so neither starves.
	 * Either branch takes shared work through move_shared(), so the
	 * cache-warm and I/O rules hold in both (with @rt_held, shared is -1
	 * and the locality scan stops at once: a plain move of the head).
	 */
	if (local <= shared) {
		if (scx_bpf_dsq_move_to_local(cpu, 0))
			return;
		move_shared(cpu, shared);
	} else {
		if (move_shared(cpu, shared))
			return;
		scx_bpf_dsq_move_to_local(cpu, 0);
	}
}

/* ---- ops.running() / ops.stopping() ---- */

/*
 * A fair wakeup starts running: account how long it waited, and in
 * userspace mode how long of that the decision took.
 */
static void fair_wakeup_latency(struct task_ctx *tctx)
{
	u64 now = bpf_ktime_get_ns(), woken = tctx->fair_woken_ns;
	u64 decided = tctx->fair_decided_ns;

	tctx->fair_woken_ns = 0;
	tctx->fair_decided_ns = 0;
	if (!decided || time_before(now, decided) || time_before(decided, woken))
		return;
	stat_inc(STAT_FAIR_WAKEUPS);
	stat_add(STAT_FAIR_DECIDE_NS, decided - woken);
	stat_add(STAT_FAIR_WAIT_NS, now - woken);
	if (now - woken > NSEC_PER_MSEC)
		stat_inc(STAT_FAIR_WAIT_OVER_1MS);
}

__hidden void fair_running(struct task_struct *p, struct task_ctx *tctx, struct cpu_ctx *cc)
{
	bool fair = tctx && tctx->fair_dispatched;
	u32 idx = SHARED_CLOCK;

	if (fair) {
		note_fair_run(p, tctx, p->scx.slice);
		if (!fair_user_mode) {
			idx = tctx->fair_clock ? tctx->fair_clock - 1 : SHARED_CLOCK;
			clock_advance(idx, tctx->fair_vruntime);
		}
	}
	if (tctx)
		tctx->sync_wakes = 0;
	if (cc) {
		cc->curr_fair = fair;
		cc->fair_preempt_pending = 0;
		if (fair && fair_user_mode) {
			cc->curr_fair_deadline = p->scx.dsq_vtime;
		} else if (fair) {
			cc->curr_fair_deadline = to_shared(tctx->fair_deadline, idx);
			cc->curr_fair_vstart = to_shared(tctx->fair_vruntime, idx);
			cc->curr_fair_lag = runnable_lag(p);
		}
	}
	if (tctx && tctx->fair_woken_ns)
		fair_wakeup_latency(tctx);
}

__hidden void fair_stopping(struct task_struct *p, struct task_ctx *tctx, struct cpu_ctx *cc,
			    bool runnable)
{
	if (cc)
		cc->curr_fair = 0;
	/* Section 4: a run that made one synchronous wakeup and slept handed its CPU over. */
	if (tctx)
		tctx->sync_handoff = !runnable && tctx->sync_wakes == 1;
	if (!fair_user_mode && tctx && tctx->fair_dispatched)
		fair_charge(p, tctx);
}

/* ---- Section 7: the starvation guard ---- */

/*
 * Where starved @p runs: its own CPU, where its cache is, unless that CPU
 * is held for an express task's return (hold.bpf.c), where it would end
 * the hold and the task's wakeup would preempt it, or taken by an RT
 * task: then the next CPU after it that @p may use and is neither. One
 * CPU is never held (hold.bpf.c, hold_max_cpus), so one is found unless
 * @p may use only held CPUs; then its own, the guard coming first. (On a
 * small machine with a large max_share, tens of hogs a run reached held
 * CPUs that way: docs/benchmarks.md, "Pinned work inside a hold".) A scan
 * only when its CPU is held; with no hold, cpu_held() is one load.
 */
static s32 starved_cpu(struct task_struct *p)
{
	u32 nr = scx_bpf_nr_cpu_ids(), i;
	s32 cpu = scx_bpf_task_cpu(p), c;

	if (!cpu_held(cpu, NULL) && !cpu_rt_held(cpu))
		return cpu;
	bpf_for(i, 1, nr) {
		c = (cpu + i) % nr;
		if (c < MAX_CPUS && bpf_cpumask_test_cpu(c, p->cpus_ptr) && !cpu_held(c, NULL) &&
		    !cpu_rt_held(c))
			return c;
	}
	return cpu;
}

/* Run every task that has waited in fair DSQ @dsq for over STARVE_NS. */
static void run_starved(u64 dsq, u64 now)
{
	struct task_struct *p;
	struct task_ctx *tctx;
	s32 cpu;

	if (!scx_bpf_dsq_nr_queued(dsq))
		return;
	/*
	 * No cap on the count: a counter would keep the verifier from
	 * seeing the loop's states converge. The DSQ is finite, and the
	 * kernel's iterator only visits tasks queued before it started.
	 */
	bpf_for_each(scx_dsq, p, dsq, 0) {
		tctx = task_ctx_get(p);
		/* Queued since before now (time_before() also skips a racing requeue). */
		if (!tctx || !time_before(tctx->fair_queued_ns + STARVE_NS, now))
			continue;
		/*
		 * The kernel would reject a CPU outside its mask (its own is in
		 * it unless the mask just changed, and then its enqueue comes
		 * soon anyway).
		 */
		cpu = starved_cpu(p);
		if (!bpf_cpumask_test_cpu(cpu, p->cpus_ptr))
			continue;
		if (scx_bpf_dsq_move(BPF_FOR_EACH_ITER, p, SCX_DSQ_LOCAL_ON | cpu, 0)) {
			scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
			stat_inc(STAT_FAIR_STARVED);
		}
	}
}

static int starve_timer_fn(void *map, int *key, struct bpf_timer *timer)
{
	u32 nr_cpus = scx_bpf_nr_cpu_ids();
	u64 now = bpf_ktime_get_ns();
	s32 cpu;

	run_starved(SHARED_DSQ, now);
	bpf_for(cpu, 0, nr_cpus) {
		if (cpu >= MAX_CPUS)
			break;
		run_starved(cpu, now);
	}
	bpf_timer_start(timer, STARVE_SCAN_NS, 0);
	return 0;
}

static s32 starve_guard_init(void)
{
	struct bpf_timer *timer;
	u32 key = 0;

	timer = bpf_map_lookup_elem(&starve_timer, &key);
	if (!timer) {
		scx_bpf_error("starvation timer missing");
		return -ENOENT;
	}
	bpf_timer_init(timer, &starve_timer, CLOCK_MONOTONIC);
	bpf_timer_set_callback(timer, starve_timer_fn);
	return bpf_timer_start(timer, STARVE_SCAN_NS, 0);
}

/* ---- ops.init() ---- */

__hidden s32 fair_init(void)
{
	u32 nr_cpus = scx_bpf_nr_cpu_ids();
	s32 cpu, err;

	bpf_for(cpu, 0, nr_cpus) {
		if (cpu >= MAX_CPUS)
			break;
		err = scx_bpf_create_dsq(cpu, -1);
		if (err) {
			scx_bpf_error("failed to create DSQ for CPU %d: %d", cpu, err);
			return err;
		}
	}
	err = scx_bpf_create_dsq(SHARED_DSQ, -1);
	if (err) {
		scx_bpf_error("failed to create the shared DSQ: %d", err);
		return err;
	}
	/*
	 * Userspace mode bounds waits its own way (rescue_ms): ops.init()
	 * starts usersched.bpf.c's timer instead.
	 */
	return fair_user_mode ? 0 : starve_guard_init();
}
