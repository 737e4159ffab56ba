/* SPDX-License-Identifier: GPL-2.0 */
/*
 * scx_express: an express lane for CUDA launchers and agent control loops,
 * fair scheduling for everything else.
 *
 * 1. Overview
 *
 *    Two lanes share the machine:
 *
 *    - The express lane serves tasks classified `gpu` (threads that launch
 *      CUDA work and wait on it) or `agent` (agent control loops). Their
 *      wakeups are placed in BPF, on the wakeup path, on a warm idle CPU, and
 *      dispatched directly: no userspace round trip.
 *
 *    - The fair path serves every other task, in BPF too (fair.bpf.c):
 *      virtual deadlines weighted by nice, vtime-ordered DSQs, idle
 *      placement and wakeup preemption, decided on the enqueue path.
 *      Userspace (src/scheduler.rs) is the control plane: probes, rules,
 *      config reload, stats. It is on no task's way to a CPU and needs no
 *      CPU to keep the machine scheduled.
 *
 *    fair.mode = "userspace" keeps the older design as an option:
 *    ops.enqueue() hands each fair task to the userspace scheduler through
 *    a ring buffer and inserts its decision (usersched.bpf.c, policy in
 *    src/fair.rs), with a BPF rescue when it is late.
 *
 * 2. Classification (classify.bpf.c)
 *
 *    One task-class field in BPF task storage. Every source of class writes
 *    it; the scheduler only reads it. A new task starts `normal`.
 *
 * 3. Budget (budget.bpf.c)
 *
 *    The express lane is a privilege bounded by a per-task token bucket in
 *    nanoseconds of CPU time: capacity `burst`, refilled at `rate` (a
 *    fraction of one CPU). Express running time is charged when the task
 *    stops, or when its slice runs out and ops.dispatch() decides whether it
 *    keeps the CPU for another. A task with no tokens is an ordinary task
 *    until it refills. CUDA launchers spin in their syncs, so a launcher
 *    under load wants a whole CPU and is express for `rate` of its time.
 *
 * 4. Placement (placement.bpf.c)
 *
 *    Express wakeups go to the previous CPU if it is idle, quiet and
 *    shallow, else to such a CPU close to it. With none, the wakeup
 *    preempts a normal task on a quiet CPU (never an express one). With no
 *    quiet CPU free it takes a hot or deep one anyway: a wait in the fair
 *    path's queue costs more, and an agent's own loopback traffic makes its
 *    CPUs IRQ-hot (`quiet_only` turns this off). A wakeup that skips
 *    ops.select_cpu() (a pinned task) preempts on its own CPU. The task
 *    it preempts resumes there afterwards, with the rest of its slice,
 *    unless the express task's class holds CPUs (fair.bpf.c section 5).
 *
 *    After an express task of a class with hold_us goes to sleep, its CPU
 *    may be held idle around its expected return (hold.bpf.c): under load
 *    its next wakeup then lands on an idle, warm CPU instead of
 *    preempting one. Ordinary tasks use the CPU until the hold's window
 *    opens; a fair task running then is preempted (SCX_OPS_ENQ_LAST,
 *    ops.enqueue()). Held time counts against the class's max_share.
 *
 * 5. Fair path (fair.bpf.c)
 *
 *    Sections 1-6 of fair.bpf.c: vruntime and deadlines, per-CPU clocks
 *    for pinned tasks, bounded sleeper credit, placement (a synchronous
 *    wakee first in line waits on its waker's CPU, others go to an idle
 *    CPU), wakeup preemption (not on synchronous wakeups; a task the
 *    express lane preempts keeps its place) and load-scaled slices.
 *
 * 6. Watchdog safety (usersched.bpf.c, userspace mode only)
 *
 *    A task handed to userspace lives in an in-flight slot until userspace
 *    answers. If userspace has not answered within `rescue_ns`, ops.dispatch()
 *    dispatches the task itself, so a slow or stopped userspace scheduler
 *    delays tasks by a bounded time instead of stalling them. The scheduler's
 *    own threads and per-CPU kthreads never go through userspace.
 *
 * 7. Files
 *
 *    Each file uses only files listed before it (scripts/bpf-deps.sh
 *    prints who uses whom and fails on a circle):
 *
 *    - stats.bpf.c: the counters (`stats`, `lane_stats`) and their helpers.
 *    - ctx.bpf.c: the scheduler's per-task and per-CPU state (`task_ctxs`,
 *      `cpu_ctxs`).
 *    - classify.bpf.c: the task class and its uprobes (section 2).
 *    - cpu_quality.bpf.c: per-CPU IRQ time and idle depth.
 *    - tenant.bpf.c: which [[tenants]] entry a task's cgroup belongs to.
 *    - budget.bpf.c: token buckets and class quotas (section 3).
 *    - hold.bpf.c: CPUs kept idle for a sleeping express task (section 4).
 *    - placement.bpf.c: the express lane (section 4).
 *    - fair.bpf.c: the fair path's policy, DSQs and pick (section 5).
 *    - usersched.bpf.c: fair.mode = "userspace" on top of fair.bpf.c's
 *      DSQs (section 6).
 *    - main.bpf.c: the sched_ext callbacks, which route each task to a
 *      lane and call each file's hooks.
 *
 *    express.bpf.h declares what crosses files, grouped by the file that
 *    defines it. trace.bpf.c is a separate object (`scx_express trace`):
 *    it links with none of these and shares the classification code
 *    (classify.bpf.h) and intf.h with them.
 */
