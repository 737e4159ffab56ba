/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Types and constants shared by the BPF side and the Rust side of
 * scx_express. bindgen turns this file into src/bpf_intf.rs.
 */
#ifndef __EXPRESS_INTF_H
#define __EXPRESS_INTF_H

#ifndef __KERNEL__
typedef int s32;
typedef unsigned int u32;
typedef long long s64;
typedef unsigned long long u64;
#endif

enum express_consts {
	/* Upper bound on CPU ids the scheduler handles. */
	MAX_CPUS = 1024,
	/* Slots that track tasks handed to the userspace scheduler. Power of two. */
	INFLIGHT_SLOTS = 16384,
	/* Ring buffer sizes (bytes). */
	QUEUED_RB_BYTES = 4 * 1024 * 1024,
	DISPATCH_RB_BYTES = 4 * 1024 * 1024,
	/* Decisions drained from userspace per ops.dispatch() call (< dispatch batch). */
	DRAIN_BATCH = 16,
	/* Shared vtime-ordered DSQ of the fair path; per-CPU DSQs use the CPU id. */
	SHARED_DSQ = MAX_CPUS,
	/* Virtual clocks: one per CPU for the tasks pinned to it, then the shared one. */
	SHARED_CLOCK = MAX_CPUS,
	NR_FAIR_CLOCKS = MAX_CPUS + 1,
	/* Dispatch target meaning "any CPU the task may run on". */
	CPU_ANY = -1,
	/*
	 * The class and tenant quotas (budget.bpf.c): max_share x CPUs of lane
	 * time per this many ms, and at most one such period's worth at once.
	 */
	QUOTA_PERIOD_MS = 100,
	/* Configured [[tenants]], at most (tenant.bpf.c, src/config.rs). */
	MAX_TENANTS = 16,
	/* Bytes of a tenant's name in `tenant_names`, with its NUL. */
	TENANT_NAME_LEN = 32,
	/*
	 * Wakeup-latency histogram buckets: [0] under 1 us, [k] 2^(k-1) to
	 * 2^k us, the last one 2^(LAT_BUCKETS-2) us (262 ms) and more.
	 */
	LAT_BUCKETS = 20,
	/* Latency groups (`lat_stats`): one per class, then one per tenant. */
	NR_LAT_GROUPS = 3 + MAX_TENANTS,
};

/* Per-CPU event counters (the `stats` map); userspace sums them. */
enum stat_idx {
	STAT_USER_QUEUED,	 /* tasks handed to the userspace scheduler */
	STAT_USER_DISPATCHED,	 /* decisions received back from userspace */
	STAT_DIRECT_IDLE,	 /* wakeups placed straight on an idle CPU */
	STAT_KTHREAD,		 /* per-CPU kthreads dispatched locally */
	STAT_USERSCHED,		 /* wakeups of the scheduler's own threads */
	STAT_FALLBACK,		 /* enqueued by BPF alone (userspace busy or full) */
	STAT_RESCUED,		 /* in-flight tasks dispatched by BPF after rescue_ms */
	STAT_FAIR_PREEMPT,	 /* fair wakeups that preempted a later-deadline task */
	STAT_FAIR_WAKEUPS,	 /* fair wakeups decided by userspace that ran */
	STAT_FAIR_DECIDE_NS,	 /* their enqueue -> decision inserted delays (ns) */
	STAT_FAIR_WAIT_NS,	 /* their enqueue -> running delays (ns) */
	STAT_FAIR_WAIT_OVER_1MS, /* of those, waits over 1 ms */
	STAT_FAIR_PREEMPTED,	 /* preempted fair tasks put back by BPF with their deadline */
	STAT_FAIR_KEPT_LOCAL,	 /* fair tasks an express dispatch preempted, kept on their CPU */
	STAT_FAIR_QUEUED,	 /* tasks queued by the BPF fair policy (fair.mode = "bpf") */
	STAT_FAIR_CHARGED_NS,	 /* CPU time the BPF fair policy charged to vruntime (ns) */
	STAT_FAIR_FORGIVEN_NS,	 /* of it, CPU time dropped at the debt bound (ns) */
	STAT_FAIR_STARVED,	 /* queued fair tasks run out of order after STARVE_NS */
	STAT_IO_KEPT_OFF,	 /* block- and net-I/O tasks kept off a shielded CPU (irq_shield) */
	STAT_FAIR_SYNC_WAKER,	 /* synchronous fair wakeups queued on their waker's CPU */
	NR_EXPRESS_STATS,
};

