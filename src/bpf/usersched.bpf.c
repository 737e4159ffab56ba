/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Fair path through the userspace scheduler (fair.mode = "userspace").
 *
 * ops.enqueue() sends a `struct queued_task` through the `queued` ring
 * buffer and records the task in an in-flight slot. Userspace answers with
 * a `struct dispatched_task` (CPU, slice, virtual deadline) through the
 * `dispatched` user ring buffer; ops.dispatch() drains it into the target
 * CPU's DSQ or the shared DSQ, both ordered by vtime, then moves the task
 * with the earliest deadline to the local DSQ.
 *
 * Watchdog safety: in-flight slots are retired in order. When the oldest
 * one has waited longer than rescue_ns, ops.dispatch() dispatches that task
 * itself and, for one second, enqueues new tasks without userspace. A timer
 * kicks an idle CPU so this happens even when every CPU is idle.
 */
#include "express.bpf.h"

/*
 * How long a task may wait for userspace before BPF dispatches it itself.
 * See fair.rescue_ms in configs/default.toml.
 */
KNOB u64 rescue_ns = 50 * NSEC_PER_MSEC;

/* Timer period: how often idle CPUs are woken to drain or rescue. */
#define FAIR_TIMER_NS (2 * NSEC_PER_MSEC)
/* How long the fair path bypasses userspace after a rescue. */
#define DEGRADED_NS   (1000 * NSEC_PER_MSEC)
/* Set in an in-flight slot's seq once the slot is answered or rescued. */
#define SLOT_DONE     (1ULL << 63)

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, QUEUED_RB_BYTES);
} queued SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_USER_RINGBUF);
	__uint(max_entries, DISPATCH_RB_BYTES);
} dispatched SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, INFLIGHT_SLOTS);
	__type(key, u32);
	__type(value, struct inflight_slot);
} inflight SEC(".maps");

struct timer_wrap {
	struct bpf_timer timer;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct timer_wrap);
} fair_timer SEC(".maps");

/*
 * Put preempted tasks back in line from BPF (fair_requeue_if_preempted()).
 * See configs/default.toml for why it is on by default.
 */
KNOB bool fair_requeue_preempted = true;

/* In-flight sequence numbers: [tail + 1, head] are handed out. */
volatile u64 inflight_head, inflight_tail;

/* Decisions userspace has submitted (written by userspace) and drained. */
volatile u64 user_submitted, user_drained;

/* Until when enqueues bypass userspace after a rescue. */
volatile u64 degraded_until_ns;

/* Tasks waiting in the shared DSQ, as last seen by ops.dispatch(). */
volatile u64 nr_queued_shared;

static struct inflight_slot *slot_of(u64 seq)
{
	u32 idx = (seq - 1) & (INFLIGHT_SLOTS - 1);

	return bpf_map_lookup_elem(&inflight, &idx);
}

/*
 * Per-CPU state of the ops.dispatch() call in progress. It lives in a map,
 * not on the stack, so the verifier does not unroll the drain loop once
 * per possible count.
 */
struct dispatch_state {
	u32 budget;   /* decisions left to drain */
	u32 inserted; /* tasks inserted into DSQs so far */
	u32 deferred; /* the previous call returned early to be called again */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct dispatch_state);
} dispatch_states SEC(".maps");

static struct dispatch_state *dispatch_state_get(void)
{
	u32 key = 0;

	return bpf_map_lookup_elem(&dispatch_states, &key);
}

