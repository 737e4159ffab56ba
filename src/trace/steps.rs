//! Agent steps in `scx_express trace`: the local tail of an agent-class
//! thread, split into where the time went. A step runs from the wakeup that
//! ends an interruptible sleep (the tool reply arrived) to the thread's next
//! interruptible sleep; D-state sleeps (block I/O, locks) inside it are part
//! of it. trace.bpf.c sums the parts and sends one struct express_step per
//! step; this module keeps them and builds the report's `agent_steps`.
//! Pure: no BPF here, so all of it is unit-tested.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::bpf_intf;

/// One finished step (struct express_step), times in ns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Step {
    pub pid: i32,
    pub tid: i32,
    /// CPU it last ran on.
    pub cpu: i32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub wake_wait_ns: u64,
    pub runq_ns: u64,
    pub run_ns: u64,
    pub hardirq_ns: u64,
    pub softirq_ns: u64,
    /// The part of hardirq_ns + softirq_ns that fell while it ran.
    pub irq_run_ns: u64,
    /// Of softirq_ns: the network vectors (NET_TX, NET_RX).
    pub softirq_net_ns: u64,
    /// Of softirq_ns: the block vectors (BLOCK, IRQ_POLL).
    pub softirq_block_ns: u64,
    pub fault_ns: u64,
    pub io_ns: u64,
    pub dsleep_ns: u64,
    pub faults: u32,
    pub io_waits: u32,
    pub preempts: u32,
}

impl Step {
    /// The step from its BPF record, and the thread's comm.
    pub fn from_raw(e: &bpf_intf::express_step) -> (Self, [u8; 16]) {
        let mut comm = [0u8; 16];
        for (o, c) in comm.iter_mut().zip(&e.comm) {
            *o = *c as u8;
        }
        let s = Self {
            pid: e.pid,
            tid: e.tid,
            cpu: e.cpu,
            start_ns: e.start_ns,
            end_ns: e.ts_ns,
            wake_wait_ns: e.wake_wait_ns,
            runq_ns: e.runq_ns,
            run_ns: e.run_ns,
            hardirq_ns: e.hardirq_ns,
            softirq_ns: e.softirq_ns,
            irq_run_ns: e.irq_run_ns,
            softirq_net_ns: e.softirq_net_ns,
            softirq_block_ns: e.softirq_block_ns,
            fault_ns: e.fault_ns,
            io_ns: e.io_ns,
            dsleep_ns: e.dsleep_ns,
            faults: e.faults,
            io_waits: e.io_waits,
            preempts: e.preempts,
        };
        (s, comm)
    }

    /// IRQ time on the CPU it was queued on while it waited.
    pub fn irq_wait_ns(&self) -> u64 {
        (self.hardirq_ns + self.softirq_ns).saturating_sub(self.irq_run_ns)
    }

    /// Wakeup to the end of the burst: the local tail of this step.
    pub fn total_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

/// A part of a step, as the report names it, and how to read it off.
struct Part {
    name: &'static str,
    get: fn(&Step) -> u64,
}

/// The time parts, in report order. Overlaps: hardirq/softirq fall in
/// runq_wait or run; softirq_net and softirq_block in softirq; fault in run
/// (and io for a major fault).
const TIME_PARTS: [Part; 11] = [
    Part {
        name: "total",
        get: Step::total_ns,
    },
    Part {
        name: "wake_wait",
        get: |s| s.wake_wait_ns,
    },
    Part {
        name: "runq_wait",
        get: |s| s.runq_ns,
    },
    Part {
        name: "run",
        get: |s| s.run_ns,
    },
    Part {
        name: "hardirq",
        get: |s| s.hardirq_ns,
    },
    Part {
        name: "softirq",
        get: |s| s.softirq_ns,
    },
    Part {
        name: "softirq_net",
        get: |s| s.softirq_net_ns,
    },
    Part {
        name: "softirq_block",
        get: |s| s.softirq_block_ns,
    },
    Part {
        name: "fault",
        get: |s| s.fault_ns,
    },
    Part {
        name: "block_io",
        get: |s| s.io_ns,
    },
    Part {
        name: "d_sleep",
        get: |s| s.dsleep_ns,
    },
];

/// The counted parts.
const COUNT_PARTS: [Part; 3] = [
    Part {
        name: "faults",
        get: |s| s.faults as u64,
    },
    Part {
        name: "io_waits",
        get: |s| s.io_waits as u64,
    },
    Part {
        name: "preempts",
        get: |s| s.preempts as u64,
    },
];

/// What to look at when a part is the largest in the slow steps.
fn hint(part: &str) -> &'static str {
    match part {
        "runq_wait" => {
            "runnable but not running: CPU contention or the scheduler's choice; \
             give the agent class priority (scx_express), fewer/lower-priority hogs"
        }
        "run" => "the agent's own CPU work (or a slow CPU: frequency, SMT sibling)",
        "irq" => {
            "IRQ time on its CPU: steer device IRQs away (irqbalance, \
             /proc/irq/N/smp_affinity) or keep agents off IRQ-hot CPUs"
        }
        "fault" => "page faults: prefault or mlock its memory, avoid fresh mmaps per step",
        "block_io" => "block I/O waits: move the I/O off the step's path, or faster storage",
        _ => "D-state sleeps outside block I/O: kernel locks, page cache, memory reclaim",
    }
}

