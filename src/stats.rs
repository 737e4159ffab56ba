//! Statistics: the scx_stats server behind `--stats` and `--monitor`.
//!
//! Every statistic is declared once, as a row of a `stat_table!` below: its
//! field (its name in the JSON, `--help-stats` and the `--stats` text),
//! kind, unit, where the scheduler reads it, its OpenMetrics name and its
//! description. The scx_stats struct, the text, the deltas of
//! `--monitor` and the OpenMetrics file all come from those rows, so adding
//! a BPF counter means a slot in src/bpf/intf.h's enum and one row here.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use scx_stats::prelude::*;
use scx_stats_derive::{stat_doc, Stats};
use serde::{Deserialize, Serialize};

use crate::bpf_intf::*;

/// How a statistic behaves from one read to the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only grows (wrapping at 2^64): `--monitor` shows the increase,
    /// OpenMetrics a `_total`.
    Counter,
    /// A level: readers show the latest value.
    Gauge,
}

/// The unit a statistic is shown in. BPF counts time in nanoseconds; the
/// rows say which coarser unit readers get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Events,
    Us,
    Ms,
}

impl Unit {
    /// Nanoseconds per unit: what a raw BPF time sum is divided by.
    pub fn ns(self) -> u64 {
        match self {
            Unit::Events => 1,
            Unit::Us => 1_000,
            Unit::Ms => 1_000_000,
        }
    }
}

/// Where the scheduler reads a statistic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The `stats` BPF map, this slot of `enum stat_idx`.
    Bpf(u32),
    /// The `lane_stats` BPF map, this slot of `enum lane_stat_idx`, per class.
    Lane(u32),
    /// The `lat_stats` BPF map, this slot of `enum lat_stat_idx`, per class
    /// or tenant.
    Lat(u32),
    /// The `tenant_stats` BPF map, this slot of `enum tenant_stat_idx`.
    Tenant(u32),
    /// Userspace state: the scheduler sets it (scheduler.rs, `metrics()`).
    User,
}

/// Upper bounds (µs, exclusive) of the wakeup-latency histogram's buckets
/// but the last, which is unbounded: 1, 2, 4, ... (LAT_BUCKETS in intf.h).
pub fn lat_bucket_bounds_us() -> Vec<u64> {
    (0..lat_stat_idx_NR_LAT_STATS - lat_stat_idx_LAT_HIST - 1)
        .map(|k| 1u64 << k)
        .collect()
}

/// The histogram's description: that of the class and tenant fields.
const HIST_DESC: &str = "Wakeup-to-run latency histogram: counts of wakeups under 1 us, then 1-2, 2-4, ... us (log2 buckets), the last 262144 us and more";

/// One row of a statistics table.
pub struct Stat<T> {
    /// The struct field: the JSON key and the `--help-stats` name.
    pub field: &'static str,
    pub kind: Kind,
    pub unit: Unit,
    pub source: Source,
    /// The OpenMetrics family, without the `scx_express_` prefix.
    pub om_name: &'static str,
    pub desc: &'static str,
    pub get: fn(&T) -> u64,
    pub set: fn(&mut T, u64),
}