/* Per-class express-lane counters (the `lane_stats` map: class * NR_LANE_STATS + idx). */
enum lane_stat_idx {
	LANE_PREV,	     /* placed on the previous CPU (idle, quiet, shallow) */
	LANE_LLC,	     /* placed on an idle quiet shallow CPU of the same LLC */
	LANE_ANY,	     /* placed on any idle quiet shallow CPU */
	LANE_PREEMPT,	     /* preempted a normal task on a quiet CPU */
	LANE_PREEMPT_WAKER,  /* of those, on the waker's CPU (synchronous wakeup) */
	LANE_NOT_QUIET,	     /* of those placed, on an IRQ-hot or deep CPU (none quiet) */
	LANE_REQUEUE,	     /* kept running at the head of its CPU after its slice */
	LANE_IRQ_HOT_SKIP,   /* idle CPUs skipped for being IRQ-hot */
	LANE_DEEP_IDLE_SKIP, /* idle CPUs skipped for being in a deep idle state */
	LANE_NO_TOKENS,	     /* task out of tokens: fair path */
	LANE_CLASS_CAP,	     /* class over its max_share: fair path */
	LANE_FALLBACK,	     /* wakeup with no suitable CPU: fair path */
	LANE_SLICE_FALLBACK, /* slice end on a CPU claimed by express work: fair path */
	LANE_WAIT_NS,	     /* sum of express dispatch -> running delays (ns) */
	LANE_WAIT_OVER_1MS,  /* express dispatches that waited over 1 ms to run */
	LANE_LOST_CPU,	     /* express runs that lost the CPU while still runnable */
	LANE_CUT_SHORT,	     /* of those, before their slice ended (preempted) */
	LANE_TENANT_CAP,     /* task's tenant over its max_share: fair path */
	LANE_HOLDS,	     /* CPUs held idle for a sleeping express task (hold.bpf.c) */
	LANE_HOLD_BACK,	     /* of those, the task came back to it within the hold */
	LANE_HELD_NS,	     /* CPU time held idle (ns) */
	LANE_HOLD_NO_QUOTA,  /* holds not started: the class's or tenant's quota had no room */
	LANE_HOLD_IRREGULAR, /* holds not started: the task's sleeps are too irregular */
	LANE_HOLD_SPARE,     /* holds not started: another CPU it may use was idle */
	LANE_HOLD_TAKEN,     /* holds ended by another task before their task's return */
	LANE_HOLD_EARLY,     /* of holds, the task came back before the window opened */
	LANE_BEHIND,	     /* every CPU busy with express work: queued behind it */
	LANE_HOLD_WHOLE,     /* of holds, over the whole sleep (classes.*.hold_whole) */
	LANE_HOLD_PARTNER,   /* holds not started: the fair task it last woke waits for a CPU */
	LANE_HOLD_PINNED,    /* work that can run only there ran on a held CPU, the hold kept */
	LANE_HOLD_LAST_CPU,  /* holds not started: every other CPU was held */
	LANE_HOLD_LONG,	     /* holds not started: the task's sleeps average over hold_us */
	LANE_RUN_NS,	     /* CPU time run in the lane (ns), charged to max_share */
	LANE_SLOW_IRQ,	     /* of waits over 1 ms, half or more in IRQs on that CPU */
	LANE_SLOW_BEHIND,    /* of the others, behind other tasks that ran there first */
	LANE_SLOW_IDLE,	     /* of the others, the CPU ran nothing: slow to start running */
	LANE_SLOW_IDLE_SKIP, /* idle CPUs passed over: slow to start lately */
	LANE_HOLD_SLOW_IDLE, /* holds not started: the CPU was slow to start lately */
	NR_LANE_STATS,
};

/* Per-tenant counters (the `tenant_stats` map: tenant * NR_TENANT_STATS + idx). */
enum tenant_stat_idx {
	TENANT_EXPRESS,	  /* express dispatches of the tenant's tasks */
	TENANT_NO_TOKENS, /* its tasks out of tokens: fair path */
	TENANT_QUOTA,	  /* the tenant over its own max_share: fair path */
	TENANT_CLASS_CAP, /* its class over the class max_share: fair path */
	NR_TENANT_STATS,
};

/*
 * Wakeup -> running latency of express-class tasks, whichever lane ran
 * them (the `lat_stats` map: group * NR_LAT_STATS + idx, group a class or
 * NR_CLASSES + tenant). The histogram follows the two counters.
 */
enum lat_stat_idx {
	LAT_WAKEUPS,	 /* wakeups measured */
	LAT_OVER_TARGET, /* of those, over the latency target */
	LAT_HIST,	 /* first of LAT_BUCKETS histogram buckets */
	NR_LAT_STATS = LAT_HIST + LAT_BUCKETS,
};