/// Steps of the agent threads, as they come: every step until `CAP`, then
/// a uniform reservoir of `CAP` (quantiles stay unbiased, memory bounded),
/// plus the exact `WORST` slowest.
#[derive(Debug, Clone, Default)]
pub struct StepLog {
    kept: Vec<Step>,
    worst: Vec<Step>,
    seen: u64,
    rng: u64,
    threads: BTreeMap<i32, (i32, [u8; 16], u64)>,
}

impl StepLog {
    const CAP: usize = 1 << 19;
    const WORST: usize = 5;

    pub fn push(&mut self, s: Step, comm: [u8; 16]) {
        let t = self.threads.entry(s.tid).or_insert((s.pid, comm, 0));
        t.1 = comm;
        t.2 += 1;
        self.seen += 1;
        self.note_worst(s);
        if self.kept.len() < Self::CAP {
            self.kept.push(s);
            return;
        }
        if let Some(i) = super::report::reservoir_slot(&mut self.rng, self.seen, Self::CAP) {
            self.kept[i] = s;
        }
    }

    fn note_worst(&mut self, s: Step) {
        let at = self.worst.partition_point(|w| w.total_ns() >= s.total_ns());
        if at < Self::WORST {
            self.worst.insert(at, s);
            self.worst.truncate(Self::WORST);
        }
    }
}

/// One agent thread's step count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepThread {
    pub pid: i32,
    pub tid: i32,
    pub comm: String,
    pub steps: u64,
}

/// One part over the steps: quantiles over all of them, and the mean over
/// the slow ones (total at or above the p99). Times in µs, counts as is.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PartStat {
    pub name: String,
    pub median: f64,
    pub p99: f64,
    pub max: f64,
    pub slow_mean: f64,
}

/// A slow step, named by rank ("p99", "worst1", ...), parts in ns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SlowStep {
    pub rank: String,
    pub total_ns: u64,
    #[serde(flatten)]
    pub step: Step,
}

/// One thread's own breakdown, given when more than one thread has steps.
/// An agent loop and its marked tool server are both agent-class, and a
/// loopback send runs the receiver's NET_RX softirq in the sender's step,
/// so the loop's own steps need reading apart from the server's.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ThreadParts {
    pub tid: i32,
    pub comm: String,
    /// Its steps among those the quantiles are over.
    pub sampled: u64,
    /// As `StepReport::times_us`, over this thread's steps alone (slow:
    /// at or above its own p99 total).
    pub times_us: Vec<PartStat>,
}

/// The report's `agent_steps`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepReport {
    pub steps: u64,
    /// Steps the quantiles are over (all of them, or a uniform sample).
    pub sampled: u64,
    /// Steps with total >= the p99 total (the `slow_mean` columns).
    pub slow_steps: u64,
    pub threads: Vec<StepThread>,
    /// Time parts in µs: total, wake_wait, runq_wait, run, hardirq,
    /// softirq (of it softirq_net, softirq_block), fault, block_io, d_sleep.
    pub times_us: Vec<PartStat>,
    /// Each thread's own time parts; empty with one thread.
    pub by_thread: Vec<ThreadParts>,
    /// Counts per step: faults, io_waits, preempts.
    pub counts: Vec<PartStat>,
    /// The p99 step and the slowest ones.
    pub slow: Vec<SlowStep>,
    /// The largest part of the slow steps (runq_wait, run, irq, fault,
    /// block_io, d_sleep; without overlaps: IRQ time only in irq, fault
    /// time not in run), its share of their mean total, and what to fix.
    pub slow_dominant: Option<String>,
    pub slow_dominant_share: Option<f64>,
    pub hint: Option<String>,
}

