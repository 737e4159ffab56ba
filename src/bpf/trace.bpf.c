/* SPDX-License-Identifier: GPL-2.0 */
/*
 * `scx_express trace`: the scheduler's CUDA and marker probes, plus
 * sched_switch and IRQ tracepoints, in a BPF object of their own with no
 * sched_ext in it, so it loads on any kernel with BTF and uprobes.
 *
 * 1. Probes. The uprobe programs run the scheduler's classification code
 *    (classify.bpf.h: same maps, same rules), then report the hit through
 *    the `events` ring buffer with the thread's class after it. Userspace
 *    (src/trace.rs) attaches them with the scheduler's discovery code and,
 *    with `--probe-policy scheduler`, the scheduler's duty-cycled windows.
 *
 * 2. Nested calls. CUDA entry points call one another (cudaLaunchKernel in
 *    libcudart reaches cuLaunchKernel in libcuda), so one launch can hit
 *    several probes. A hit whose return address lies in a file that has
 *    itself had a probe hit is flagged TRACE_F_NESTED; so is a tail call
 *    (same stack pointer and return address as the thread's last outer hit,
 *    but another probe). Userspace counts launches as hits not nested.
 *
 * 3. Which threads are traced. sched_switch and IRQ events are sent only
 *    for threads that made a CUDA or marker call (they have a task_class
 *    entry), or every thread of `target_tgid` (--pid). Probes ignore other
 *    processes when target_tgid is set.
 *
 * 4. IRQs. Hard IRQ and softirq time is summed per CPU for every IRQ; an
 *    event is sent when the interrupted task is traced. irq_handler_entry/
 *    exit see device IRQs only: not the local timer or IPIs.
 *
 * 5. Agent steps. For threads of class agent (marked, rule-classified or
 *    set with `mark`), a step runs from a wakeup out of an interruptible
 *    sleep to the next interruptible sleep; struct express_step
 *    (trace_intf.h) says what it holds. The sched_wakeup, sched_switch, IRQ
 *    and handle_mm_fault hooks add the parts up in task storage and send one
 *    TRACE_EV_STEP event per step: one event per ~100 us-1 ms step, where
 *    raw wakeup/fault events would be several. Other threads cost one task
 *    storage lookup per wakeup and per page fault.
 *
 * With `emit_events` off (--no-events) the probes do exactly what the
 * scheduler's do and nothing more, and no tracepoint is attached: that
 * measures the scheduler's probe cost.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "intf.h"

#define NSEC_PER_USEC 1000ULL
#define NSEC_PER_MSEC (1000ULL * NSEC_PER_USEC)

/* ---- Knobs (rodata, set by src/trace.rs before load) ---- */

/* The scheduler's [classify] knobs, as classify.bpf.h expects them. */
const volatile u64 idle_demote_ns = 2000 * NSEC_PER_MSEC;
const volatile bool class_scope_process[NR_CLASSES];

#include "classify.bpf.h"

char _license[] SEC("license") = "GPL";

/* --pid: trace only this process (tgid); 0 traces every process. */
const volatile u32 target_tgid;
/* Send events; off, the probes only classify (the scheduler's own cost). */
const volatile bool emit_events = true;

/* ---- Maps ---- */

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, TRACE_RB_BYTES);
} events SEC(".maps");

/* Events that did not fit in the ring buffer. */
u64 dropped_events;

/* Per thread, for tail-call detection: the last hit that was not nested. */
struct express_trace_task {
	u64 sp;
	u64 ret;
	u64 cookie;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct express_trace_task);
} trace_tasks SEC(".maps");