/// Declares a scx_stats struct whose u64 fields are the rows of `$table`,
/// plus `extra` fields that are not rows (maps of nested structs).
/// Raw token trees carry the attributes and extra fields: scx_stats' derive
/// reads field types and `desc` strings as plain tokens, which macro
/// fragments such as `ty` or `meta` would wrap in invisible groups.
macro_rules! stat_table {
    (
        $(#[$($sattr:tt)*])*
        struct $ty:ident, $table:ident;
        extra { $($extra:tt)* }
        $($field:ident: $kind:ident $unit:ident $src:expr, $om:literal, $desc:tt;)*
    ) => {
        #[stat_doc]
        #[derive(Clone, Debug, Default, Serialize, Deserialize, Stats)]
        $(#[$($sattr)*])*
        pub struct $ty {
            $(
                #[stat(desc = $desc)]
                pub $field: u64,
            )*
            $($extra)*
        }

        pub const $table: &[Stat<$ty>] = &[$(
            Stat {
                field: stringify!($field),
                kind: Kind::$kind,
                unit: Unit::$unit,
                source: $src,
                om_name: $om,
                desc: $desc,
                get: |v| v.$field,
                set: |v, x| v.$field = x,
            },
        )*];
    };
}

stat_table! {
    #[stat(_om_prefix = "c_", _om_label = "class")]
    struct ClassMetrics, CLASS_STATS;
    extra {
        #[stat(desc = "Wakeup-to-run latency histogram: counts of wakeups under 1 us, then 1-2, 2-4, ... us (log2 buckets), the last 262144 us and more")]
        pub latency_hist: Vec<u64>,
    }
    prev: Counter Events Source::Lane(lane_stat_idx_LANE_PREV), "express_prev",
        "Express wakeups placed on the previous CPU";
    llc: Counter Events Source::Lane(lane_stat_idx_LANE_LLC), "express_llc",
        "Express wakeups placed on an idle CPU of the same LLC";
    any: Counter Events Source::Lane(lane_stat_idx_LANE_ANY), "express_any",
        "Express wakeups placed on any idle CPU";
    preempt: Counter Events Source::Lane(lane_stat_idx_LANE_PREEMPT), "express_preempt",
        "Express wakeups that preempted a normal task";
    preempt_waker: Counter Events Source::Lane(lane_stat_idx_LANE_PREEMPT_WAKER),
        "express_preempt_waker",
        "Express preemptions on the waker's CPU (synchronous wakeups)";
    not_quiet: Counter Events Source::Lane(lane_stat_idx_LANE_NOT_QUIET), "express_not_quiet",
        "Express wakeups placed on an IRQ-hot or deep-idle CPU: none quiet was free";
    requeue: Counter Events Source::Lane(lane_stat_idx_LANE_REQUEUE), "express_requeue",
        "Express tasks kept at the head of their CPU after a slice";
    irq_hot_skips: Counter Events Source::Lane(lane_stat_idx_LANE_IRQ_HOT_SKIP), "irq_hot_skips",
        "Idle CPUs skipped for being IRQ-hot";
    deep_idle_skips: Counter Events Source::Lane(lane_stat_idx_LANE_DEEP_IDLE_SKIP),
        "deep_idle_skips",
        "Idle CPUs skipped for being in a deep idle state";
    slow_idle_skips: Counter Events Source::Lane(lane_stat_idx_LANE_SLOW_IDLE_SKIP),
        "slow_idle_skips",
        "Idle CPUs skipped for having been slow to start an express task lately (express.avoid_slow_idle)";
    no_tokens: Counter Events Source::Lane(lane_stat_idx_LANE_NO_TOKENS), "budget_exhausted",
        "Budget exhaustions: express tasks out of tokens";
    class_cap: Counter Events Source::Lane(lane_stat_idx_LANE_CLASS_CAP), "class_cap",
        "Class over its max_share: express tasks sent to the fair path";
    fallback: Counter Events Source::Lane(lane_stat_idx_LANE_FALLBACK), "express_fallback",
        "Express wakeups with no suitable CPU: fair path";
    slice_fallback: Counter Events Source::Lane(lane_stat_idx_LANE_SLICE_FALLBACK),
        "express_slice_fallback",
        "Express slices that ended on a CPU claimed by other express work: fair path";
    behind: Counter Events Source::Lane(lane_stat_idx_LANE_BEHIND), "express_behind",
        "Express wakeups with every CPU busy with express work: queued behind it";
    wait_us: Counter Us Source::Lane(lane_stat_idx_LANE_WAIT_NS), "express_wait_us",
        "Total time express dispatches waited to run (us)";
    waits_over_1ms: Counter Events Source::Lane(lane_stat_idx_LANE_WAIT_OVER_1MS),
        "express_waits_over_1ms",
        "Express dispatches that waited over 1 ms to run";
    slow_irq: Counter Events Source::Lane(lane_stat_idx_LANE_SLOW_IRQ), "express_slow_irq",
        "Express dispatches that waited over 1 ms, half of it or more in IRQs and softirqs on their CPU";
    slow_behind: Counter Events Source::Lane(lane_stat_idx_LANE_SLOW_BEHIND),
        "express_slow_behind",
        "Express dispatches that waited over 1 ms (not in IRQs) behind other tasks that ran on their CPU first";
    slow_idle: Counter Events Source::Lane(lane_stat_idx_LANE_SLOW_IDLE), "express_slow_idle",
        "Express dispatches that waited over 1 ms (not in IRQs) on a CPU that ran nothing: slow to start (a deep idle state, or a vCPU the host did not run)";
    lost_cpu: Counter Events Source::Lane(lane_stat_idx_LANE_LOST_CPU), "express_lost_cpu",
        "Express runs that lost the CPU while still runnable";
    cut_short: Counter Events Source::Lane(lane_stat_idx_LANE_CUT_SHORT), "express_cut_short",
        "Express runs that lost the CPU before their slice ended: preempted";
    tenant_cap: Counter Events Source::Lane(lane_stat_idx_LANE_TENANT_CAP), "tenant_cap",
        "Tasks whose tenant was over its max_share: sent to the fair path";
    holds: Counter Events Source::Lane(lane_stat_idx_LANE_HOLDS), "express_holds",
        "CPUs held idle for a sleeping express task (classes.*.hold_us)";
    hold_back: Counter Events Source::Lane(lane_stat_idx_LANE_HOLD_BACK), "express_hold_back",
        "Of those, holds whose task came back to the CPU before the hold expired";
    run_us: Counter Us Source::Lane(lane_stat_idx_LANE_RUN_NS), "express_run_us",
        "CPU time the class's tasks ran in the express lane (us), counted in max_share";
    held_us: Counter Us Source::Lane(lane_stat_idx_LANE_HELD_NS), "express_held_us",
        "CPU time held idle for the class's sleeping tasks (us), counted in max_share";
    hold_no_quota: Counter Events Source::Lane(lane_stat_idx_LANE_HOLD_NO_QUOTA),
        "express_hold_no_quota",
        "Holds not started because the class quota (max_share), or the task's tenant's, had no room left";
    hold_whole: Counter Events Source::Lane(lane_stat_idx_LANE_HOLD_WHOLE), "express_hold_whole",
        "Of holds, those over the whole sleep (classes.*.hold_whole)";
    hold_irregular: Counter Events Source::Lane(lane_stat_idx_LANE_HOLD_IRREGULAR),
        "express_hold_irregular",
        "Holds not started because the task's sleeps are too irregular to predict its return";
    hold_spare: Counter Events Source::Lane(lane_stat_idx_LANE_HOLD_SPARE), "express_hold_spare",
        "Holds not started because another CPU the task may use was idle (machine not saturated)";
    hold_taken: Counter Events Source::Lane(lane_stat_idx_LANE_HOLD_TAKEN), "express_hold_taken",
        "Holds ended by another task running on the CPU before their task came back";
    hold_early: Counter Events Source::Lane(lane_stat_idx_LANE_HOLD_EARLY), "express_hold_early",
        "Holds whose task came back before the window opened (ordinary work still ran there)";
    hold_partner: Counter Events Source::Lane(lane_stat_idx_LANE_HOLD_PARTNER),
        "express_hold_partner",
        "Holds not started because the fair-path task it last woke (its tool server) waited for a CPU";
    hold_pinned: Counter Events Source::Lane(lane_stat_idx_LANE_HOLD_PINNED), "express_hold_pinned",
        "Runs of work that can run only on a held CPU (per-CPU kthreads) that left the hold in place";
    hold_last_cpu: Counter Events Source::Lane(lane_stat_idx_LANE_HOLD_LAST_CPU),
        "express_hold_last_cpu",
        "Holds not started because every other CPU was held (one always stays for the rest)";
    hold_long: Counter Events Source::Lane(lane_stat_idx_LANE_HOLD_LONG), "express_hold_long",
        "Holds not started because the task's sleeps average over classes.*.hold_us";
    hold_slow_idle: Counter Events Source::Lane(lane_stat_idx_LANE_HOLD_SLOW_IDLE),
        "express_hold_slow_idle",
        "Holds not started because the CPU was slow to start an express task lately (express.avoid_slow_idle)";
    wakeups: Counter Events Source::Lat(lat_stat_idx_LAT_WAKEUPS), "wakeups",
        "Wakeups of the class's tasks measured, wakeup to running, by either lane";
    over_target: Counter Events Source::Lat(lat_stat_idx_LAT_OVER_TARGET), "wakeups_over_target",
        "Of those, wakeups that waited longer than the class's latency_target_us to run";
}

stat_table! {
    #[stat(_om_prefix = "t_", _om_label = "tenant")]
    struct TenantMetrics, TENANT_STATS;
    extra {
        #[stat(desc = "The tenant's class")]
        pub class: String,
        #[stat(desc = "Wakeup-to-run latency histogram: counts of wakeups under 1 us, then 1-2, 2-4, ... us (log2 buckets), the last 262144 us and more")]
        pub latency_hist: Vec<u64>,
    }
    express: Counter Events Source::Tenant(tenant_stat_idx_TENANT_EXPRESS), "tenant_express",
        "Express dispatches of the tenant's tasks";
    no_tokens: Counter Events Source::Tenant(tenant_stat_idx_TENANT_NO_TOKENS),
        "tenant_budget_exhausted",
        "The tenant's tasks out of tokens: sent to the fair path";
    quota: Counter Events Source::Tenant(tenant_stat_idx_TENANT_QUOTA), "tenant_quota",
        "The tenant over its own max_share: its tasks sent to the fair path";
    class_cap: Counter Events Source::Tenant(tenant_stat_idx_TENANT_CLASS_CAP), "tenant_class_cap",
        "The tenant's class over the class max_share: its tasks sent to the fair path";
    wakeups: Counter Events Source::Lat(lat_stat_idx_LAT_WAKEUPS), "tenant_wakeups",
        "Wakeups of the tenant's tasks measured, wakeup to running, by either lane";
    over_target: Counter Events Source::Lat(lat_stat_idx_LAT_OVER_TARGET),
        "tenant_wakeups_over_target",
        "Of those, wakeups that waited longer than the tenant's latency_target_us to run";
}

stat_table! {
    #[stat(top)]
    struct Metrics, STATS;
    extra {
        #[stat(desc = "Express-lane counters per class")]
        pub classes: BTreeMap<String, ClassMetrics>,
        #[stat(desc = "Express-lane counters per configured tenant")]
        pub tenants: BTreeMap<String, TenantMetrics>,
        #[stat(desc = "Per-CPU express runs and IRQ load")]
        pub cpus: BTreeMap<String, CpuMetrics>,
    }
    user_queued: Counter Events Source::Bpf(stat_idx_STAT_USER_QUEUED), "user_queued",
        "Tasks handed to the userspace scheduler";
    user_dispatched: Counter Events Source::Bpf(stat_idx_STAT_USER_DISPATCHED), "user_dispatched",
        "Decisions sent back by the userspace scheduler";
    direct_idle: Counter Events Source::Bpf(stat_idx_STAT_DIRECT_IDLE), "direct_idle",
        "Wakeups placed directly on an idle CPU";
    kthread: Counter Events Source::Bpf(stat_idx_STAT_KTHREAD), "kthread",
        "Per-CPU kthreads dispatched locally";
    usersched: Counter Events Source::Bpf(stat_idx_STAT_USERSCHED), "usersched",
        "Wakeups of the scheduler's own threads";
    fallback: Counter Events Source::Bpf(stat_idx_STAT_FALLBACK), "fallback",
        "Tasks enqueued by BPF alone (userspace busy)";
    rescued: Counter Events Source::Bpf(stat_idx_STAT_RESCUED), "rescued",
        "Tasks rescued by BPF after waiting rescue_ms for userspace";
    wakeup_preempt: Counter Events Source::Bpf(stat_idx_STAT_FAIR_PREEMPT), "wakeup_preempt",
        "Fair-path wakeups that preempted a later-deadline task";
    fair_wakeups: Counter Events Source::Bpf(stat_idx_STAT_FAIR_WAKEUPS), "fair_wakeups",
        "Fair-path wakeups queued (in userspace mode: decided by userspace) that ran";
    fair_decide_us: Counter Us Source::Bpf(stat_idx_STAT_FAIR_DECIDE_NS), "fair_decide_us",
        "Total time fair-path wakeups waited for their decision, wakeup to dispatch (us)";
    fair_wait_us: Counter Us Source::Bpf(stat_idx_STAT_FAIR_WAIT_NS), "fair_wait_us",
        "Total time fair-path wakeups waited to run, wakeup to running (us)";
    fair_waits_over_1ms: Counter Events Source::Bpf(stat_idx_STAT_FAIR_WAIT_OVER_1MS),
        "fair_waits_over_1ms",
        "Fair-path wakeups that waited over 1 ms to run";
    fair_preempted: Counter Events Source::Bpf(stat_idx_STAT_FAIR_PREEMPTED), "fair_preempted",
        "Fair-path tasks preempted mid-slice, put back in line by BPF";
    fair_kept_local: Counter Events Source::Bpf(stat_idx_STAT_FAIR_KEPT_LOCAL), "fair_kept_local",
        "Fair tasks an express dispatch preempted, kept on their CPU with the rest of their slice";
    fair_queued: Counter Events Source::Bpf(stat_idx_STAT_FAIR_QUEUED), "fair_queued",
        "Tasks queued by the BPF fair policy (fair.mode = bpf)";
    fair_charged_ms: Counter Ms Source::Bpf(stat_idx_STAT_FAIR_CHARGED_NS), "fair_charged_ms",
        "CPU time the fair policy charged to tasks' virtual runtime (ms)";
    fair_forgiven_ms: Counter Ms Source::Bpf(stat_idx_STAT_FAIR_FORGIVEN_NS), "fair_forgiven_ms",
        "Charged CPU time forgiven at the debt ceiling: used away from the fair path's order (ms)";
    fair_starved: Counter Events Source::Bpf(stat_idx_STAT_FAIR_STARVED), "fair_starved",
        "Queued fair-path tasks the starvation guard ran out of deadline order";
    io_kept_off: Counter Events Source::Bpf(stat_idx_STAT_IO_KEPT_OFF), "io_kept_off",
        "Placements moving, and picks passing over, a task that submits block I/O or sends packets off a shielded CPU in use (express.irq_shield)";
    fair_sync_waker: Counter Events Source::Bpf(stat_idx_STAT_FAIR_SYNC_WAKER), "fair_sync_waker",
        "Synchronous fair-path wakeups queued on their waker's CPU, to run when it sleeps";
    user_lag_max_us: Gauge Us Source::User, "user_lag_max_us",
        "Longest wait of a task for the userspace scheduler to read it, last second (us)";
    fair_tasks: Gauge Events Source::User, "fair_tasks",
        "Tasks known to the fair policy";
    probed_libraries: Gauge Events Source::User, "probed_libraries",
        "Libraries with CUDA or marker uprobes attached";
    launch_windows: Counter Events Source::User, "launch_windows",
        "Launch-probe windows opened";
}

/// Per-CPU numbers, not table rows: the scheduler reads them from the
/// `cpu_ctxs` map; OpenMetrics shows the IRQ load.
#[stat_doc]
#[derive(Clone, Debug, Default, Serialize, Deserialize, Stats)]
#[stat(_om_prefix = "cpu_", _om_label = "cpu")]
pub struct CpuMetrics {
    #[stat(desc = "Express-lane runs started on this CPU")]
    pub express_runs: u64,
    #[stat(desc = "Hard+soft IRQ time in the last window, percent")]
    pub irq_pct: f64,
}

/// Sets the rows of `table` that `raw` has a value for, from the raw BPF
/// sum of their source (nanoseconds for time rows).
pub fn fill<T>(table: &[Stat<T>], v: &mut T, raw: impl Fn(Source) -> Option<u64>) {
    for s in table {
        if let Some(x) = raw(s.source) {
            (s.set)(v, x / s.unit.ns());
        }
    }
}

/// `cur` with every counter row replaced by its increase since `prev`.
fn delta_rows<T: Clone>(table: &[Stat<T>], cur: &T, prev: &T) -> T {
    let mut out = cur.clone();
    for s in table.iter().filter(|s| s.kind == Kind::Counter) {
        (s.set)(&mut out, (s.get)(cur).wrapping_sub((s.get)(prev)));
    }
    out
}

/// Rows per `--stats` text line: six `field value` pairs keep a line near
/// 120 columns.
const TEXT_ROWS_PER_LINE: usize = 6;

/// `[tag] field value ...` lines for the rows of `table`: the names are
/// those of the JSON and `--help-stats`.
fn write_rows<T, W: Write>(w: &mut W, tag: &str, table: &[Stat<T>], v: &T) -> Result<()> {
    for chunk in table.chunks(TEXT_ROWS_PER_LINE) {
        write!(w, "[{tag}]")?;
        for s in chunk {
            write!(w, " {} {}", s.field, (s.get)(v))?;
        }
        writeln!(w)?;
    }
    Ok(())
}

/// Elementwise increase of a histogram since `prev` (same length, or all of it).
fn hist_delta(cur: &[u64], prev: &[u64]) -> Vec<u64> {
    if cur.len() != prev.len() {
        return cur.to_vec();
    }
    cur.iter()
        .zip(prev)
        .map(|(c, p)| c.wrapping_sub(*p))
        .collect()
}

/// `[tag] latency_us <1:N 1-2:N ... 262144+:N` with the non-empty buckets.
fn write_hist<W: Write>(w: &mut W, tag: &str, hist: &[u64]) -> Result<()> {
    let bounds = lat_bucket_bounds_us();
    write!(w, "[{tag}] latency_us")?;
    for (i, n) in hist.iter().enumerate().filter(|(_, n)| **n > 0) {
        match (i, bounds.get(i)) {
            (0, _) => write!(w, " <1:{n}")?,
            (_, Some(hi)) => write!(w, " {}-{hi}:{n}", hi / 2)?,
            (_, None) => write!(w, " {}+:{n}", bounds.last().copied().unwrap_or(0))?,
        }
    }
    writeln!(w)?;
    Ok(())
}

impl Metrics {
    /// A few human-readable lines per interval: `[fair]` for the machine,
    /// `[<class>]` per express class.
    pub fn format<W: Write>(&self, w: &mut W) -> Result<()> {
        write_rows(w, "fair", STATS, self)?;
        for (name, c) in &self.classes {
            write_rows(w, name, CLASS_STATS, c)?;
            write_hist(w, name, &c.latency_hist)?;
        }
        for (name, t) in &self.tenants {
            write_rows(w, &format!("tenant {name}"), TENANT_STATS, t)?;
            write_hist(w, &format!("tenant {name}"), &t.latency_hist)?;
        }
        Ok(())
    }

    /// Counter increase since `prev` (gauges keep their current value).
    pub fn delta(&self, prev: &Metrics) -> Metrics {
        let mut out = delta_rows(STATS, self, prev);
        for (k, c) in out.classes.iter_mut() {
            if let Some(p) = prev.classes.get(k) {
                *c = delta_rows(CLASS_STATS, &self.classes[k], p);
            }
        }
        for (k, c) in out.classes.iter_mut() {
            if let Some(p) = prev.classes.get(k) {
                c.latency_hist = hist_delta(&c.latency_hist, &p.latency_hist);
            }
        }
        for (k, t) in out.tenants.iter_mut() {
            if let Some(p) = prev.tenants.get(k) {
                let hist = hist_delta(&t.latency_hist, &p.latency_hist);
                *t = delta_rows(TENANT_STATS, &self.tenants[k], p);
                t.latency_hist = hist;
            }
        }
        for (k, c) in out.cpus.iter_mut() {
            let runs = prev.cpus.get(k).map(|p| p.express_runs).unwrap_or(0);
            c.express_runs = c.express_runs.wrapping_sub(runs);
        }
        out
    }
}

/// One OpenMetrics family: HELP, TYPE and a sample per label set.
fn om_family(out: &mut String, name: &str, kind: Kind, help: &str, samples: &[(String, f64)]) {
    use std::fmt::Write as _;
    let (ty, suffix) = match kind {
        Kind::Counter => ("counter", "_total"),
        Kind::Gauge => ("gauge", ""),
    };
    let _ = writeln!(out, "# HELP scx_express_{name} {help}");
    let _ = writeln!(out, "# TYPE scx_express_{name} {ty}");
    for (labels, v) in samples {
        let _ = writeln!(out, "scx_express_{name}{suffix}{labels} {v}");
    }
}

/// A histogram family: cumulative `_bucket{le=...}` samples (the bounds
/// in µs) and `_count`, per label set. No `_sum`: BPF keeps no sum.
fn om_histogram<'a>(
    out: &mut String,
    name: &str,
    hists: impl Iterator<Item = (String, &'a Vec<u64>)>,
) {
    use std::fmt::Write as _;
    let bounds = lat_bucket_bounds_us();
    let _ = writeln!(out, "# HELP scx_express_{name} {}", HIST_DESC);
    let _ = writeln!(out, "# TYPE scx_express_{name} histogram");
    for (labels, hist) in hists {
        let mut cum = 0u64;
        for (i, n) in hist.iter().enumerate() {
            cum += n;
            let le = bounds
                .get(i)
                .map(|b| b.to_string())
                .unwrap_or_else(|| "+Inf".into());
            let _ = writeln!(
                out,
                "scx_express_{name}_bucket{{{labels},le=\"{le}\"}} {cum}"
            );
        }
        let _ = writeln!(out, "scx_express_{name}_count{{{labels}}} {cum}");
    }
}

/// The metrics in the Prometheus/OpenMetrics text format, for a textfile
/// collector or any scraper that reads files.
pub fn openmetrics_text(m: &Metrics) -> String {
    let mut out = String::new();
    for s in STATS {
        let v = (s.get)(m) as f64;
        om_family(&mut out, s.om_name, s.kind, s.desc, &[(String::new(), v)]);
    }
    for s in CLASS_STATS {
        let samples: Vec<_> = m
            .classes
            .iter()
            .map(|(k, c)| (format!("{{class=\"{k}\"}}"), (s.get)(c) as f64))
            .collect();
        om_family(&mut out, s.om_name, s.kind, s.desc, &samples);
    }
    for s in TENANT_STATS {
        let samples: Vec<_> = m
            .tenants
            .iter()
            .map(|(k, t)| (format!("{{tenant=\"{k}\"}}"), (s.get)(t) as f64))
            .collect();
        om_family(&mut out, s.om_name, s.kind, s.desc, &samples);
    }
    let hists = m
        .classes
        .iter()
        .map(|(k, c)| (format!("class=\"{k}\""), &c.latency_hist));
    om_histogram(&mut out, "wakeup_latency_us", hists);
    let hists = m
        .tenants
        .iter()
        .map(|(k, t)| (format!("tenant=\"{k}\""), &t.latency_hist));
    om_histogram(&mut out, "tenant_wakeup_latency_us", hists);
    // The per-CPU gauge's description is its scx_stats one.
    let meta = CpuMetrics::meta();
    let help = meta.fields["irq_pct"].attrs.desc.as_deref().unwrap_or("");
    let samples: Vec<_> = m
        .cpus
        .iter()
        .map(|(cpu, c)| (format!("{{cpu=\"{cpu}\"}}"), c.irq_pct))
        .collect();
    om_family(&mut out, "cpu_irq_pct", Kind::Gauge, help, &samples);
    out.push_str("# EOF\n");
    out
}

/// Writes `text` to `path` atomically (a reader never sees half a file).
pub fn write_atomically(path: &std::path::Path, text: &str) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// Latest metrics, shared between the scheduler loop and the stats server.
pub type SharedMetrics = Arc<Mutex<Metrics>>;

/// What the stats server serves: the metrics' description and values.
fn server_data(metrics: SharedMetrics) -> StatsServerData<(), ()> {
    StatsServerData::new()
        .add_meta(ClassMetrics::meta())
        .add_meta(TenantMetrics::meta())
        .add_meta(CpuMetrics::meta())
        .add_meta(Metrics::meta())
        .add_stats(
            "top",
            Box::new(move |_args, _chan| metrics.lock().unwrap().to_json()),
        )
}

/// Writes the description of every statistic (`--help-stats`).
pub fn describe<W: Write>(w: &mut W) -> Result<()> {
    server_data(SharedMetrics::default()).describe_meta(w, None)
}

/// Starts the stats server at scx_stats' default socket path.
pub fn launch_server(metrics: SharedMetrics) -> Result<StatsServer<(), ()>> {
    StatsServer::new(server_data(metrics)).launch()
}

/// Prints the running scheduler's metrics every `interval`, as deltas.
pub fn monitor(interval: Duration, should_exit: impl FnMut() -> bool) -> Result<()> {
    let mut prev: Option<Metrics> = None;
    scx_utils::monitor_stats::<Metrics>(&[], interval, should_exit, |m| {
        let shown = match &prev {
            Some(p) => m.delta(p),
            None => m.clone(),
        };
        shown.format(&mut std::io::stdout())?;
        prev = Some(m);
        Ok(())
    })
}

/// One snapshot of the running scheduler's metrics: pretty JSON, or one
/// `dotted.key value` line per number (`flat`, for shell scripts).
pub fn snapshot(flat: bool) -> Result<String> {
    let mut client = StatsClient::new()
        .connect(None)
        .map_err(|e| anyhow::anyhow!("scx_express is not running (stats socket: {e})"))?;
    let m: Metrics = client.request("stats", vec![])?;
    let v = serde_json::to_value(&m)?;
    if !flat {
        return Ok(serde_json::to_string_pretty(&v)?);
    }
    let mut lines = Vec::new();
    flatten("", &v, &mut lines);
    Ok(lines.join("\n"))
}

fn flatten(prefix: &str, v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        other => out.push(format!("{prefix} {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every slot of a BPF counter enum (0..nr) is read by exactly one row.
    fn assert_one_row_per_slot<T>(
        table: &[Stat<T>],
        nr: u32,
        slot: fn(Source) -> Option<u32>,
        what: &str,
    ) {
        let mut rows: Vec<Vec<&str>> = vec![Vec::new(); nr as usize];
        for s in table {
            if let Some(i) = slot(s.source) {
                assert!(
                    i < nr,
                    "row {} reads {what} slot {i}, past NR = {nr}",
                    s.field
                );
                rows[i as usize].push(s.field);
            }
        }
        for (i, r) in rows.iter().enumerate() {
            assert_eq!(
                r.len(),
                1,
                "{what} slot {i} is read by rows {r:?}, not exactly one"
            );
        }
    }

    #[test]
    fn every_bpf_stat_has_exactly_one_row() {
        let bpf = |s| match s {
            Source::Bpf(i) => Some(i),
            _ => None,
        };
        let lane = |s| match s {
            Source::Lane(i) => Some(i),
            _ => None,
        };
        assert_one_row_per_slot(STATS, stat_idx_NR_EXPRESS_STATS, bpf, "enum stat_idx");
        assert_one_row_per_slot(
            CLASS_STATS,
            lane_stat_idx_NR_LANE_STATS,
            lane,
            "enum lane_stat_idx",
        );
        let tenant = |s| match s {
            Source::Tenant(i) => Some(i),
            _ => None,
        };
        assert_one_row_per_slot(
            TENANT_STATS,
            tenant_stat_idx_NR_TENANT_STATS,
            tenant,
            "enum tenant_stat_idx",
        );
        // The latency counters before the histogram: one row each, per
        // class and per tenant (the histogram is a field of its own).
        let lat = |s| match s {
            Source::Lat(i) => Some(i),
            _ => None,
        };
        for (name, table) in [
            (
                "class",
                CLASS_STATS.iter().map(|s| s.source).collect::<Vec<_>>(),
            ),
            ("tenant", TENANT_STATS.iter().map(|s| s.source).collect()),
        ] {
            let mut slots: Vec<u32> = table.into_iter().filter_map(lat).collect();
            slots.sort();
            assert_eq!(
                slots,
                (0..lat_stat_idx_LAT_HIST).collect::<Vec<_>>(),
                "{name}"
            );
        }
        assert!(
            STATS.iter().all(|s| lane(s.source).is_none()),
            "lane slot in STATS"
        );
        assert!(
            CLASS_STATS.iter().all(|s| bpf(s.source).is_none()),
            "stat slot in CLASS_STATS"
        );
    }

    #[test]
    fn intf_h_enums_match_the_bindings() {
        // The bindings are generated from intf.h, so this checks the
        // parse below; it guards the row test against an enum whose
        // NR_ entry is not last (a slot bindgen numbers past it).
        let h = include_str!("bpf/intf.h");
        for (name, nr) in [
            ("stat_idx", stat_idx_NR_EXPRESS_STATS),
            ("lane_stat_idx", lane_stat_idx_NR_LANE_STATS),
        ] {
            let body = h
                .split(&format!("enum {name} {{"))
                .nth(1)
                .and_then(|b| b.split("};").next())
                .unwrap_or_else(|| panic!("enum {name} not in intf.h"));
            let entries: Vec<&str> = body
                .lines()
                .map(|l| l.split("/*").next().unwrap().trim())
                .filter(|l| !l.is_empty())
                .collect();
            assert!(
                entries.last().unwrap().starts_with("NR_"),
                "{name}: NR_ not last"
            );
            assert_eq!(entries.len() - 1, nr as usize, "{name}: {entries:?}");
        }
    }

    #[test]
    fn rows_agree_with_scx_stats_meta_and_are_unique() {
        fn check<T>(table: &[Stat<T>], meta: StatsMeta) {
            for s in table {
                let f = meta.fields.get(s.field).expect(s.field);
                assert_eq!(f.attrs.desc.as_deref(), Some(s.desc), "{}", s.field);
            }
            let mut om: Vec<_> = table.iter().map(|s| s.om_name).collect();
            om.sort();
            om.dedup();
            assert_eq!(om.len(), table.len(), "duplicate OpenMetrics name");
        }
        check(STATS, Metrics::meta());
        check(CLASS_STATS, ClassMetrics::meta());
        check(TENANT_STATS, TenantMetrics::meta());
        let class: Vec<_> = CLASS_STATS.iter().map(|s| s.om_name).collect();
        assert!(
            TENANT_STATS.iter().all(|s| !class.contains(&s.om_name)),
            "a tenant family shares a name with a class one"
        );
        let top: Vec<_> = STATS.iter().map(|s| s.om_name).collect();
        assert!(
            CLASS_STATS.iter().all(|s| !top.contains(&s.om_name)),
            "a class family shares a name with a machine-wide one"
        );
    }

    #[test]
    fn fill_converts_ns_rows_to_their_unit() {
        let mut m = Metrics::default();
        fill(STATS, &mut m, |s| match s {
            Source::Bpf(i) if i == stat_idx_STAT_FAIR_WAIT_NS => Some(2_500_000),
            Source::Bpf(i) if i == stat_idx_STAT_FAIR_CHARGED_NS => Some(2_500_000),
            Source::Bpf(i) if i == stat_idx_STAT_RESCUED => Some(7),
            _ => None,
        });
        assert_eq!(
            (m.fair_wait_us, m.fair_charged_ms, m.rescued),
            (2_500, 2, 7)
        );
        assert_eq!(m.user_queued, 0, "rows without a value stay unset");
    }

    #[test]
    fn text_shows_every_row_under_its_tag() {
        let mut m = Metrics {
            fair_wait_us: 12,
            ..Default::default()
        };
        m.classes.insert("gpu".into(), ClassMetrics::default());
        let mut buf = Vec::new();
        m.format(&mut buf).unwrap();
        let text = String::from_utf8(buf).unwrap();
        let fair: String = text.lines().filter(|l| l.starts_with("[fair] ")).collect();
        let gpu: String = text.lines().filter(|l| l.starts_with("[gpu] ")).collect();
        assert!(fair.contains(" fair_wait_us 12 "), "{text}");
        for s in STATS {
            assert!(
                fair.contains(&format!(" {} ", s.field)),
                "{} missing: {text}",
                s.field
            );
        }
        for s in CLASS_STATS {
            assert!(
                gpu.contains(&format!(" {} ", s.field)),
                "{} missing: {text}",
                s.field
            );
        }
    }

    #[test]
    fn flat_keys_are_dotted_paths() {
        let mut m = Metrics {
            rescued: 3,
            ..Default::default()
        };
        m.classes.insert(
            "gpu".into(),
            ClassMetrics {
                prev: 7,
                ..Default::default()
            },
        );
        let mut lines = Vec::new();
        flatten("", &serde_json::to_value(&m).unwrap(), &mut lines);
        assert!(lines.contains(&"rescued 3".to_string()));
        assert!(lines.contains(&"classes.gpu.prev 7".to_string()));
    }

    #[test]
    fn openmetrics_has_class_labels_and_ends_with_eof() {
        let mut m = Metrics::default();
        m.classes.insert(
            "gpu".into(),
            ClassMetrics {
                no_tokens: 4,
                ..Default::default()
            },
        );
        let text = openmetrics_text(&m);
        assert!(
            text.contains("scx_express_budget_exhausted_total{class=\"gpu\"} 4"),
            "{text}"
        );
        assert!(text.contains("# TYPE scx_express_rescued counter"));
        assert!(text.contains("# TYPE scx_express_fair_tasks gauge"));
        assert!(
            text.contains("\nscx_express_fair_tasks 0\n"),
            "a gauge has no _total"
        );
        assert!(text.ends_with("# EOF\n"));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().unwrap();
            assert!(value.parse::<f64>().is_ok(), "bad sample line {line:?}");
        }
    }

    fn hist(pairs: &[(usize, u64)]) -> Vec<u64> {
        let mut h = vec![0; express_consts_LAT_BUCKETS as usize];
        for &(i, n) in pairs {
            h[i] = n;
        }
        h
    }

    #[test]
    fn tenants_show_in_text_openmetrics_and_deltas() {
        let mut a = Metrics::default();
        a.tenants.insert(
            "team-a".into(),
            TenantMetrics {
                class: "agent".into(),
                express: 10,
                quota: 3,
                wakeups: 6,
                latency_hist: hist(&[(0, 1), (3, 5)]),
                ..Default::default()
            },
        );
        let mut buf = Vec::new();
        a.format(&mut buf).unwrap();
        let text = String::from_utf8(buf).unwrap();
        assert!(text.contains("[tenant team-a] express 10 "), "{text}");
        assert!(
            text.contains("[tenant team-a] latency_us <1:1 4-8:5\n"),
            "{text}"
        );
        let om = openmetrics_text(&a);
        assert!(
            om.contains("scx_express_tenant_quota_total{tenant=\"team-a\"} 3"),
            "{om}"
        );
        assert!(
            om.contains("# TYPE scx_express_tenant_wakeup_latency_us histogram"),
            "{om}"
        );
        // Cumulative buckets: le=4 holds bucket 0 only; le=8 adds bucket 3.
        let b = "scx_express_tenant_wakeup_latency_us_bucket{tenant=\"team-a\",";
        assert!(om.contains(&format!("{b}le=\"4\"}} 1\n")), "{om}");
        assert!(om.contains(&format!("{b}le=\"8\"}} 6\n")), "{om}");
        assert!(om.contains(&format!("{b}le=\"+Inf\"}} 6\n")), "{om}");
        let mut b2 = a.clone();
        let t = b2.tenants.get_mut("team-a").unwrap();
        t.express = 15;
        t.latency_hist = hist(&[(0, 1), (3, 9)]);
        let d = b2.delta(&a);
        assert_eq!(d.tenants["team-a"].express, 5);
        assert_eq!(d.tenants["team-a"].latency_hist, hist(&[(3, 4)]));
        assert_eq!(d.tenants["team-a"].class, "agent");
    }

    #[test]
    fn delta_subtracts_counters_keeps_gauges() {
        let mut a = Metrics {
            user_queued: 10,
            fair_wait_us: 700,
            user_lag_max_us: 40,
            fair_tasks: 5,
            ..Default::default()
        };
        a.cpus.insert(
            "0".into(),
            CpuMetrics {
                express_runs: 4,
                irq_pct: 1.5,
            },
        );
        let mut b = a.clone();
        b.user_queued = 25;
        b.fair_wait_us = 1000;
        b.user_lag_max_us = 30;
        b.cpus.insert(
            "0".into(),
            CpuMetrics {
                express_runs: 9,
                irq_pct: 3.0,
            },
        );
        let d = b.delta(&a);
        assert_eq!(d.user_queued, 15);
        assert_eq!(d.fair_tasks, 5);
        assert_eq!(d.fair_wait_us, 300);
        assert_eq!(d.user_lag_max_us, 30, "a gauge: the newest value");
        assert_eq!(d.cpus["0"].express_runs, 5);
        assert_eq!(d.cpus["0"].irq_pct, 3.0);
        let mut c = b.clone();
        c.classes.insert(
            "gpu".into(),
            ClassMetrics {
                wait_us: 50,
                ..Default::default()
            },
        );
        c.classes.insert(
            "agent".into(),
            ClassMetrics {
                prev: 2,
                ..Default::default()
            },
        );
        let mut e = c.clone();
        e.classes.get_mut("gpu").unwrap().wait_us = 80;
        e.classes.insert(
            "new".into(),
            ClassMetrics {
                llc: 6,
                ..Default::default()
            },
        );
        let d = e.delta(&c);
        assert_eq!(d.classes["gpu"].wait_us, 30);
        assert_eq!(d.classes["agent"].prev, 0);
        assert_eq!(
            d.classes["new"].llc, 6,
            "a class first seen: its whole count"
        );
    }
}

#[cfg(test)]
mod server_tests {
    use super::*;

    #[test]
    fn stats_server_serves_metrics() {
        let path = std::env::temp_dir().join(format!("scx_express-stats-{}", std::process::id()));
        let metrics = SharedMetrics::default();
        metrics.lock().unwrap().rescued = 42;
        let data = server_data(metrics);
        let _server = StatsServer::new(data).set_path(&path).launch().unwrap();
        let mut client = StatsClient::new().set_path(&path).connect(None).unwrap();
        let m: Metrics = client.request("stats", vec![]).unwrap();
        assert_eq!(m.rescued, 42);
    }
}