__hidden bool fair_enqueue_user(struct task_struct *p, u64 enq_flags)
{
	struct task_ctx *tctx;
	struct queued_task *msg;
	struct inflight_slot *slot;
	u64 now = scx_bpf_now(), seq;
	bool wakeup = enq_flags & SCX_ENQ_WAKEUP;

	if (time_before(now, degraded_until_ns))
		return false;
	if (inflight_head - inflight_tail >= INFLIGHT_SLOTS - 1)
		return false;

	msg = bpf_ringbuf_reserve(&queued, sizeof(*msg), 0);
	if (!msg)
		return false;

	seq = __sync_fetch_and_add(&inflight_head, 1) + 1;
	slot = slot_of(seq);
	if (!slot) {
		bpf_ringbuf_discard(msg, 0);
		return false;
	}
	WRITE_ONCE(slot->pid, p->pid);
	WRITE_ONCE(slot->enq_ns, now);
	WRITE_ONCE(slot->wakeup, wakeup);
	WRITE_ONCE(slot->seq, seq);

	msg->pid = p->pid;
	msg->tgid = p->tgid;
	msg->cpu = scx_bpf_task_cpu(p);
	msg->slot = (seq - 1) & (INFLIGHT_SLOTS - 1);
	msg->seq = seq;
	msg->nr_cpus_allowed = p->nr_cpus_allowed;
	msg->weight = p->scx.weight;
	msg->sum_exec_runtime = p->se.sum_exec_runtime;
	tctx = task_ctx_get(p);
	msg->express_exec_ns = tctx ? tctx->express_exec_ns : 0;
	msg->flags = wakeup ? QUEUED_WAKEUP : 0;
	msg->enq_ns = bpf_ktime_get_ns();
	if (tctx) {
		/* Wakeup latency of the fair path, measured in fair_running(). */
		tctx->fair_woken_ns = wakeup ? msg->enq_ns : 0;
		tctx->fair_decided_ns = 0;
	}
	bpf_ringbuf_submit(msg, 0);

	stat_inc(STAT_USER_QUEUED);
	return true;
}

/*
 * A fair task preempted before its slice ended (by an express wakeup or an
 * earlier deadline) goes back in line by BPF, with its deadline and the
 * rest of its slice: userspace's decision still holds, and the round trip
 * would cost the CPU that preempted it a userspace wakeup (an irq_work)
 * right when its new task starts. Userspace sees the run at the next one.
 */
__hidden bool fair_requeue_if_preempted(struct task_struct *p, u64 enq_flags)
{
	struct task_ctx *tctx;
	u64 used, left, dsq;

	if (!fair_requeue_preempted || (enq_flags & SCX_ENQ_WAKEUP))
		return false;
	tctx = task_ctx_get(p);
	if (!tctx || !tctx->fair_dispatched || !tctx->fair_run_slice_ns ||
	    p->se.sum_exec_runtime < tctx->fair_run_exec_ns)
		return false;
	used = p->se.sum_exec_runtime - tctx->fair_run_exec_ns;
	if (used + FAIR_MIN_LEFT_NS > tctx->fair_run_slice_ns)
		return false;
	left = tctx->fair_run_slice_ns - used;

	dsq = fair_dsq(p, -1);
	tctx->fair_run_slice_ns = 0;
	scx_bpf_dsq_insert_vtime(p, dsq, left, p->scx.dsq_vtime, enq_flags);
	stat_inc(STAT_FAIR_PREEMPTED);
	fair_kick_idle(p, dsq);
	return true;
}

/*
 * Deadline of a task BPF places without userspace (fallback, rescue). One
 * that stayed runnable on the fair path moves on from its last deadline by
 * the CPU time it used since, scaled by its weight, as userspace would
 * charge it. Placing it at vtime_now like a woken task would split a CPU
 * evenly whatever the nice values for as long as userspace is bypassed (a
 * second after every rescue), and userspace's debt ceiling would then
 * forgive the difference.
 */
static u64 bpf_only_vtime(struct task_struct *p, bool wakeup)
{
	struct task_ctx *tctx = task_ctx_get(p);
	u64 used;

	if (wakeup || !tctx || !tctx->fair_dispatched ||
	    p->se.sum_exec_runtime < tctx->fair_run_exec_ns)
		return vtime_now;
	used = p->se.sum_exec_runtime - tctx->fair_run_exec_ns;
	return p->scx.dsq_vtime + scale_by_task_weight_inverse(p, used);
}