/// The value at quantile `q` of sorted `v` (nearest rank).
pub fn quantile(v: &[u64], q: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    let rank = (q * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

fn mean(steps: &[&Step], get: fn(&Step) -> u64) -> f64 {
    if steps.is_empty() {
        return 0.0;
    }
    steps.iter().map(|s| get(s) as f64).sum::<f64>() / steps.len() as f64
}

fn part_stat(p: &Part, steps: &[Step], slow: &[&Step], scale: f64) -> PartStat {
    let mut v: Vec<u64> = steps.iter().map(p.get).collect();
    v.sort_unstable();
    PartStat {
        name: p.name.into(),
        median: quantile(&v, 0.5) as f64 / scale,
        p99: quantile(&v, 0.99) as f64 / scale,
        max: v.last().copied().unwrap_or(0) as f64 / scale,
        slow_mean: mean(slow, p.get) / scale,
    }
}

/// The parts that can be the largest in the slow steps, without overlaps:
/// IRQ time counts once (hard + soft), as irq, not in runq_wait or run;
/// fault time not in run.
const DOMINANT_PARTS: [Part; 6] = [
    Part {
        name: "runq_wait",
        get: |s| s.runq_ns.saturating_sub(s.irq_wait_ns()),
    },
    Part {
        name: "run",
        get: |s| s.run_ns.saturating_sub(s.irq_run_ns + s.fault_ns),
    },
    Part {
        name: "irq",
        get: |s| s.hardirq_ns + s.softirq_ns,
    },
    Part {
        name: "fault",
        get: |s| s.fault_ns,
    },
    Part {
        name: "block_io",
        get: |s| s.io_ns,
    },
    Part {
        name: "d_sleep",
        get: |s| s.dsleep_ns,
    },
];

/// The largest part of the slow steps and its share of their mean total.
fn dominant(slow: &[&Step]) -> Option<(&'static str, f64)> {
    let total = mean(slow, Step::total_ns);
    if total <= 0.0 {
        return None;
    }
    DOMINANT_PARTS
        .iter()
        .map(|p| (p.name, mean(slow, p.get)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(n, m)| (n, m / total))
}

/// The breakdown of the logged steps; None without any.
pub fn step_report(log: &StepLog) -> Option<StepReport> {
    if log.kept.is_empty() {
        return None;
    }
    let (p99, slow) = slow_of(&log.kept);
    // The p99 step: the slow step whose total is the p99 itself.
    let mut rows: Vec<SlowStep> = slow
        .iter()
        .filter(|s| s.total_ns() == p99)
        .take(1)
        .map(|s| slow_row("p99", s))
        .collect();
    for (i, s) in log.worst.iter().enumerate() {
        rows.push(slow_row(&format!("worst{}", i + 1), s));
    }
    let dom = dominant(&slow);
    Some(StepReport {
        steps: log.seen,
        sampled: log.kept.len() as u64,
        slow_steps: slow.len() as u64,
        threads: log
            .threads
            .iter()
            .map(|(&tid, (pid, comm, n))| StepThread {
                pid: *pid,
                tid,
                comm: super::report::comm_str(comm),
                steps: *n,
            })
            .collect(),
        times_us: time_parts(&log.kept, &slow),
        by_thread: by_thread(log),
        counts: COUNT_PARTS
            .iter()
            .map(|p| part_stat(p, &log.kept, &slow, 1.0))
            .collect(),
        slow: rows,
        slow_dominant: dom.map(|d| d.0.to_string()),
        slow_dominant_share: dom.map(|d| d.1),
        hint: dom.map(|d| hint(d.0).to_string()),
    })
}

/// The p99 total of @steps and the steps at or above it.
fn slow_of(steps: &[Step]) -> (u64, Vec<&Step>) {
    let mut totals: Vec<u64> = steps.iter().map(Step::total_ns).collect();
    totals.sort_unstable();
    let p99 = quantile(&totals, 0.99);
    (p99, steps.iter().filter(|s| s.total_ns() >= p99).collect())
}

fn time_parts(steps: &[Step], slow: &[&Step]) -> Vec<PartStat> {
    TIME_PARTS
        .iter()
        .map(|p| part_stat(p, steps, slow, 1e3))
        .collect()
}

/// Each thread's own parts, when there is more than one thread.
fn by_thread(log: &StepLog) -> Vec<ThreadParts> {
    if log.threads.len() < 2 {
        return Vec::new();
    }
    log.threads
        .iter()
        .filter_map(|(&tid, (_, comm, _))| {
            let steps: Vec<Step> = log.kept.iter().filter(|s| s.tid == tid).copied().collect();
            if steps.is_empty() {
                return None;
            }
            let (_, slow) = slow_of(&steps);
            Some(ThreadParts {
                tid,
                comm: super::report::comm_str(comm),
                sampled: steps.len() as u64,
                times_us: time_parts(&steps, &slow),
            })
        })
        .collect()
}

fn slow_row(rank: &str, s: &Step) -> SlowStep {
    SlowStep {
        rank: rank.into(),
        total_ns: s.total_ns(),
        step: *s,
    }
}

/// The `agent steps` section of the text report.
pub fn render(s: &mut String, r: &StepReport) {
    let _ = writeln!(
        s,
        "\nagent steps (class agent threads; a step: wakeup out of an interruptible \
         sleep -> next interruptible sleep): {} steps, {} slow (>= p99 total)",
        r.steps, r.slow_steps
    );
    if r.sampled < r.steps {
        let _ = writeln!(
            s,
            "note: quantiles over a uniform sample of {} steps",
            r.sampled
        );
    }
    for t in &r.threads {
        let _ = writeln!(s, "  {:>8} {:<16} {:>8} steps", t.tid, t.comm, t.steps);
    }
    let _ = writeln!(
        s,
        "{:<13} {:>10} {:>10} {:>10} {:>10}   (times in us; hardirq/softirq fall \
         in runq_wait or run, softirq_net/_block in softirq, fault in run)",
        "PART", "MEDIAN", "P99", "MAX", "SLOW_MEAN"
    );
    for p in r.times_us.iter().chain(&r.counts) {
        let _ = writeln!(
            s,
            "{:<13} {:>10.1} {:>10.1} {:>10.1} {:>10.1}",
            p.name, p.median, p.p99, p.max, p.slow_mean
        );
    }
    render_slow(s, r);
    render_threads(s, r);
}

/// Each thread's own time parts (those not zero in every step).
fn render_threads(s: &mut String, r: &StepReport) {
    if r.by_thread.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "by thread (its own quantiles, slow: at or above its own p99 total; parts \
         zero in every step left out):\n{:>8} {:<16} {:<13} {:>10} {:>10} {:>10} {:>10}",
        "TID", "COMM", "PART", "MEDIAN", "P99", "MAX", "SLOW_MEAN"
    );
    for t in &r.by_thread {
        for p in t.times_us.iter().filter(|p| p.max > 0.0) {
            let _ = writeln!(
                s,
                "{:>8} {:<16} {:<13} {:>10.1} {:>10.1} {:>10.1} {:>10.1}",
                t.tid, t.comm, p.name, p.median, p.p99, p.max, p.slow_mean
            );
        }
    }
}

/// The slow steps one by one, and the verdict.
fn render_slow(s: &mut String, r: &StepReport) {
    let us = |ns: u64| ns as f64 / 1e3;
    let _ = writeln!(
        s,
        "{:<7} {:>8} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>6} {:>9} {:>9} {:>4}",
        "STEP",
        "TID",
        "TOTAL",
        "WAKE",
        "RUNQ",
        "RUN",
        "HARDIRQ",
        "SOFTIRQ",
        "SI_NET",
        "SI_BLOCK",
        "FAULT",
        "NFLT",
        "BLOCK_IO",
        "D_SLEEP",
        "PRE"
    );
    for w in &r.slow {
        let t = &w.step;
        let _ = writeln!(
            s,
            "{:<7} {:>8} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1} \
             {:>6} {:>9.1} {:>9.1} {:>4}",
            w.rank,
            t.tid,
            us(w.total_ns),
            us(t.wake_wait_ns),
            us(t.runq_ns),
            us(t.run_ns),
            us(t.hardirq_ns),
            us(t.softirq_ns),
            us(t.softirq_net_ns),
            us(t.softirq_block_ns),
            us(t.fault_ns),
            t.faults,
            us(t.io_ns),
            us(t.dsleep_ns),
            t.preempts
        );
    }
    if let (Some(d), Some(f), Some(h)) = (&r.slow_dominant, r.slow_dominant_share, &r.hint) {
        let _ = writeln!(
            s,
            "slow steps: {d} is the largest part ({:.0}% of their mean total): {h}",
            f * 100.0
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(tid: i32, start: u64, total: u64) -> Step {
        Step {
            pid: 1,
            tid,
            start_ns: start,
            end_ns: start + total,
            run_ns: total,
            ..Default::default()
        }
    }

    fn log_of(steps: &[Step]) -> StepLog {
        let mut l = StepLog::default();
        for s in steps {
            l.push(*s, *b"agent-loop\0\0\0\0\0\0");
        }
        l
    }

    #[test]
    fn quantile_is_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(quantile(&v, 0.5), 50);
        assert_eq!(quantile(&v, 0.99), 99);
        assert_eq!(quantile(&v, 1.0), 100);
        assert_eq!(quantile(&[7], 0.99), 7);
        assert_eq!(quantile(&[], 0.5), 0);
    }

    #[test]
    fn no_steps_no_report() {
        assert_eq!(step_report(&StepLog::default()), None);
    }

    #[test]
    fn parts_are_aggregated_per_part() {
        // 100 steps of 100 us run; the slowest two wait on the runqueue.
        let mut steps: Vec<Step> = (0..100).map(|i| step(7, i * 1_000_000, 100_000)).collect();
        steps[10].runq_ns = 900_000;
        steps[10].wake_wait_ns = 900_000;
        steps[10].end_ns += 900_000;
        steps[20].runq_ns = 400_000;
        steps[20].end_ns += 400_000;
        steps[20].faults = 3;
        steps[20].fault_ns = 30_000;
        let r = step_report(&log_of(&steps)).unwrap();
        assert_eq!(r.steps, 100);
        assert_eq!(r.threads.len(), 1);
        assert_eq!(r.threads[0].steps, 100);
        assert_eq!(r.threads[0].comm, "agent-loop");
        let part = |n: &str| r.times_us.iter().find(|p| p.name == n).unwrap().clone();
        assert_eq!(part("total").median, 100.0);
        assert_eq!(part("total").p99, 500.0);
        assert_eq!(part("total").max, 1000.0);
        assert_eq!(part("runq_wait").median, 0.0);
        assert_eq!(part("runq_wait").max, 900.0);
        // Slow steps: total >= p99 (500 us): the two with runqueue waits.
        assert_eq!(r.slow_steps, 2);
        assert_eq!(part("runq_wait").slow_mean, 650.0);
        let faults = r.counts.iter().find(|p| p.name == "faults").unwrap();
        assert_eq!(faults.max, 3.0);
        assert_eq!(faults.slow_mean, 1.5);
        assert_eq!(r.slow_dominant.as_deref(), Some("runq_wait"));
        let share = r.slow_dominant_share.unwrap();
        assert!((share - 650.0 / 750.0).abs() < 1e-9, "{share}");
    }

    #[test]
    fn slow_rows_are_the_p99_step_then_the_worst() {
        let steps: Vec<Step> = (1..=200)
            .map(|i| step(7, i * 10_000_000, i * 1000))
            .collect();
        let r = step_report(&log_of(&steps)).unwrap();
        let ranks: Vec<&str> = r.slow.iter().map(|s| s.rank.as_str()).collect();
        assert_eq!(
            ranks,
            ["p99", "worst1", "worst2", "worst3", "worst4", "worst5"]
        );
        assert_eq!(r.slow[0].total_ns, 198_000);
        let worst: Vec<u64> = r.slow[1..].iter().map(|s| s.total_ns).collect();
        assert_eq!(worst, [200_000, 199_000, 198_000, 197_000, 196_000]);
        assert_eq!(r.slow_dominant.as_deref(), Some("run"));
    }

    #[test]
    fn irq_and_io_dominate_when_largest() {
        let mut s = step(7, 0, 1_000_000);
        s.run_ns = 100_000;
        s.io_ns = 800_000;
        s.io_waits = 2;
        s.hardirq_ns = 50_000;
        let r = step_report(&log_of(&[s])).unwrap();
        assert_eq!(r.slow_dominant.as_deref(), Some("block_io"));
        let mut s2 = s;
        s2.io_ns = 0;
        s2.hardirq_ns = 300_000;
        s2.softirq_ns = 300_000;
        let r = step_report(&log_of(&[s2])).unwrap();
        assert_eq!(r.slow_dominant.as_deref(), Some("irq"));
        assert!(r.hint.unwrap().contains("smp_affinity"));
    }

    #[test]
    fn run_time_spent_in_faults_and_irqs_is_not_run() {
        // 500 us on CPU, 400 of them in page faults, 50 in IRQs: fault.
        let mut s = step(7, 0, 500_000);
        s.fault_ns = 400_000;
        s.faults = 20;
        s.hardirq_ns = 50_000;
        s.irq_run_ns = 50_000;
        let r = step_report(&log_of(&[s])).unwrap();
        assert_eq!(r.slow_dominant.as_deref(), Some("fault"));
        let share = r.slow_dominant_share.unwrap();
        assert!((share - 0.8).abs() < 1e-9, "{share}");
        // IRQ time while it waited comes out of runq_wait, not run.
        let mut w = step(7, 0, 1_000_000);
        w.run_ns = 300_000;
        w.runq_ns = 700_000;
        w.softirq_ns = 500_000;
        assert_eq!(w.irq_wait_ns(), 500_000);
        let r = step_report(&log_of(&[w])).unwrap();
        assert_eq!(r.slow_dominant.as_deref(), Some("irq"));
    }

    #[test]
    fn threads_are_counted_apart() {
        let steps = [step(7, 0, 10), step(8, 0, 10), step(8, 100, 10)];
        let r = step_report(&log_of(&steps)).unwrap();
        let counts: Vec<(i32, u64)> = r.threads.iter().map(|t| (t.tid, t.steps)).collect();
        assert_eq!(counts, [(7, 1), (8, 2)]);
    }

    #[test]
    fn each_thread_is_broken_down_apart() {
        // A tool server (tid 8) whose sends carry the receiver's NET_RX
        // softirq, beside an agent loop (tid 7) with none.
        let mut steps = Vec::new();
        for i in 0..100u64 {
            steps.push(step(7, i * 10_000, 50_000 + i));
            let mut w = step(8, i * 10_000, 300_000 + i);
            w.softirq_ns = 200_000;
            w.softirq_net_ns = 150_000;
            w.softirq_block_ns = 40_000;
            steps.push(w);
        }
        let r = step_report(&log_of(&steps)).unwrap();
        let part = |t: &ThreadParts, name: &str| {
            t.times_us.iter().find(|p| p.name == name).unwrap().clone()
        };
        assert_eq!(r.by_thread.len(), 2);
        let (loop_, server) = (&r.by_thread[0], &r.by_thread[1]);
        assert_eq!((loop_.tid, loop_.sampled), (7, 100));
        assert_eq!((server.tid, server.sampled), (8, 100));
        // Each thread's own p99, not the pooled one (which is the server's).
        assert_eq!(part(loop_, "total").p99, 50.098);
        assert_eq!(part(server, "total").p99, 300.098);
        assert_eq!(part(loop_, "softirq_net").max, 0.0);
        assert_eq!(part(server, "softirq_net").slow_mean, 150.0);
        assert_eq!(part(server, "softirq_block").median, 40.0);
        let mut out = String::new();
        render(&mut out, &r);
        assert!(out.contains("by thread"), "{out}");
        // Parts zero in every step of a thread are left out of its rows.
        let rows = |tid: &str, name: &str| {
            out.lines()
                .filter(|l| {
                    let f: Vec<&str> = l.split_whitespace().collect();
                    f.len() == 7 && f[0] == tid && f[2] == name
                })
                .count()
        };
        assert_eq!(rows("8", "softirq_net"), 1, "{out}");
        assert_eq!(rows("7", "softirq_net"), 0, "{out}");
        assert_eq!(rows("7", "total"), 1, "{out}");
        // One thread: no per-thread section.
        let one = step_report(&log_of(&steps[..1])).unwrap();
        assert!(one.by_thread.is_empty());
    }

    #[test]
    fn text_and_json_have_the_breakdown() {
        let mut s = step(7, 0, 1_000_000);
        s.runq_ns = 600_000;
        s.run_ns = 400_000;
        let r = step_report(&log_of(&[s])).unwrap();
        let mut out = String::new();
        render(&mut out, &r);
        assert!(out.contains("agent steps"), "{out}");
        assert!(out.contains("runq_wait"), "{out}");
        assert!(
            out.contains("slow steps: runq_wait is the largest part"),
            "{out}"
        );
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j["steps"], 1);
        assert_eq!(j["slow"][0]["runq_ns"], 600_000);
        assert_eq!(j["slow"][0]["rank"], "p99");
        assert!(j["times_us"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "block_io"));
    }
}