/* Per-CPU state for placement (the `cpu_ctxs` array map, one per CPU). */
struct cpu_ctx {
	u64 hardirq_enter_ns;	  /* hard IRQ entry time, 0 outside one */
	u64 softirq_enter_ns;	  /* softirq entry time, 0 outside one */
	u64 hardirq_total_ns;	  /* hard IRQ time ever, to un-nest softirq time */
	u64 hardirq_at_soft_ns;	  /* hardirq_total_ns at softirq entry */
	u64 softirq_total_ns;	  /* softirq time ever, hard IRQs nested in it excluded */
	u64 runs;		  /* task runs started here (ops.running, ops.cpu_release) */
	u64 stops;		  /* and ended (ops.stopping, ops.cpu_release) */
	u64 win_start_ns;	  /* start of the current IRQ window */
	u64 irq_ns_cur;		  /* IRQ time in the current window */
	u64 irq_ns_prev;	  /* IRQ time in the previous window */
	s32 idle_state;		  /* cpuidle state index, -1 when not idle */
	u32 curr_express;	  /* running an express-lane task */
	u64 express_runs;	  /* express-lane runs started here */
	u64 express_stop_ns;	  /* the last express run here ended at */
	u64 express_claim_ns;	  /* claimed by an express dispatch at (placement.bpf.c) */
	u32 express_claim_class;  /* the class of that dispatch */
	u64 curr_fair_deadline;	  /* deadline of the fair-path task running, on the shared clock */
	u64 curr_fair_vstart;	  /* its vruntime when that deadline was set, on the shared clock */
	u64 curr_fair_lag;	  /* how far it may lag the front (fair.bpf.c, runnable_lag()) */
	u32 curr_fair;		  /* a fair-path task runs here (its deadline is valid) */
	u32 fair_preempt_pending; /* a wakeup kicked it to preempt that task */
	u64 hold_until_ns;	  /* held for an express task until (hold.bpf.c), 0: not held */
	u64 hold_start_ns;	  /* from (fair work may run here until then) */
	u32 hold_curr_pinned;	  /* the fair task running before then can run only here */
	u32 hold_class;		  /* the class charged for it */
	u32 hold_tenant;	  /* and the tenant (index + 1, 0: none) */
	s32 hold_pid;		  /* the task it is held for */
	s32 hold_partner;	  /* the task it last woke synchronously: may run there */
	u32 rt_held;		  /* an RT task took it (ops.cpu_release) and its last
				     ops.dispatch() still saw one waiting (main.bpf.c) */
	u64 slow_idle_ns;	  /* an express task last waited over 1 ms to start here
				     from idle at (placement.bpf.c, slow_start()) */
};

/* Task classes. Every classification source writes one of these. */
enum task_class {
	CLASS_NORMAL = 0,
	CLASS_GPU = 1,
	CLASS_AGENT = 2,
	NR_CLASSES = 3,
};

/* Who set a task's class. A source never overrides a higher one. */
enum class_source {
	SRC_NONE = 0,
	SRC_PROBE = 1,	/* CUDA launch/sync uprobe; lapses after idle_demote */
	SRC_MARKER = 2, /* opt-in marker uprobe (express_mark_*) */
	SRC_RULE = 3,	/* cgroup/comm/exe rule from the config */
	SRC_CLI = 4,	/* `scx_express mark` */
};

/*
 * The task-class map's value (BPF task storage, one per thread). Every
 * classification source writes it; the scheduler reads it.
 */
struct task_class_info {
	u32 class;	  /* enum task_class */
	u32 source;	  /* enum class_source */
	u64 launches;	  /* CUDA launch-probe hits */
	u64 syncs;	  /* CUDA sync/copy-probe hits */
	u64 last_gpu_ns;  /* last CUDA call seen (CLOCK_MONOTONIC) */
	u64 demote_at_ns; /* SRC_PROBE: class lapses to normal after this */
};

