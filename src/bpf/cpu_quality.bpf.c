/* SPDX-License-Identifier: GPL-2.0 */
/*
 * CPU quality: is a CPU IRQ-quiet, and how deep is its idle state?
 *
 * IRQ time: hard and soft IRQ tracepoints add up, per CPU, the time spent
 * in handlers over a window of irq_window_ns. A CPU is IRQ-hot when that
 * time exceeds irq_hot_pct of the window (current or previous window).
 * Softirq time excludes hard IRQs nested in it. These tracepoints see
 * device IRQs and softirqs, not the local timer or IPIs.
 *
 * Idle depth: the cpu_idle tracepoint records each CPU's current idle state.
 * Userspace marks, per CPU, the first state whose exit latency (sysfs
 * cpuidle stateN/latency) exceeds the configured limit; a CPU at or past it
 * is deep-idle. Without a cpuidle driver nothing is deep.
 *
 * Start from idle (opt-in, express.avoid_slow_idle): an idle CPU that an
 * express task waited over 1 ms to start on, with nothing else in the way,
 * is slow-idle for a while after (set in placement.bpf.c, slow_start()).
 *
 * All are kept in struct cpu_ctx (ctx.bpf.c), beside what the two lanes
 * keep per CPU.
 */
#include "express.bpf.h"

/* Length of the IRQ accounting window. */
KNOB u64 irq_window_ns = 20 * NSEC_PER_MSEC;
/* IRQ share of the window above which a CPU is IRQ-hot; 100 disables. */
KNOB u32 irq_hot_pct = 10;
/* Per CPU: first cpuidle state that counts as deep (255: none). */
KNOB u8 deep_idle_state[MAX_CPUS];
/* LLC id of each CPU, from scx_utils' topology. */
const volatile u32 cpu_llc[MAX_CPUS];

/* Account @ns of IRQ time on this CPU, rolling the window as needed. */
static void add_irq_time(struct cpu_ctx *cc, u64 now, u64 ns)
{
	u64 age = now - cc->win_start_ns;

	if (age >= irq_window_ns) {
		cc->irq_ns_prev = age >= 2 * irq_window_ns ? 0 : cc->irq_ns_cur;
		cc->irq_ns_cur = 0;
		cc->win_start_ns = now;
	}
	cc->irq_ns_cur += ns;
}

__hidden bool cpu_irq_hot(s32 cpu, u64 now)
{
	struct cpu_ctx *cc = cpu_ctx_of(cpu);
	u64 age, recent;

	if (!cc || irq_hot_pct >= 100)
		return false;
	age = now - cc->win_start_ns;
	if (age >= 2 * irq_window_ns)
		recent = 0; /* nothing for two windows */
	else if (age >= irq_window_ns)
		recent = cc->irq_ns_cur; /* the current window is complete */
	else
		recent = cc->irq_ns_cur > cc->irq_ns_prev ? cc->irq_ns_cur : cc->irq_ns_prev;
	return recent * 100 > irq_hot_pct * irq_window_ns;
}

__hidden bool cpu_deep_idle(s32 cpu)
{
	struct cpu_ctx *cc = cpu_ctx_of(cpu);
	s32 state;

	if (!cc || cpu < 0 || cpu >= MAX_CPUS)
		return false;
	state = cc->idle_state;
	return state >= 0 && state >= deep_idle_state[cpu];
}

/*
 * express.avoid_slow_idle: an idle CPU that lately took over 1 ms to start
 * an express task sent to it, with no IRQs in the way (slow_idle in the
 * stats; placement.bpf.c, slow_start()), is passed over by placement's
 * steps 0-3 and starts no hold (hold.bpf.c) for SLOW_IDLE_AVOID_NS.
 * Natively an idle CPU starts in microseconds (deep states aside:
 * deep_idle_us), so this never fires. In a VM an idle vCPU is a host
 * thread asleep, and a host whose CPUs are shared can take milliseconds
 * to run it again, while a busy vCPU is running already: there a
 * preemption (step 4) starts the task sooner. Off by default: measured
 * only under TCG, where the agent stand-in's p99 followed these waits
 * (docs/benchmarks.md, "Net and disk at 8 vCPUs, the IRQ shield on"),
 * and where turning it on moved those misses without removing them,
 * passing over idle CPUs by the thousand a second under disk load
 * (docs/benchmarks.md, "express.avoid_slow_idle at 8 vCPUs").
 */