__hidden void fair_enqueue_fallback(struct task_struct *p, u64 enq_flags)
{
	u64 dsq = fair_dsq(p, -1);
	u64 vtime = bpf_only_vtime(p, enq_flags & SCX_ENQ_WAKEUP);

	note_fair_dispatch(p, true);
	scx_bpf_dsq_insert_vtime(p, dsq, slice_max_ns, vtime, enq_flags);
	stat_inc(STAT_FALLBACK);
	fair_kick_idle(p, dsq);
}

/* Insert @p where userspace (or the rescue path) decided. */
static void usersched_insert(struct task_struct *p, s32 cpu, u64 slice_ns, u64 vtime, bool wakeup)
{
	struct dispatch_state *ds;
	u64 dsq = fair_dsq(p, cpu);

	note_fair_dispatch(p, true);
	if (!slice_ns || slice_ns > slice_max_ns)
		slice_ns = slice_max_ns;
	scx_bpf_dsq_insert_vtime(p, dsq, slice_ns, vtime, 0);
	ds = dispatch_state_get();
	if (ds)
		ds->inserted++;
	fair_kick_idle(p, dsq);
	if (wakeup)
		fair_preempt_check(p, dsq != SHARED_DSQ ? (s32)dsq : scx_bpf_task_cpu(p), vtime,
				   SHARED_CLOCK);
}

/* Claim a slot for dispatch: true for exactly one of userspace and rescue. */
static bool slot_claim(struct inflight_slot *slot, u64 seq)
{
	return __sync_bool_compare_and_swap(&slot->seq, seq, seq | SLOT_DONE);
}

static long drain_one(struct bpf_dynptr *dynptr, void *data)
{
	struct dispatch_state *ds = dispatch_state_get();
	struct dispatched_task msg;
	struct inflight_slot *slot;
	struct task_struct *p;

	if (bpf_dynptr_read(&msg, sizeof(msg), dynptr, 0, 0))
		return 1;
	__sync_fetch_and_add(&user_drained, 1);
	stat_inc(STAT_USER_DISPATCHED);

	/* A slot already rescued means the task was dispatched by BPF. */
	slot = slot_of(msg.seq);
	if (!slot || !slot_claim(slot, msg.seq))
		goto next;

	p = bpf_task_from_pid(msg.pid);
	if (p) {
		usersched_insert(p, msg.cpu, msg.slice_ns, msg.vtime, READ_ONCE(slot->wakeup));
		bpf_task_release(p);
	}
next:
	if (!ds || ds->budget <= 1)
		return 1;
	ds->budget--;
	return 0;
}

/* Dispatch the task of @slot ourselves: userspace took too long. */
static void rescue(struct inflight_slot *slot, u64 seq)
{
	struct task_struct *p;

	if (!slot_claim(slot, seq))
		return;
	p = bpf_task_from_pid(slot->pid);
	if (!p)
		return;
	usersched_insert(p, -1, slice_max_ns, bpf_only_vtime(p, READ_ONCE(slot->wakeup)), false);
	bpf_task_release(p);
	stat_inc(STAT_RESCUED);
}

/*
 * Retire answered slots from the tail, and rescue the oldest ones if they
 * waited longer than rescue_ns. Bounded work per call.
 */
static void retire_and_rescue(u64 now)
{
	struct inflight_slot *slot;
	u64 tail, seq, cur;
	int i;

	bpf_for(i, 0, 8) {
		tail = inflight_tail;
		if (tail >= inflight_head)
			break;
		seq = tail + 1;
		slot = slot_of(seq);
		if (!slot)
			break;
		cur = READ_ONCE(slot->seq);
		if (cur == seq) {
			/* Still in flight: rescue it once it is too old. */
			if (now - READ_ONCE(slot->enq_ns) < rescue_ns)
				break;
			rescue(slot, seq);
			degraded_until_ns = now + DEGRADED_NS;
		} else if (cur != (seq | SLOT_DONE)) {
			/* Handed out, not written yet: come back later. */
			break;
		}
		__sync_bool_compare_and_swap(&inflight_tail, tail, seq);
	}
}

