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
 *    - The fair path serves every other task. ops.enqueue() hands the task to
 *      the userspace scheduler (src/scheduler.rs, policy in src/fair.rs)
 *      through the `queued` ring buffer. Userspace picks the CPU, the slice
 *      and a virtual deadline weighted by nice, and sends the decision back
 *      through the `dispatched` user ring buffer, which ops.dispatch()
 *      drains into vtime-ordered DSQs. A woken task whose deadline is not
 *      later than the running one's preempts it, as under EEVDF. With
 *      requeue_preempted, a task preempted mid-slice keeps its decision.
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
 *    quiet CPU free it takes a hot or deep one anyway: the fair path's
 *    round trip costs more, and an agent's own loopback traffic makes its
 *    CPUs IRQ-hot (`quiet_only` turns this off). A wakeup that skips
 *    ops.select_cpu() (a pinned task) preempts on its own CPU.
 *
 * 5. Watchdog safety (fair.bpf.c)
 *
 *    A task handed to userspace lives in an in-flight slot until userspace
 *    answers. If userspace has not answered within `rescue_ns`, ops.dispatch()
 *    dispatches the task itself, so a slow or stopped userspace scheduler
 *    delays tasks by a bounded time instead of stalling them. The scheduler's
 *    own threads and per-CPU kthreads never go through userspace.
 */
#include "express.bpf.h"

char _license[] SEC("license") = "GPL";

/* ---- Knobs: set from the config file before load ---- */

/* Our own process: its threads are dispatched by BPF, never through itself. */
const volatile u32 usersched_tgid;

/* Longest fair-path slice; also the slice of BPF-only dispatches. */
KNOB u64 slice_max_ns = 5 * NSEC_PER_MSEC;

/* How long a task may wait for userspace before BPF dispatches it itself. */
KNOB u64 rescue_ns = 50 * NSEC_PER_MSEC;

/*
 * Place a waking fair-path task directly on an idle CPU found by the
 * default idle picker. Saves the userspace round trip when the machine has
 * spare CPUs; under contention (no idle CPU) every decision is userspace's.
 */
KNOB bool direct_idle = true;

/* Per class: is the express lane on, bucket capacity, refill rate (ppm of a CPU). */
KNOB bool class_enabled[NR_CLASSES];
KNOB u64 class_burst_ns[NR_CLASSES];
KNOB u64 class_rate_ppm[NR_CLASSES];

/* A woken fair-path task may preempt a later-deadline one (fair.bpf.c). */
KNOB bool fair_wakeup_preempt = true;

/* Let the userspace scheduler preempt a normal task when it wakes up. */
KNOB bool usersched_preempt = true;

/* Slice of an express dispatch. */
KNOB u64 express_slice_ns = 2 * NSEC_PER_MSEC;

UEI_DEFINE(uei);

/* ---- Stats ---- */

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NR_EXPRESS_STATS);
	__type(key, u32);
	__type(value, u64);
} stats SEC(".maps");

__hidden void stat_add(enum stat_idx idx, u64 val)
{
	u32 key = idx;
	u64 *cnt = bpf_map_lookup_elem(&stats, &key);

	if (cnt)
		*cnt += val;
}

__hidden void stat_inc(enum stat_idx idx)
{
	stat_add(idx, 1);
}

/* ---- Who bypasses both lanes ---- */

static bool is_usersched(const struct task_struct *p)
{
	return usersched_tgid && p->tgid == usersched_tgid;
}

/*
 * Per-CPU kthreads (ksoftirqd, kworkers bound to a CPU) can only run where
 * they are; the work they do often unblocks everyone else.
 */
static bool is_pcpu_kthread(const struct task_struct *p)
{
	return (p->flags & PF_KTHREAD) && p->nr_cpus_allowed == 1;
}