#include "express.bpf.h"

char _license[] SEC("license") = "GPL";

/*
 * ---- Knobs: set from the config file before load ----
 * Each knob is defined in the file that reads it, next to the code it
 * steers, with what it does and its unit: fair.bpf.c (fair.*, but
 * fair.direct_idle, below), usersched.bpf.c (fair.rescue_ms, fair.requeue_preempted),
 * placement.bpf.c (express.*, classes.*.enabled), hold.bpf.c (classes.*.hold_us),
 * budget.bpf.c (classes.*: burst, rate, max_share;
 * the same per tenant), tenant.bpf.c (the number of tenants), stats.bpf.c (latency targets),
 * cpu_quality.bpf.c (IRQ and idle-depth limits) and classify.bpf.c (classify.*). The ones below are
 * main.bpf.c's own; fair.bpf.c's fair_user_mode and slice_max_ns are read here too.
 */

/*
 * Our own process's tgid, in userspace mode: its threads are dispatched by
 * BPF, never through itself. In BPF mode it is an ordinary task. Set by
 * userspace before load; 0 matches no task.
 */
const volatile u32 usersched_tgid;

/*
 * fair.direct_idle: a waking fair task that the kernel's idle picker
 * (previous CPU, then its LLC, then any) found an idle CPU for is
 * dispatched there at once, skipping the fair DSQs; so is a pinned task
 * waking on its idle CPU (express_enqueue()). Bool, on by default.
 */
KNOB bool direct_idle = true;

UEI_DEFINE(uei);

/* ---- Who bypasses both lanes ---- */

static bool is_usersched(const struct task_struct *p)
{
	return fair_user_mode && usersched_tgid && p->tgid == usersched_tgid;
}

/*
 * Per-CPU kthreads (ksoftirqd, kworkers bound to a CPU) can only run where
 * they are; the work they do often unblocks everyone else.
 */
static bool is_pcpu_kthread(const struct task_struct *p)
{
	return (p->flags & PF_KTHREAD) && p->nr_cpus_allowed == 1;
}

/* ---- sched_ext callbacks ---- */

/*
 * Where the scheduler's own threads wake when no CPU is idle. They wake
 * for every batch of fair decisions; on a CPU running an express task they
 * would wait at the head of its queue and take the CPU when the express
 * slice ends. A CPU running a normal task is the one to preempt.
 */
