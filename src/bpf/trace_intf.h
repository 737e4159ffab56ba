/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Types shared by trace.bpf.c (`scx_express trace`) and src/trace.rs.
 * Included by intf.h, so bindgen turns them into Rust in src/bpf_intf.rs.
 */
#ifndef __EXPRESS_TRACE_INTF_H
#define __EXPRESS_TRACE_INTF_H

enum trace_consts {
	TRACE_COMM_LEN = 16,
	/* Hard IRQ numbers counted one by one; larger ones share the last slot. */
	TRACE_MAX_IRQS = 2048,
	/* Softirq vectors counted (the kernel has NR_SOFTIRQS = 10). */
	TRACE_MAX_SOFTIRQS = 16,
	/* Probe points told apart by their attach cookie. */
	TRACE_MAX_POINTS = 4096,
	/* Default ring buffer size (bytes); userspace may change it before load. */
	TRACE_RB_BYTES = 32 * 1024 * 1024,
};

enum trace_event_type {
	TRACE_EV_LAUNCH = 1,  /* CUDA launch-probe hit */
	TRACE_EV_SYNC = 2,    /* CUDA sync/copy-probe hit */
	TRACE_EV_MARK = 3,    /* marker-probe hit */
	TRACE_EV_SWITCH = 4,  /* sched_switch with a traced prev or next */
	TRACE_EV_IRQ = 5,     /* hard IRQ that interrupted a traced thread */
	TRACE_EV_SOFTIRQ = 6, /* softirq run on a traced thread's time */
	TRACE_EV_STEP = 7,    /* an agent thread's step ended (struct express_step) */
};

enum trace_event_flags {
	/* CUDA hit from inside a probed CUDA library, or a tail call: not a new call. */
	TRACE_F_NESTED = 1 << 0,
	/* This hit turned the thread's class from something else to `class`. */
	TRACE_F_CLASSIFIED = 1 << 1,
	/* Switch: prev is traced (a switch_out) / next is traced (a switch_in). */
	TRACE_F_PREV = 1 << 2,
	TRACE_F_NEXT = 1 << 3,
	/* Switch: prev was preempted (it stays runnable). */
	TRACE_F_PREEMPT = 1 << 4,
	/* CUDA hit whose caller could not be read (counted as not nested). */
	TRACE_F_CALLER_UNKNOWN = 1 << 5,
};

/* One event, BPF -> userspace through the `events` ring buffer. */
struct express_event {
	u64 ts_ns; /* bpf_ktime_get_ns() (CLOCK_MONOTONIC) */
	u32 type;  /* enum trace_event_type */
	u32 flags; /* enum trace_event_flags */
	s32 pid;   /* tgid of the task (switch: of prev) */
	s32 tid;   /* thread id (switch: of prev) */
	s32 cpu;
	u32 class;    /* CUDA/marker hits: the thread's class after it */
	u64 arg;      /* CUDA/marker: attach cookie; IRQ: number/vector */
	u64 value;    /* switch: prev_state; IRQ: duration (ns) */
	s32 next_pid; /* switch: next's tgid and thread id */
	s32 next_tid;
	char comm[TRACE_COMM_LEN];  /* task (switch: prev) */
	char other[TRACE_COMM_LEN]; /* switch: next's comm; hard IRQ: handler name */
};

/*
 * One step of an agent-class thread, BPF -> userspace through the same ring
 * buffer (told apart by `type`, at the same offset as in express_event).
 * A step runs from a wakeup out of an interruptible sleep (the tool reply
 * arrived) to the thread's next interruptible sleep (or exit); sleeps in D
 * state inside it (block I/O, page cache, kernel locks) are part of it.
 * Parts overlap: IRQ time falls in runq_ns (on the CPU it was queued on) or
 * run_ns; fault_ns in run_ns and, for a major fault, io_ns.
 */
struct express_step {
	u64 ts_ns; /* end of the step (CLOCK_MONOTONIC) */
	u32 type;  /* TRACE_EV_STEP */
	s32 cpu;   /* CPU it last ran on */
	s32 pid;
	s32 tid;
	u64 start_ns;	      /* the wakeup */
	u64 wake_wait_ns;     /* wakeup -> first run */
	u64 runq_ns;	      /* every runnable-not-running interval (wake_wait_ns too) */
	u64 run_ns;	      /* on CPU */
	u64 hardirq_ns;	      /* hard IRQ time on its CPU while it waited or ran */
	u64 softirq_ns;	      /* softirq time, likewise */
	u64 irq_run_ns;	      /* the part of hardirq_ns + softirq_ns while it ran */
	u64 softirq_net_ns;   /* of softirq_ns: NET_TX and NET_RX */
	u64 softirq_block_ns; /* of softirq_ns: BLOCK and IRQ_POLL */
	u64 fault_ns;	      /* in handle_mm_fault */
	u64 io_ns;	      /* D-state sleep in io_schedule (block I/O, in_iowait) */
	u64 dsleep_ns;	      /* other D-state sleep (locks, page cache, ...) */
	u32 faults;	      /* page faults */
	u32 io_waits;	      /* D-state sleeps counted in io_ns */
	u32 preempts;	      /* times it was preempted (more runqueue waits) */
	u32 class;	      /* its class at the wakeup (CLASS_AGENT) */
	char comm[TRACE_COMM_LEN];
};

/* Per-CPU IRQ totals (maps `hardirq_totals`, `softirq_totals`). */
struct express_irq_total {
	u64 count;
	u64 ns;
};

#endif /* __EXPRESS_TRACE_INTF_H */