/* Run @p on an idle CPU through @dsq_id, bypassing the userspace scheduler. */
static void dispatch_to_idle(struct task_struct *p, u64 dsq_id, u64 enq_flags,
			     enum stat_idx stat)
{
	note_fair_dispatch(p, false);
	scx_bpf_dsq_insert(p, dsq_id, slice_max_ns, enq_flags);
	stat_inc(stat);
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

s32 BPF_STRUCT_OPS(express_select_cpu, struct task_struct *p, s32 prev_cpu,
		   u64 wake_flags)
{
	bool is_idle = false;
	s32 cpu;

	if (!is_usersched(p)) {
		cpu = express_lane_select_cpu(p, prev_cpu, wake_flags);
		if (cpu >= 0)
			return cpu;
		/* Express but nowhere good: the fair path decides, not direct_idle. */
		if (cpu == EXPRESS_FAIR)
			return prev_cpu;
	}

	cpu = scx_bpf_select_cpu_dfl(p, prev_cpu, wake_flags, &is_idle);
	if (is_idle && (direct_idle || is_usersched(p)))
		dispatch_to_idle(p, SCX_DSQ_LOCAL, 0,
				 is_usersched(p) ? STAT_USERSCHED : STAT_DIRECT_IDLE);
	else if (is_usersched(p))
		cpu = usersched_cpu(p, cpu);
	return cpu;
}

void BPF_STRUCT_OPS(express_enqueue, struct task_struct *p, u64 enq_flags)
{
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

		if (usersched_preempt && (enq_flags & SCX_ENQ_WAKEUP) && cc && !cc->curr_express)
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

	if (express_lane_enqueue(p, enq_flags))
		return;

	/*
	 * A wakeup that skipped ops.select_cpu() (a pinned task) on an idle
	 * CPU: run it there now, as direct_idle does for the others. Through
	 * userspace it would wait for the scheduler to wake up as well.
	 */
	if (direct_idle && (enq_flags & SCX_ENQ_WAKEUP) && p->nr_cpus_allowed == 1) {
		s32 cpu = scx_bpf_task_cpu(p);

		if (scx_bpf_test_and_clear_cpu_idle(cpu)) {
			dispatch_to_idle(p, SCX_DSQ_LOCAL_ON | cpu, enq_flags, STAT_DIRECT_IDLE);
			scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
			return;
		}
	}

	/*
	 * Other kernel threads (RCU, workqueues) take the BPF-only fair
	 * fallback: the userspace scheduler may itself be waiting on them, for
	 * example in synchronize_rcu() while attaching a uprobe.
	 */
	if (p->flags & PF_KTHREAD) {
		fair_enqueue_fallback(p, enq_flags);
		return;
	}

	if (fair_requeue_if_preempted(p, enq_flags) || fair_enqueue_user(p, enq_flags))
		return;

	fair_enqueue_fallback(p, enq_flags);
}

void BPF_STRUCT_OPS(express_dispatch, s32 cpu, struct task_struct *prev)
{
	/* Userspace's decisions first: some are bound for other CPUs. */
	if (!fair_drain())
		return;
	/*
	 * The kernel picks the next task before it re-enqueues @prev, so an
	 * express task whose slice ran out must be kept here: requeued in
	 * ops.enqueue(), it would wait behind the fair task picked instead.
	 */
	if (express_lane_keep(prev))
		return;
	fair_pick(cpu, prev);
}

void BPF_STRUCT_OPS(express_running, struct task_struct *p)
{
	/* Both lanes read the task's and the CPU's state: look them up once. */
	struct task_ctx *tctx = task_ctx_get(p);
	struct cpu_ctx *cc = cpu_ctx_of(scx_bpf_task_cpu(p));

	fair_running(p, tctx, cc);
	express_lane_running(tctx, cc);
}

void BPF_STRUCT_OPS(express_stopping, struct task_struct *p, bool runnable)
{
	struct task_ctx *tctx = task_ctx_get(p);
	struct cpu_ctx *cc = cpu_ctx_of(scx_bpf_task_cpu(p));

	fair_stopping(cc);
	express_lane_stopping(p, runnable, tctx, cc);
}

s32 BPF_STRUCT_OPS(express_init_task, struct task_struct *p,
		   struct scx_init_task_args *args)
{
	return task_ctx_create(p) ? 0 : -ENOMEM;
}

s32 BPF_STRUCT_OPS_SLEEPABLE(express_init)
{
	return fair_init();
}

void BPF_STRUCT_OPS(express_exit, struct scx_exit_info *ei)
{
	UEI_RECORD(uei, ei);
}

SCX_OPS_DEFINE(express_ops,
	       .select_cpu	= (void *)express_select_cpu,
	       .enqueue		= (void *)express_enqueue,
	       .dispatch	= (void *)express_dispatch,
	       .running		= (void *)express_running,
	       .stopping	= (void *)express_stopping,
	       .init_task	= (void *)express_init_task,
	       .init		= (void *)express_init,
	       .exit		= (void *)express_exit,
	       .name		= "express");