static s32 usersched_cpu(struct task_struct *p, s32 cpu)
{
	struct cpu_ctx *cc = cpu_ctx_of(cpu);
	u32 nr = scx_bpf_nr_cpu_ids();
	s32 i;

	if (!cc || !cc->curr_express)
		return cpu;
	bpf_for(i, 0, nr) {
		if (i >= MAX_CPUS)
			break;
		cc = cpu_ctx_of(i);
		if (cc && !cc->curr_express && bpf_cpumask_test_cpu(i, p->cpus_ptr))
			return i;
	}
	return cpu;
}

s32 BPF_STRUCT_OPS(express_select_cpu, struct task_struct *p, s32 prev_cpu, u64 wake_flags)
{
	bool is_idle = false, io;
	s32 cpu;

	hold_note_wakee(p, wake_flags);
	if (!is_usersched(p)) {
		cpu = express_lane_select_cpu(p, prev_cpu, wake_flags);
		if (cpu >= 0)
			return cpu;
		/* Express but nowhere good: the fair path decides, not direct_idle. */
		if (cpu == EXPRESS_FAIR)
			return prev_cpu;
	}

	/*
	 * Held CPUs (hold.bpf.c) and, for an I/O task, the shielded CPUs in
	 * use (placement.bpf.c) are not the kernel idle picker's to take. A
	 * synchronous wakee first in line waits on its waker's CPU (fair.bpf.c,
	 * section 4), inserted there already.
	 */
	if (!is_usersched(p) && fair_avoids_cpus(p, &io))
		cpu = pick_cpu_avoiding(p, prev_cpu, io, &is_idle);
	else if (!is_usersched(p) && (cpu = fair_sync_waker_cpu(p, wake_flags)) >= 0)
		return cpu;
	else
		cpu = scx_bpf_select_cpu_dfl(p, prev_cpu, wake_flags, &is_idle);
	if (is_usersched(p)) {
		if (!is_idle)
			return usersched_cpu(p, cpu);
		note_fair_dispatch(p, false);
		scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, slice_max_ns, 0);
		stat_inc(STAT_USERSCHED);
		return cpu;
	}
	if (is_idle && direct_idle)
		fair_dispatch_idle(p, SCX_DSQ_LOCAL, 0);
	else
		fair_note_wakeup(p, wake_flags);
	return cpu;
}