KNOB bool express_avoid_slow_idle = false;

/*
 * How long such a CPU is passed over: tens of an agent's steps, so that
 * one slow start costs a few tens of preemptions (~100 us each under TCG,
 * us natively) rather than a wait per step, and short enough that a host
 * that calms down gets its idle CPUs back within a fraction of a second.
 */
#define SLOW_IDLE_AVOID_NS (100 * NSEC_PER_MSEC)

__hidden bool cpu_slow_idle(s32 cpu, u64 now)
{
	struct cpu_ctx *cc;

	if (!express_avoid_slow_idle || !(cc = cpu_ctx_of(cpu)) || !cc->slow_idle_ns)
		return false;
	return time_before(now, cc->slow_idle_ns + SLOW_IDLE_AVOID_NS);
}

__hidden u32 cpu_llc_of(s32 cpu)
{
	if (cpu < 0 || cpu >= MAX_CPUS)
		return 0;
	return cpu_llc[cpu];
}

SEC("tp_btf/irq_handler_entry")
int BPF_PROG(quality_hardirq_entry, int irq, struct irqaction *action)
{
	struct cpu_ctx *cc = cpu_ctx_of(bpf_get_smp_processor_id());

	if (cc)
		cc->hardirq_enter_ns = bpf_ktime_get_ns();
	return 0;
}

SEC("tp_btf/irq_handler_exit")
int BPF_PROG(quality_hardirq_exit, int irq, struct irqaction *action, int ret)
{
	struct cpu_ctx *cc = cpu_ctx_of(bpf_get_smp_processor_id());
	u64 now = bpf_ktime_get_ns(), ns;

	if (!cc || !cc->hardirq_enter_ns)
		return 0;
	ns = now - cc->hardirq_enter_ns;
	cc->hardirq_enter_ns = 0;
	cc->hardirq_total_ns += ns;
	add_irq_time(cc, now, ns);
	return 0;
}

SEC("tp_btf/softirq_entry")
int BPF_PROG(quality_softirq_entry, unsigned int vec_nr)
{
	struct cpu_ctx *cc = cpu_ctx_of(bpf_get_smp_processor_id());

	if (cc) {
		cc->softirq_enter_ns = bpf_ktime_get_ns();
		cc->hardirq_at_soft_ns = cc->hardirq_total_ns;
	}
	return 0;
}

SEC("tp_btf/softirq_exit")
int BPF_PROG(quality_softirq_exit, unsigned int vec_nr)
{
	struct cpu_ctx *cc = cpu_ctx_of(bpf_get_smp_processor_id());
	u64 now = bpf_ktime_get_ns(), ns, nested;

	if (!cc || !cc->softirq_enter_ns)
		return 0;
	ns = now - cc->softirq_enter_ns;
	nested = cc->hardirq_total_ns - cc->hardirq_at_soft_ns;
	cc->softirq_enter_ns = 0;
	ns = ns > nested ? ns - nested : 0;
	cc->softirq_total_ns += ns;
	add_irq_time(cc, now, ns);
	return 0;
}

SEC("tp_btf/cpu_idle")
int BPF_PROG(quality_cpu_idle, unsigned int state, unsigned int cpu_id)
{
	struct cpu_ctx *cc = cpu_ctx_of(cpu_id);

	if (cc)
		cc->idle_state = state == (unsigned int)-1 ? -1 : (s32)state;
	return 0;
}