/* Per probe point (attach cookie): the inode of the file it is in. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TRACE_MAX_POINTS);
	__type(key, u32);
	__type(value, u64);
} point_inode SEC(".maps");

/* Inodes (kernel addresses) of files with a probe hit: the CUDA libraries. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, u64);
	__type(value, u8);
} cuda_inodes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TRACE_MAX_IRQS);
	__type(key, u32);
	__type(value, struct express_irq_total);
} hardirq_totals SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TRACE_MAX_SOFTIRQS);
	__type(key, u32);
	__type(value, struct express_irq_total);
} softirq_totals SEC(".maps");

/* Hard IRQ handler names, by IRQ number. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TRACE_MAX_IRQS);
	__type(key, u32);
	__type(value, char[TRACE_COMM_LEN]);
} irq_names SEC(".maps");

/* Per CPU: when the running hard IRQ (0) and softirq (1) began. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, u64);
} irq_start SEC(".maps");

/*
 * Per CPU: IRQ time so far, for agent steps, by slot: hard IRQs, all
 * softirqs, and of those the network (NET_TX, NET_RX) and the block
 * (BLOCK, IRQ_POLL) vectors, so that a step's softirq time says whose
 * work it was: a loopback send runs NET_RX for its receiver in the
 * sender's softirq; block completions finished in softirq run BLOCK.
 */
enum irq_slot {
	IRQ_HARD,
	IRQ_SOFT,
	IRQ_SOFT_NET,
	IRQ_SOFT_BLOCK,
	NR_IRQ_SLOTS,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64[NR_IRQ_SLOTS]);
} irq_cum SEC(".maps");

/* Per agent thread: the step in progress. */
struct step_state {
	struct express_step s;	    /* sums so far; s.start_ns == 0: no step */
	u64 wait_since;		    /* runnable, not running, since (0: not) */
	u64 run_since;		    /* on CPU since (0: not) */
	u64 dsleep_since;	    /* in D-state sleep since (0: not) */
	u64 fault_since;	    /* in handle_mm_fault since (0: not) */
	u64 irq_snap[NR_IRQ_SLOTS]; /* irq_cum of snap_cpu when waiting/running began */
	s32 snap_cpu;
	bool dsleep_io;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct step_state);
} step_tasks SEC(".maps");

/* ---- Helpers ---- */

static __always_inline bool traced(struct task_struct *p)
{
	if (target_tgid)
		return p->tgid == target_tgid;
	return bpf_task_storage_get(&task_class, p, 0, 0) != NULL;
}

static __always_inline struct express_event *event_new(u32 type, u64 now)
{
	struct express_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		__sync_fetch_and_add(&dropped_events, 1);
		return NULL;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->ts_ns = now;
	e->type = type;
	e->cpu = bpf_get_smp_processor_id();
	return e;
}

/*
 * Userspace reads the ring every 100 ms, so do not wake it per event (that
 * would preempt the traced threads ~100k times a second); wake it early only
 * when the ring is a quarter full.
 */
static __always_inline void event_submit(void *e)
{
	u64 flags = BPF_RB_NO_WAKEUP;

	if (bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) > TRACE_RB_BYTES / 4)
		flags = BPF_RB_FORCE_WAKEUP;
	bpf_ringbuf_submit(e, flags);
}

static __always_inline void event_current(struct express_event *e)
{
	u64 id = bpf_get_current_pid_tgid();

	e->pid = id >> 32;
	e->tid = (u32)id;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
}

struct vma_inode {
	u64 inode;
};

static long vma_inode_cb(struct task_struct *task, struct vm_area_struct *vma, void *data)
{
	struct vma_inode *out = data;
	struct file *f = vma->vm_file;

	out->inode = f ? (u64)f->f_inode : 0;
	return 0;
}

/* Kernel address of the inode of the file mapped at @addr, or 0. */
static __always_inline u64 inode_at(struct task_struct *cur, u64 addr)
{
	struct vma_inode out = {};

	if (bpf_find_vma(cur, addr, vma_inode_cb, &out, 0))
		return 0;
	return out.inode;
}

/*
 * Is this CUDA hit a call made from inside a probed library (or a tail
 * call), rather than a new call by the application? Sets *unknown when the
 * caller could not be read.
 */