void BPF_STRUCT_OPS(express_enqueue, struct task_struct *p, u64 enq_flags)
{
	/*
	 * SCX_OPS_ENQ_LAST: @p's slice ran out and ops.dispatch() found
	 * nothing else for its CPU. Without the flag the kernel would keep it
	 * running; so do we (its local DSQ), except on a CPU whose hold window
	 * opened (hold.bpf.c): there @p goes the usual way, to a DSQ other
	 * CPUs take from, and the CPU stays idle for the express task's
	 * return. Either way the CPU is already switching to idle: the kick
	 * makes it look at its local DSQ again (on a held CPU, for a pinned
	 * @p that the usual way put there).
	 */
	if (enq_flags & SCX_ENQ_LAST) {
		s32 cpu = scx_bpf_task_cpu(p);

		scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
		if (!cpu_held(cpu, NULL)) {
			scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, SCX_SLICE_DFL, enq_flags);
			return;
		}
	}

	/*
	 * The scheduler itself: next on this CPU, never through itself. On a
	 * wakeup it preempts the normal task running there: if it waited for
	 * that task's slice to end, every fair-path wakeup would wait for two
	 * slice ends (one for the decision, one for a CPU to drain it). It
	 * never preempts an express task.
	 */
	if (is_usersched(p)) {
		struct cpu_ctx *cc = cpu_ctx_of(scx_bpf_task_cpu(p));
		u64 flags = SCX_ENQ_HEAD;

		if ((enq_flags & SCX_ENQ_WAKEUP) && cc && !cc->curr_express)
			flags |= SCX_ENQ_PREEMPT;
		scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, slice_max_ns, enq_flags | flags);
		stat_inc(STAT_USERSCHED);
		return;
	}

	if (is_pcpu_kthread(p)) {
		note_fair_dispatch(p, false);
		scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, slice_max_ns, enq_flags);
		stat_inc(STAT_KTHREAD);
		return;
	}

	/*
	 * Re-enqueued because an RT task took its CPU (express_cpu_release()):
	 * the fair path lets another CPU take it; the express lane would put
	 * it back where it was.
	 */
	if (!(enq_flags & SCX_ENQ_REENQ) && express_lane_enqueue(p, enq_flags))
		return;

	/*
	 * A wakeup that skipped ops.select_cpu() (a pinned task) on an idle
	 * CPU: run it there now, as direct_idle does for the others. Through
	 * userspace it would wait for the scheduler to wake up as well.
	 */
	if (direct_idle && (enq_flags & SCX_ENQ_WAKEUP) && p->nr_cpus_allowed == 1) {
		s32 cpu = scx_bpf_task_cpu(p);

		if (scx_bpf_test_and_clear_cpu_idle(cpu)) {
			fair_dispatch_idle(p, SCX_DSQ_LOCAL_ON | cpu, enq_flags);
			scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
			return;
		}
	}

	if (!fair_user_mode) {
		if (!fair_keep_preempted(p, enq_flags))
			fair_enqueue(p, enq_flags);
		return;
	}

	/*
	 * Userspace mode. Other kernel threads (RCU, workqueues) take the
	 * BPF-only fallback: the userspace scheduler may itself be waiting on
	 * them, for example in synchronize_rcu() while attaching a uprobe.
	 */
	if (!(p->flags & PF_KTHREAD) &&
	    (fair_requeue_if_preempted(p, enq_flags) || fair_enqueue_user(p, enq_flags)))
		return;
	fair_enqueue_fallback(p, enq_flags);
}

/*
 * An RT task runs or waits on this CPU, so sched_ext tasks get only what
 * the kernel's ext deadline server grants them here (50 ms a second by
 * default). Spend it on the tasks that can run nowhere else: those waiting
 * in this CPU's own DSQ (pinned tasks), and a pinned @prev whose slice ran
 * out (fair_pick() keeps it). The shared DSQ's tasks can run on other
 * CPUs. (Not dl.dl_nr_running: it counts the deadline servers too.)
 */
static bool rt_waits_here(void)
{
	struct rq *rq = scx_bpf_locked_rq();

	return rq && rq->rt.rt_nr_running;
}

void BPF_STRUCT_OPS(express_dispatch, s32 cpu, struct task_struct *prev)
{
	/* Userspace's decisions first: some are bound for other CPUs. */
	if (fair_user_mode && !usersched_drain())
		return;
	bool rt_held = rt_waits_here();
	struct cpu_ctx *cc = cpu_ctx_of(cpu);

	/* For the picks that send a task to a CPU (cpu_rt_held()). */
	if (cc)
		cc->rt_held = rt_held;
	if (rt_held && scx_bpf_dsq_move_to_local(cpu, 0))
		return;
	/*
	 * The kernel picks the next task before it re-enqueues @prev, so an
	 * express task whose slice ran out must be kept here: requeued in
	 * ops.enqueue(), it would wait behind the fair task picked instead.
	 */
	if (express_lane_keep(prev))
		return;
	fair_pick(cpu, prev, rt_held);
}

void BPF_STRUCT_OPS(express_running, struct task_struct *p)
{
	/* Both lanes read the task's and the CPU's state: look them up once. */
	struct task_ctx *tctx = task_ctx_get(p);
	struct cpu_ctx *cc = cpu_ctx_of(scx_bpf_task_cpu(p));

	hold_running(p, tctx && tctx->fair_dispatched, cc);
	fair_running(p, tctx, cc);
	/*
	 * In userspace mode a task it ordered moves its virtual time. Called
	 * here, not from fair_running(), so that fair.bpf.c does not reach
	 * into usersched.bpf.c, which builds on it.
	 */
	if (fair_user_mode && tctx && tctx->fair_dispatched)
		usersched_running(p);
	express_lane_running(tctx, cc);
	/* After the lane's look: a slow start counts the runs before its own. */
	if (cc)
		cc->runs++;
}