/* The scheduler's own per-task state (task storage `task_ctxs`). */
struct task_ctx {
	u32 express_queued;    /* dispatched by the express lane, not yet running */
	u32 lane_class;	       /* class it was dispatched for */
	u32 fair_dispatched;   /* last dispatched by the fair path: its vtime counts */
	u32 select_fair;       /* ops.select_cpu() sent this wakeup to the fair path */
	s64 tokens_ns;	       /* token bucket level; negative: in debt (budget.bpf.c) */
	u64 refill_ns;	       /* last refill timestamp */
	u64 express_since_ns;  /* start of the current express run, 0 if none */
	u64 express_queued_ns; /* when the pending express dispatch was made */
	s32 queued_cpu;	       /* the CPU that express dispatch went to */
	u64 queued_stops;      /* that CPU's cpu_ctx.stops then */
	u64 queued_irq_ns;     /* and its hard + soft IRQ time then */
	u64 express_exec_ns;   /* express running time ever, charged or not */
	u64 fair_woken_ns;     /* fair wakeup handed to userspace at, 0 if none */
	u64 fair_decided_ns;   /* its decision inserted at, 0 if not yet */
	u64 fair_run_slice_ns; /* slice of its current run; BPF policy: what is left of it */
	u64 fair_run_exec_ns;  /* its sum_exec_runtime at that run's start or last charge */
	u64 fair_vruntime;     /* BPF fair policy: virtual runtime (fair.bpf.c) */
	u64 fair_deadline;     /* BPF fair policy: virtual deadline of its next run */
	u32 fair_clock;	       /* index of the virtual clock it counts on, +1 (0: none yet) */
	u64 fair_queued_ns;    /* BPF fair policy: last put in a fair DSQ at (starvation guard) */
	u32 wake_sync;	       /* ops.select_cpu() saw a synchronous wakeup */
	s32 sync_wakee;	       /* the task it last woke synchronously (hold.bpf.c) */
	u32 sync_wakes;	       /* synchronous fair wakeups it made in its current run */
	u32 sync_handoff;      /* its last run made one and then slept (fair.bpf.c section 4) */
	u32 tenant;	       /* tenant index + 1 at its last resolution, 0: none */
	u32 wake_class;	       /* class it woke up as (wake_ns valid) */
	u64 wake_ns;	       /* express-class wakeup at, 0 once running */
	u64 io_submit_ns;      /* last block I/O or packet it sent, with irq_shield only */
	u64 sleep_start_ns;    /* an express run went to sleep at, 0: awake (hold.bpf.c) */
	u64 sleep_avg_ns;      /* its sleeps' moving average (hold.bpf.c) */
	u64 sleep_dev_ns;      /* their moving mean deviation from that average */
};

/*
 * Value of the `tenant_cgroups` map (key: cgroup id): per class, the index
 * + 1 of the tenant whose cgroup this is, 0 for none.
 */
struct tenant_cgroup {
	u32 tenant[NR_CLASSES];
};

/* Value of the `tenant_names` array (for `scx_express ps`). */
struct tenant_name {
	char name[TENANT_NAME_LEN];
};

/*
 * BPF -> userspace: a runnable task that the fair path must schedule.
 * Sent through the `queued` ring buffer from ops.enqueue().
 */
struct queued_task {
	s32 pid;	      /* kernel (global) pid of the thread */
	s32 tgid;	      /* process id */
	s32 cpu;	      /* CPU the task was enqueued on */
	u32 nr_cpus_allowed;  /* affinity width */
	u32 flags;	      /* QUEUED_* */
	u32 slot;	      /* in-flight slot index, echoed back */
	u64 seq;	      /* in-flight slot sequence, echoed back */
	u64 weight;	      /* sched_ext weight: 100 is nice 0 */
	u64 sum_exec_runtime; /* total CPU time so far (ns) */
	u64 express_exec_ns;  /* part of it spent in the express lane (ns) */
	u64 enq_ns;	      /* when it was queued (CLOCK_MONOTONIC) */
};

/* struct queued_task flags. */
enum queued_flags {
	QUEUED_WAKEUP = 1 << 0, /* the task just woke up (it was sleeping) */
};

/*
 * Userspace -> BPF: the fair path's decision for one task.
 * Sent through the `dispatched` user ring buffer, drained in ops.dispatch().
 */
struct dispatched_task {
	s32 pid;  /* thread to dispatch */
	s32 cpu;  /* target CPU, or CPU_ANY for the shared DSQ */
	u32 slot; /* in-flight slot index from struct queued_task */
	u32 __pad;
	u64 seq;      /* in-flight slot sequence from struct queued_task */
	u64 slice_ns; /* time slice */
	u64 vtime;    /* ordering key (virtual deadline) */
};

/* One in-flight slot: a task queued to userspace and not yet answered. */
struct inflight_slot {
	u64 seq;    /* 0 when free */
	u64 enq_ns; /* when the task was handed to userspace */
	s32 pid;
	u32 wakeup; /* the task was woken up (may preempt, fair.bpf.c) */
};

/* `scx_express trace` (trace.bpf.c). */
#include "trace_intf.h"

#endif /* __EXPRESS_INTF_H */