static __always_inline bool nested_call(struct pt_regs *ctx, u64 cookie, bool *unknown)
{
	struct task_struct *cur = bpf_get_current_task_btf();
	u64 sp = PT_REGS_SP(ctx), ret = 0, ino;
	u32 key = cookie;
	u64 *own;
	struct express_trace_task *tt;
	bool nested = false;
	u8 one = 1;

	/* Learn which file this probe point is in, once per point. */
	own = key < TRACE_MAX_POINTS ? bpf_map_lookup_elem(&point_inode, &key) : NULL;
	if (own && !*own) {
		ino = inode_at(cur, PT_REGS_IP(ctx));
		if (ino) {
			*own = ino;
			bpf_map_update_elem(&cuda_inodes, &ino, &one, BPF_ANY);
		}
	}

	/* At a function's first instruction the return address is at *sp. */
	if (bpf_probe_read_user(&ret, sizeof(ret), (void *)sp) || !ret) {
		*unknown = true;
	} else {
		ino = inode_at(cur, ret);
		if (!ino)
			*unknown = true;
		else if (bpf_map_lookup_elem(&cuda_inodes, &ino))
			nested = true;
	}

	tt = bpf_task_storage_get(&trace_tasks, cur, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!tt)
		return nested;
	if (!nested && ret && tt->sp == sp && tt->ret == ret && tt->cookie != cookie)
		nested = true; /* a tail call from the last outer hit */
	if (!nested) {
		tt->sp = sp;
		tt->ret = ret;
		tt->cookie = cookie;
	}
	return nested;
}

/* One CUDA or marker probe hit: classify as the scheduler does, then report. */
static __always_inline int on_probe(struct pt_regs *ctx, u32 type, u32 mark_class)
{
	struct task_struct *cur;
	struct express_event *e;
	u64 now = bpf_ktime_get_ns(), cookie;
	u32 before, flags = 0;
	bool unknown = false;

	if (target_tgid && (bpf_get_current_pid_tgid() >> 32) != target_tgid)
		return 0;

	if (!emit_events) {
		if (type == TRACE_EV_MARK)
			note_marker(mark_class, now);
		else
			note_cuda_call(type == TRACE_EV_LAUNCH, now);
		return 0;
	}

	cur = bpf_get_current_task_btf();
	before = class_of(cur, now);
	if (type == TRACE_EV_MARK)
		note_marker(mark_class, now);
	else
		note_cuda_call(type == TRACE_EV_LAUNCH, now);

	cookie = bpf_get_attach_cookie(ctx);
	if (type != TRACE_EV_MARK && nested_call(ctx, cookie, &unknown))
		flags |= TRACE_F_NESTED;
	if (unknown)
		flags |= TRACE_F_CALLER_UNKNOWN;

	e = event_new(type, now);
	if (!e)
		return 0;
	event_current(e);
	e->class = class_of(cur, now);
	if (e->class != before)
		flags |= TRACE_F_CLASSIFIED;
	e->flags = flags;
	e->arg = cookie;
	event_submit(e);
	return 0;
}

/* ---- Probes, attached by src/trace.rs with a cookie naming the point ---- */

SEC("uprobe")
int BPF_UPROBE(trace_launch)
{
	return on_probe(ctx, TRACE_EV_LAUNCH, 0);
}

SEC("uprobe")
int BPF_UPROBE(trace_sync)
{
	return on_probe(ctx, TRACE_EV_SYNC, 0);
}

SEC("uprobe")
int BPF_UPROBE(trace_mark_agent)
{
	return on_probe(ctx, TRACE_EV_MARK, CLASS_AGENT);
}

SEC("uprobe")
int BPF_UPROBE(trace_mark_gpu)
{
	return on_probe(ctx, TRACE_EV_MARK, CLASS_GPU);
}

SEC("uprobe")
int BPF_UPROBE(trace_mark_normal)
{
	return on_probe(ctx, TRACE_EV_MARK, CLASS_NORMAL);
}

/* ---- Context switches ---- */

/* A switch event for traced threads (--pid, CUDA and marker callers). */
static __always_inline void switch_event(bool preempt, struct task_struct *prev,
					 struct task_struct *next, unsigned int prev_state, u64 now)
{
	struct express_event *e;
	u32 flags = 0;

	if (traced(prev))
		flags |= TRACE_F_PREV;
	if (traced(next))
		flags |= TRACE_F_NEXT;
	if (!flags)
		return;
	if (preempt)
		flags |= TRACE_F_PREEMPT;