void BPF_STRUCT_OPS(express_stopping, struct task_struct *p, bool runnable)
{
	struct task_ctx *tctx = task_ctx_get(p);
	s32 cpu = scx_bpf_task_cpu(p);
	struct cpu_ctx *cc = cpu_ctx_of(cpu);

	fair_stopping(p, tctx, cc, runnable);
	/* An express run goes to sleep: maybe hold its CPU (BPF fair mode only). */
	if (!runnable && !fair_user_mode && tctx && cc && cc->curr_express)
		hold_start(p, tctx, cpu, cc);
	express_lane_stopping(p, runnable, tctx, cc);
	if (cc)
		cc->stops++;
}

s32 BPF_STRUCT_OPS(express_init_task, struct task_struct *p, struct scx_init_task_args *args)
{
	return task_ctx_create(p) ? 0 : -ENOMEM;
}

/*
 * CPU hotplug: no ops.cpu_online()/ops.cpu_offline(). Without them the
 * kernel ends the scheduler on each hotplug event with a restart request,
 * and the daemon attaches again (src/main.rs, run_scheduler()): about a
 * second under load, during which EEVDF schedules everything. Staying
 * attached through hotplug (these two callbacks, even empty ones) hung
 * kernel 7.2.13 within a few offline/online cycles: the offline waits
 * forever for the dying CPU's run queue to empty, and SRCU grace periods
 * stop (docs/operations.md, "CPU hotplug"). A restart per event is the
 * price of a machine that never hangs.
 */

/*
 * An RT or deadline task took this CPU: the tasks waiting in its local DSQ
 * would wait for it (or for the ext deadline server's few ms a second).
 * Send them through ops.enqueue() again, so that another CPU can run them;
 * a pinned one comes back to this CPU's DSQ.
 */
void BPF_STRUCT_OPS(express_cpu_release, s32 cpu, struct scx_cpu_release_args *args)
{
	struct cpu_ctx *cc = cpu_ctx_of(cpu);

	/*
	 * Until a dispatch here finds no RT task waiting, the fair path's
	 * guards send no task here: one queued on this CPU waits behind
	 * what else is pinned here for the ext server's 50 ms a second.
	 * Only for RT: a stopper (migration) thread is gone in µs, and a
	 * deadline task is not what that dispatch checks for.
	 */
	if (cc) {
		if (args->reason == SCX_CPU_PREEMPT_RT)
			cc->rt_held = 1;
		/* A run of another class here, for the lane's account of a slow start. */
		cc->runs++;
		cc->stops++;
	}
	scx_bpf_reenqueue_local();
}

s32 BPF_STRUCT_OPS_SLEEPABLE(express_init)
{
	s32 err = fair_init();

	if (!err)
		err = hold_init();
	if (err || !fair_user_mode)
		return err;
	return usersched_init();
}

void BPF_STRUCT_OPS(express_exit, struct scx_exit_info *ei)
{
	UEI_RECORD(uei, ei);
}

/* One callback per line reads as the table it is. */
/* clang-format off */
SCX_OPS_DEFINE(express_ops,
	       .select_cpu	= (void *)express_select_cpu,
	       .enqueue		= (void *)express_enqueue,
	       .dispatch	= (void *)express_dispatch,
	       .running		= (void *)express_running,
	       .stopping	= (void *)express_stopping,
	       .init_task	= (void *)express_init_task,
	       .cpu_release	= (void *)express_cpu_release,
	       .init		= (void *)express_init,
	       .exit		= (void *)express_exit,
	       .flags		= SCX_OPS_ENQ_LAST,
	       .name		= "express");
/* clang-format on */
