/* SPDX-License-Identifier: GPL-2.0 */
/*
 * scx_express: declarations shared by the BPF files. Each .bpf.c owns one
 * concern (see main.bpf.c for the design); functions crossing files are
 * __hidden so the linker turns them into static subprograms.
 */
#ifndef __EXPRESS_BPF_H
#define __EXPRESS_BPF_H

#include <scx/common.bpf.h>
#include <scx/compat.bpf.h>
#include "intf.h"

#define NSEC_PER_USEC 1000ULL
#define NSEC_PER_MSEC (1000ULL * NSEC_PER_USEC)

/*
 * Knobs from the config file. KNOB ones live in their own data section,
 * which userspace writes before load and again on reload (SIGHUP), so they
 * change without a detach. Plain const volatile ones are fixed at load.
 * Each is defined, with what it does and its unit, in the file that reads
 * it; the few read by another file are declared with that file's functions.
 */
#define KNOB SEC(".data.knobs") volatile

/* ---- Counters (stats.bpf.c) ---- */
void stat_add(enum stat_idx idx, u64 val);
void stat_inc(enum stat_idx idx);
void lane_stat_add(u32 class, enum lane_stat_idx idx, u64 val);
void lane_stat_inc(u32 class, enum lane_stat_idx idx);
void tenant_stat_inc(u32 tenant, enum tenant_stat_idx idx);
void lat_record(u32 class, u32 tenant, u64 ns);

/* ---- The scheduler's per-task and per-CPU state (ctx.bpf.c) ---- */
struct task_ctx *task_ctx_get(struct task_struct *p);
struct task_ctx *task_ctx_create(struct task_struct *p);
struct cpu_ctx *cpu_ctx_of(s32 cpu);
bool cpu_rt_held(s32 cpu);

/* ---- Task class (classify.bpf.c) ---- */
u32 task_class_of(struct task_struct *p);

/* ---- Tenants: which tenant a task's cgroup belongs to (tenant.bpf.c) ---- */
u32 tenant_resolve(struct task_struct *p, u32 class);

/* ---- Budget: per-task token bucket (budget.bpf.c) ---- */
u32 budget_tenant(struct task_ctx *tctx, u32 class);
bool budget_has_tokens(struct task_ctx *tctx, u32 class, u64 now);
void budget_charge(struct task_ctx *tctx, u64 now);
bool budget_extend(struct task_ctx *tctx, u32 class, u64 now);
bool budget_hold_fits(u32 class, u32 t, u64 ns, u64 now);
void budget_charge_hold(u32 class, u32 t, u64 ns);

/* ---- Hold: an express task's CPU kept idle for its return (hold.bpf.c) ---- */
s32 hold_init(void);
void hold_note_wake(struct task_ctx *tctx, u64 now);
void hold_start(struct task_struct *p, struct task_ctx *tctx, s32 cpu, struct cpu_ctx *cc);
void hold_running(struct task_struct *p, bool fair, struct cpu_ctx *cc);
void hold_note_wakee(struct task_struct *p, u64 wake_flags);
bool hold_any(void);
bool cpu_held(s32 cpu, struct task_struct *p);
bool cpu_reserved(s32 cpu, struct task_struct *p);
bool class_holds(u32 class);

/* ---- CPU quality (cpu_quality.bpf.c) ---- */
bool cpu_irq_hot(s32 cpu, u64 now);
bool cpu_deep_idle(s32 cpu);
bool cpu_slow_idle(s32 cpu, u64 now);
u32 cpu_llc_of(s32 cpu);

/* ---- Express placement (placement.bpf.c) ---- */
/* express_lane_select_cpu() results besides a CPU id. */
#define EXPRESS_NONE -1 /* not an express task now: normal path */
#define EXPRESS_FAIR -2 /* express, but no good CPU: fair path */
s32 express_lane_select_cpu(struct task_struct *p, s32 prev_cpu, u64 wake_flags);
bool express_lane_enqueue(struct task_struct *p, u64 enq_flags);
bool express_lane_keep(struct task_struct *prev);
void express_lane_running(struct task_ctx *tctx, struct cpu_ctx *cc);
void express_lane_stopping(struct task_struct *p, bool runnable, struct task_ctx *tctx,
			   struct cpu_ctx *cc);
bool io_task(struct task_struct *p);
bool io_guarded(s32 cpu);
s32 pick_cpu_avoiding(struct task_struct *p, s32 prev_cpu, bool io, bool *is_idle);
u32 cpu_express_claim(s32 cpu);

/* ---- Fair path: the policy, DSQs and pick (fair.bpf.c) ---- */
/*
 * Slice a preempted fair task must have left to go back in line with it;
 * with less, its run is as good as over and it is queued anew.
 */
#define FAIR_MIN_LEFT_NS (100 * NSEC_PER_USEC)
extern const volatile bool fair_user_mode;
extern volatile u64 slice_max_ns;
extern volatile u64 vtime_now;
s32 fair_init(void);
void fair_note_wakeup(struct task_struct *p, u64 wake_flags);
void fair_dispatch_idle(struct task_struct *p, u64 dsq_id, u64 enq_flags);
s32 fair_sync_waker_cpu(struct task_struct *p, u64 wake_flags);
void fair_enqueue(struct task_struct *p, u64 enq_flags);
void fair_pick(s32 cpu, struct task_struct *prev, bool rt_held);
void fair_running(struct task_struct *p, struct task_ctx *tctx, struct cpu_ctx *cc);
void fair_stopping(struct task_struct *p, struct task_ctx *tctx, struct cpu_ctx *cc, bool runnable);
void note_fair_dispatch(struct task_struct *p, bool fair);
void note_fair_run(struct task_struct *p, struct task_ctx *tctx, u64 slice_ns);
u64 fair_dsq(const struct task_struct *p, s32 cpu);
bool fair_kick_idle(struct task_struct *p, u64 dsq);
bool fair_io_task(struct task_struct *p);
bool fair_avoids_cpus(struct task_struct *p, bool *io);
void fair_preempt_check(struct task_struct *p, s32 cpu, u64 dl, u32 idx);
bool fair_keep_preempted(struct task_struct *p, u64 enq_flags);

/* ---- Fair path through the userspace scheduler (usersched.bpf.c) ---- */
s32 usersched_init(void);
bool fair_enqueue_user(struct task_struct *p, u64 enq_flags);
void fair_enqueue_fallback(struct task_struct *p, u64 enq_flags);
bool fair_requeue_if_preempted(struct task_struct *p, u64 enq_flags);
bool usersched_drain(void);
void usersched_running(struct task_struct *p);

#endif /* __EXPRESS_BPF_H */