	e = event_new(TRACE_EV_SWITCH, now);
	if (!e)
		return;
	e->flags = flags;
	e->pid = prev->tgid;
	e->tid = prev->pid;
	e->next_pid = next->tgid;
	e->next_tid = next->pid;
	e->value = prev_state;
	bpf_probe_read_kernel_str(e->comm, sizeof(e->comm), prev->comm);
	bpf_probe_read_kernel_str(e->other, sizeof(e->other), next->comm);
	event_submit(e);
}

static __always_inline void step_switch_out(struct task_struct *prev, bool preempt,
					    unsigned int prev_state, u64 now);
static __always_inline void step_switch_in(struct task_struct *next, u64 now);

SEC("tp_btf/sched_switch")
int BPF_PROG(trace_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	u64 now = bpf_ktime_get_ns();

	switch_event(preempt, prev, next, prev_state, now);
	step_switch_out(prev, preempt, prev_state, now);
	step_switch_in(next, now);
	return 0;
}

/* ---- IRQs ---- */

static __always_inline void irq_begin(u32 slot)
{
	u64 *start = bpf_map_lookup_elem(&irq_start, &slot);

	if (start)
		*start = bpf_ktime_get_ns();
}

/* Duration of the IRQ of @slot ending now, or 0 if its start was not seen. */
static __always_inline u64 irq_end(u32 slot, u64 now)
{
	u64 *start = bpf_map_lookup_elem(&irq_start, &slot);
	u64 dur;

	if (!start || !*start || *start > now)
		return 0;
	dur = now - *start;
	*start = 0;
	return dur;
}

static __always_inline void irq_account(void *totals, u32 key, u64 dur)
{
	struct express_irq_total *t = bpf_map_lookup_elem(totals, &key);

	if (t) {
		t->count++;
		t->ns += dur;
	}
}

/*
 * Adds @dur to this CPU's running IRQ time in @slot and, unless it is
 * NR_IRQ_SLOTS, in @part (the vector group within a softirq): one map
 * lookup for both, as this runs at the end of every IRQ on the machine.
 */
static __always_inline void irq_cum_add(u32 slot, u32 part, u64 dur)
{
	u32 key = 0;
	u64 *cum = bpf_map_lookup_elem(&irq_cum, &key);

	if (!cum)
		return;
	if (slot < NR_IRQ_SLOTS)
		cum[slot] += dur;
	if (part < NR_IRQ_SLOTS)
		cum[part] += dur;
}

/* The slot of softirq vector @vec's group, or NR_IRQ_SLOTS for none. */
static __always_inline u32 softirq_part(unsigned int vec)
{
	if (vec == NET_TX_SOFTIRQ || vec == NET_RX_SOFTIRQ)
		return IRQ_SOFT_NET;
	if (vec == BLOCK_SOFTIRQ || vec == IRQ_POLL_SOFTIRQ)
		return IRQ_SOFT_BLOCK;
	return NR_IRQ_SLOTS;
}

SEC("tp_btf/irq_handler_entry")
int BPF_PROG(trace_irq_entry, int irq, struct irqaction *action)
{
	irq_begin(0);
	return 0;
}

SEC("tp_btf/irq_handler_exit")
int BPF_PROG(trace_irq_exit, int irq, struct irqaction *action, int ret)
{
	u64 now = bpf_ktime_get_ns(), dur = irq_end(0, now);
	u32 key = irq >= 0 && irq < TRACE_MAX_IRQS ? irq : TRACE_MAX_IRQS - 1;
	char name[TRACE_COMM_LEN] = {};
	struct express_event *e;

	irq_account(&hardirq_totals, key, dur);
	irq_cum_add(IRQ_HARD, NR_IRQ_SLOTS, dur);
	if (!bpf_map_lookup_elem(&irq_names, &key)) {
		bpf_probe_read_kernel_str(name, sizeof(name), action->name);
		bpf_map_update_elem(&irq_names, &key, name, BPF_NOEXIST);
	}

	if (!traced(bpf_get_current_task_btf()))
		return 0;
	e = event_new(TRACE_EV_IRQ, now);
	if (!e)
		return 0;
	event_current(e);
	e->arg = irq;
	e->value = dur;
	bpf_probe_read_kernel_str(e->other, sizeof(e->other), action->name);
	event_submit(e);
	return 0;
}