/*
 * First half of ops.dispatch(): move userspace's decisions to their DSQs and
 * rescue what waited too long. Returns false when the caller should return
 * at once (see below); the kernel then calls ops.dispatch() again.
 */
__hidden bool usersched_drain(void)
{
	struct dispatch_state *ds = dispatch_state_get();
	bool again = true;

	if (ds) {
		ds->budget = DRAIN_BATCH;
		ds->inserted = 0;
		again = ds->deferred;
		ds->deferred = 0;
		bpf_user_ringbuf_drain(&dispatched, drain_one, NULL, 0);
	}
	retire_and_rescue(scx_bpf_now());
	nr_queued_shared = scx_bpf_dsq_nr_queued(SHARED_DSQ);

	/*
	 * Inserts made in ops.dispatch() reach their DSQ only when it returns,
	 * so a task just drained is not visible to the pick below: a woken task
	 * bound for this CPU would wait behind whatever we picked, for a whole
	 * slice. Return instead: the kernel calls ops.dispatch() again when the
	 * call inserted tasks and the local DSQ is still empty, and that call
	 * sees them. Once: the next call picks even if it drained more.
	 */
	if (ds && ds->inserted && !again) {
		ds->deferred = 1;
		return false;
	}
	return true;
}

/* Earliest deadline of a DSQ's head, or U64 max if empty. */
static u64 head_vtime(u64 dsq)
{
	struct task_struct *p = __COMPAT_scx_bpf_dsq_peek(dsq);

	return p ? p->scx.dsq_vtime : (u64)-1;
}

/*
 * A task userspace ordered starts running: advance vtime_now. Not to the
 * latest deadline started: CPU hogs' deadlines spread over several slices,
 * and a woken task placed one slice before the latest one lands in the
 * middle of them, behind every hog that lags (up to slice_max_us x a few
 * per wakeup).
 */
__hidden void usersched_running(struct task_struct *p)
{
	u64 front = p->scx.dsq_vtime, head;

	if (!time_before(vtime_now, front))
		return;
	/* Only then can the front move: peek at the shared DSQ. */
	head = head_vtime(SHARED_DSQ);
	/*
	 * An empty shared DSQ reads as U64 max, which time_before() wraps to
	 * "before" every deadline: skip it, or the front stops whenever the
	 * shared DSQ is empty.
	 */
	if (head != (u64)-1 && time_before(head, front))
		front = head;
	if (time_before(vtime_now, front))
		vtime_now = front;
}

/* Wake an idle CPU when decisions wait to be drained or a rescue is due. */
static int fair_timer_fn(void *map, int *key, struct bpf_timer *timer)
{
	struct inflight_slot *slot;
	bool work = user_submitted != user_drained;
	u64 tail = inflight_tail;

	if (!work && tail < inflight_head) {
		slot = slot_of(tail + 1);
		work = slot && scx_bpf_now() - READ_ONCE(slot->enq_ns) >= rescue_ns;
	}
	if (work) {
		const struct cpumask *idle = scx_bpf_get_idle_cpumask();
		s32 cpu = bpf_cpumask_first(idle);

		scx_bpf_put_idle_cpumask(idle);
		if (cpu < scx_bpf_nr_cpu_ids())
			scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
	}
	bpf_timer_start(timer, FAIR_TIMER_NS, 0);
	return 0;
}

__hidden s32 usersched_init(void)
{
	u32 key = 0;
	struct bpf_timer *timer;

	timer = bpf_map_lookup_elem(&fair_timer, &key);
	if (!timer) {
		scx_bpf_error("fair timer missing");
		return -ENOENT;
	}
	bpf_timer_init(timer, &fair_timer, CLOCK_MONOTONIC);
	bpf_timer_set_callback(timer, fair_timer_fn);
	return bpf_timer_start(timer, FAIR_TIMER_NS, 0);
}