SEC("tp_btf/softirq_entry")
int BPF_PROG(trace_softirq_entry, unsigned int vec_nr)
{
	irq_begin(1);
	return 0;
}

SEC("tp_btf/softirq_exit")
int BPF_PROG(trace_softirq_exit, unsigned int vec_nr)
{
	u64 now = bpf_ktime_get_ns(), dur = irq_end(1, now);
	u32 key = vec_nr < TRACE_MAX_SOFTIRQS ? vec_nr : TRACE_MAX_SOFTIRQS - 1;
	struct express_event *e;

	irq_account(&softirq_totals, key, dur);
	irq_cum_add(IRQ_SOFT, softirq_part(vec_nr), dur);
	if (!traced(bpf_get_current_task_btf()))
		return 0;
	e = event_new(TRACE_EV_SOFTIRQ, now);
	if (!e)
		return 0;
	event_current(e);
	e->arg = vec_nr;
	e->value = dur;
	event_submit(e);
	return 0;
}

/* ---- Agent steps (see 5. at the top) ---- */

#define TASK_UNINTERRUPTIBLE_BIT 0x2

/* task_struct with `cpu` at the top level (kernels without thread_info.cpu). */
struct task_struct___cpu {
	unsigned int cpu;
} __attribute__((preserve_access_index));

/* The CPU whose runqueue @p is on, or was last on. */
static __always_inline s32 task_cpu_of(struct task_struct *p)
{
	if (bpf_core_field_exists(p->thread_info.cpu))
		return BPF_CORE_READ(p, thread_info.cpu);
	return BPF_CORE_READ((struct task_struct___cpu *)p, cpu);
}

/* A waiting or running interval begins on @cpu: note its IRQ time so far. */
static __always_inline void step_snap(struct step_state *st, s32 cpu)
{
	u32 key = 0;
	u64 *cum = bpf_map_lookup_percpu_elem(&irq_cum, &key, cpu);

	st->snap_cpu = cpu;
	for (int i = 0; i < NR_IRQ_SLOTS; i++)
		st->irq_snap[i] = cum ? cum[i] : 0;
}

/* The interval begun by step_snap ends: add that CPU's IRQ time since. */
static __always_inline void step_irq(struct step_state *st, bool running)
{
	u32 key = 0;
	u64 *cum = bpf_map_lookup_percpu_elem(&irq_cum, &key, st->snap_cpu);
	u64 d[NR_IRQ_SLOTS] = {};

	if (!cum)
		return;
	for (int i = 0; i < NR_IRQ_SLOTS; i++)
		if (cum[i] > st->irq_snap[i])
			d[i] = cum[i] - st->irq_snap[i];
	st->s.hardirq_ns += d[IRQ_HARD];
	st->s.softirq_ns += d[IRQ_SOFT];
	st->s.softirq_net_ns += d[IRQ_SOFT_NET];
	st->s.softirq_block_ns += d[IRQ_SOFT_BLOCK];
	if (running)
		st->s.irq_run_ns += d[IRQ_HARD] + d[IRQ_SOFT];
}

static __always_inline void step_dsleep_end(struct step_state *st, u64 now)
{
	u64 d = now - st->dsleep_since;

	if (st->dsleep_io) {
		st->s.io_ns += d;
		st->s.io_waits++;
	} else {
		st->s.dsleep_ns += d;
	}
	st->dsleep_since = 0;
}

static __always_inline void step_begin(struct step_state *st, struct task_struct *p, u64 now)
{
	__builtin_memset(&st->s, 0, sizeof(st->s));
	st->s.type = TRACE_EV_STEP;
	st->s.start_ns = now;
	st->s.pid = p->tgid;
	st->s.tid = p->pid;
	st->s.class = CLASS_AGENT;
	bpf_probe_read_kernel_str(st->s.comm, sizeof(st->s.comm), p->comm);
	st->run_since = 0;
	st->dsleep_since = 0;
	st->fault_since = 0;
}

/* The step ends at @now: send it. */
static __always_inline void step_end(struct step_state *st, s32 cpu, u64 now)
{
	struct express_step *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (e) {
		st->s.ts_ns = now;
		st->s.cpu = cpu;
		__builtin_memcpy(e, &st->s, sizeof(*e));
		event_submit(e);
	} else {
		__sync_fetch_and_add(&dropped_events, 1);
	}
	st->s.start_ns = 0;
	st->wait_since = 0;
	st->run_since = 0;
	st->dsleep_since = 0;
}

/*
 * A step begins when an agent thread is woken from a sleep that ended its
 * last step; a wakeup inside a step ends a D-state sleep. Either way the
 * thread now waits on the runqueue of the CPU it was woken onto.
 */
SEC("tp_btf/sched_wakeup")
int BPF_PROG(trace_sched_wakeup, struct task_struct *p)
{
	u64 now = bpf_ktime_get_ns();
	struct step_state *st;

	if (class_of(p, now) != CLASS_AGENT)
		return 0;
	st = bpf_task_storage_get(&step_tasks, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!st)
		return 0;
	if (st->s.start_ns) {
		/* Running or queued already: nothing new. */
		if (!st->dsleep_since)
			return 0;
		step_dsleep_end(st, now);
	} else {
		/* Woken before it switched out: it never slept. */
		if (BPF_CORE_READ(p, on_cpu))
			return 0;
		step_begin(st, p, now);
	}
	st->wait_since = now;
	step_snap(st, task_cpu_of(p));
	return 0;
}

/* @prev leaves the CPU: preempted (waits again), D-state sleep, or step end. */
static __always_inline void step_switch_out(struct task_struct *prev, bool preempt,
					    unsigned int prev_state, u64 now)
{
	struct step_state *st = bpf_task_storage_get(&step_tasks, prev, 0, 0);
	s32 cpu = bpf_get_smp_processor_id();

	if (!st || !st->s.start_ns)
		return;
	if (st->run_since) {
		st->s.run_ns += now - st->run_since;
		st->run_since = 0;
		step_irq(st, true);
	}
	if (preempt || !prev_state) {
		st->s.preempts++;
		st->wait_since = now;
		step_snap(st, cpu);
	} else if (prev_state & TASK_UNINTERRUPTIBLE_BIT) {
		st->dsleep_since = now;
		st->dsleep_io = bpf_core_field_exists(prev->in_iowait) &&
				BPF_CORE_READ_BITFIELD(prev, in_iowait);
	} else {
		step_end(st, cpu, now);
	}
}

/* @next gets the CPU: its runqueue wait (if any) ends, a run begins. */
static __always_inline void step_switch_in(struct task_struct *next, u64 now)
{
	struct step_state *st = bpf_task_storage_get(&step_tasks, next, 0, 0);
	u64 w;

	if (!st || !st->s.start_ns)
		return;
	if (st->dsleep_since)
		step_dsleep_end(st, now); /* its wakeup was not seen */
	if (st->wait_since) {
		w = now - st->wait_since;
		st->s.runq_ns += w;
		if (!st->s.run_ns)
			st->s.wake_wait_ns = w;
		st->wait_since = 0;
		step_irq(st, false);
	}
	st->run_since = now;
	step_snap(st, bpf_get_smp_processor_id());
}

/* Page faults of a thread in a step: count and time in handle_mm_fault. */
SEC("fentry/handle_mm_fault")
int BPF_PROG(trace_fault_entry)
{
	struct step_state *st = bpf_task_storage_get(&step_tasks, bpf_get_current_task_btf(), 0, 0);

	if (st && st->s.start_ns)
		st->fault_since = bpf_ktime_get_ns();
	return 0;
}

SEC("fexit/handle_mm_fault")
int BPF_PROG(trace_fault_exit)
{
	struct step_state *st = bpf_task_storage_get(&step_tasks, bpf_get_current_task_btf(), 0, 0);

	if (!st || !st->fault_since)
		return 0;
	if (st->s.start_ns) {
		st->s.fault_ns += bpf_ktime_get_ns() - st->fault_since;
		st->s.faults++;
	}
	st->fault_since = 0;
	return 0;
}
