//! Statistics: the scx_stats server behind `--stats` and `--monitor`.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use scx_stats::prelude::*;
use scx_stats_derive::{stat_doc, Stats};
use serde::{Deserialize, Serialize};

#[stat_doc]
#[derive(Clone, Debug, Default, Serialize, Deserialize, Stats)]
#[stat(_om_prefix = "c_", _om_label = "class")]
pub struct ClassMetrics {
    #[stat(desc = "Express wakeups placed on the previous CPU")]
    pub prev: u64,
    #[stat(desc = "Express wakeups placed on an idle CPU of the same LLC")]
    pub llc: u64,
    #[stat(desc = "Express wakeups placed on any idle CPU")]
    pub any: u64,
    #[stat(desc = "Express wakeups that preempted a normal task")]
    pub preempt: u64,
    #[stat(desc = "Of those, on the waker's CPU (synchronous wakeups)")]
    pub preempt_waker: u64,
    #[stat(desc = "Express wakeups placed on an IRQ-hot or deep-idle CPU: none quiet was free")]
    pub not_quiet: u64,
    #[stat(desc = "Express tasks kept at the head of their CPU after a slice")]
    pub requeue: u64,
    #[stat(desc = "Idle CPUs skipped for being IRQ-hot")]
    pub irq_hot_skips: u64,
    #[stat(desc = "Idle CPUs skipped for being in a deep idle state")]
    pub deep_idle_skips: u64,
    #[stat(desc = "Budget exhaustions: express tasks out of tokens")]
    pub no_tokens: u64,
    #[stat(desc = "Class over its max_share: express tasks sent to the fair path")]
    pub class_cap: u64,
    #[stat(desc = "Express tasks with no suitable CPU: fair path")]
    pub fallback: u64,
    #[stat(desc = "Total time express dispatches waited to run (us)")]
    pub wait_us: u64,
    #[stat(desc = "Express dispatches that waited over 1 ms to run")]
    pub waits_over_1ms: u64,
    #[stat(desc = "Express runs that lost the CPU while still runnable")]
    pub lost_cpu: u64,
    #[stat(desc = "Of those, before their slice ended: preempted")]
    pub cut_short: u64,
}

#[stat_doc]
#[derive(Clone, Debug, Default, Serialize, Deserialize, Stats)]
#[stat(_om_prefix = "cpu_", _om_label = "cpu")]
pub struct CpuMetrics {
    #[stat(desc = "Express-lane runs started on this CPU")]
    pub express_runs: u64,
    #[stat(desc = "Hard+soft IRQ time in the last window, percent")]
    pub irq_pct: f64,
}

#[stat_doc]
#[derive(Clone, Debug, Default, Serialize, Deserialize, Stats)]
#[stat(top)]
pub struct Metrics {
    #[stat(desc = "Tasks handed to the userspace scheduler")]
    pub user_queued: u64,
    #[stat(desc = "Decisions sent back by the userspace scheduler")]
    pub user_dispatched: u64,
    #[stat(desc = "Wakeups placed directly on an idle CPU")]
    pub direct_idle: u64,
    #[stat(desc = "Per-CPU kthreads dispatched locally")]
    pub kthread: u64,
    #[stat(desc = "Wakeups of the scheduler's own threads")]
    pub usersched: u64,
    #[stat(desc = "Tasks enqueued by BPF alone (userspace busy)")]
    pub fallback: u64,
    #[stat(desc = "Tasks rescued by BPF after waiting rescue_ms for userspace")]
    pub rescued: u64,
    #[stat(desc = "Fair-path wakeups that preempted a later-deadline task")]
    pub wakeup_preempt: u64,
    #[stat(desc = "Fair-path wakeups queued (in userspace mode: decided by userspace) that ran")]
    pub fair_wakeups: u64,
    #[stat(desc = "Total time their decisions took, wakeup to dispatch (us)")]
    pub fair_decide_us: u64,
    #[stat(desc = "Total time they waited to run, wakeup to running (us)")]
    pub fair_wait_us: u64,
    #[stat(desc = "Fair-path wakeups that waited over 1 ms to run")]
    pub fair_waits_over_1ms: u64,
    #[stat(desc = "Fair-path tasks preempted mid-slice, put back in line by BPF")]
    pub fair_preempted: u64,
    #[stat(desc = "Tasks queued by the BPF fair policy (fair.mode = bpf)")]
    pub fair_queued: u64,
    #[stat(desc = "CPU time the fair policy charged to tasks' virtual runtime (ms)")]
    pub fair_charged_ms: u64,
    #[stat(
        desc = "Of it, CPU time forgiven at the debt ceiling: used away from the fair path's order (ms)"
    )]
    pub fair_forgiven_ms: u64,
    #[stat(desc = "Queued fair-path tasks the starvation guard ran out of deadline order")]
    pub fair_starved: u64,
    #[stat(
        desc = "Longest wait of a task for the userspace scheduler to read it, last second (us)"
    )]
    pub user_lag_max_us: u64,
    #[stat(desc = "Tasks known to the fair policy")]
    pub fair_tasks: u64,
    #[stat(desc = "Libraries with CUDA or marker uprobes attached")]
    pub probed_libraries: u64,
    #[stat(desc = "Launch-probe windows opened")]
    pub launch_windows: u64,
    #[stat(desc = "Express-lane counters per class")]
    pub classes: BTreeMap<String, ClassMetrics>,
    #[stat(desc = "Per-CPU express runs and IRQ load")]
    pub cpus: BTreeMap<String, CpuMetrics>,
}

impl ClassMetrics {
    fn delta(&self, p: &ClassMetrics) -> ClassMetrics {
        ClassMetrics {
            prev: self.prev.wrapping_sub(p.prev),
            llc: self.llc.wrapping_sub(p.llc),
            any: self.any.wrapping_sub(p.any),
            preempt: self.preempt.wrapping_sub(p.preempt),
            preempt_waker: self.preempt_waker.wrapping_sub(p.preempt_waker),
            not_quiet: self.not_quiet.wrapping_sub(p.not_quiet),
            requeue: self.requeue.wrapping_sub(p.requeue),
            irq_hot_skips: self.irq_hot_skips.wrapping_sub(p.irq_hot_skips),
            deep_idle_skips: self.deep_idle_skips.wrapping_sub(p.deep_idle_skips),
            no_tokens: self.no_tokens.wrapping_sub(p.no_tokens),
            class_cap: self.class_cap.wrapping_sub(p.class_cap),
            fallback: self.fallback.wrapping_sub(p.fallback),
            wait_us: self.wait_us.wrapping_sub(p.wait_us),
            waits_over_1ms: self.waits_over_1ms.wrapping_sub(p.waits_over_1ms),
            lost_cpu: self.lost_cpu.wrapping_sub(p.lost_cpu),
            cut_short: self.cut_short.wrapping_sub(p.cut_short),
        }
    }

    /// Express runs started: every placement and every requeue.
    pub fn runs(&self) -> u64 {
        self.prev + self.llc + self.any + self.preempt + self.requeue
    }
}

impl Metrics {
    /// A few human-readable lines per interval.
    pub fn format<W: Write>(&self, w: &mut W) -> Result<()> {
        writeln!(
            w,
            "[fair] queued {} user q/d {}/{} idle {} kthr {} self {} fallback {} rescued {} wpreempt {} tasks {} \
             | probes: libs {} windows {}",
            self.fair_queued,
            self.user_queued,
            self.user_dispatched,
            self.direct_idle,
            self.kthread,
            self.usersched,
            self.fallback,
            self.rescued,
            self.wakeup_preempt,
            self.fair_tasks,
            self.probed_libraries,
            self.launch_windows,
        )?;
        let wakeups = self.fair_wakeups.max(1) as f64;
        writeln!(
            w,
            "[fair] wakeups {} | decide avg {:.0}us | wait avg {:.0}us >1ms {} | preempted {} | user lag max {}us \
             | charged {}ms forgiven {}ms | starved {}",
            self.fair_wakeups,
            self.fair_decide_us as f64 / wakeups,
            self.fair_wait_us as f64 / wakeups,
            self.fair_waits_over_1ms,
            self.fair_preempted,
            self.user_lag_max_us,
            self.fair_charged_ms,
            self.fair_forgiven_ms,
            self.fair_starved,
        )?;
        for (name, c) in &self.classes {
            writeln!(
                w,
                "[{name:>5}] prev {} llc {} any {} preempt {} (waker {}) not quiet {} requeue {} | skip irq {} deep {} \
                 | no_tokens {} cap {} fallback {} | wait avg {:.0}us >1ms {} | lost cpu {} (cut {})",
                c.prev,
                c.llc,
                c.any,
                c.preempt,
                c.preempt_waker,
                c.not_quiet,
                c.requeue,
                c.irq_hot_skips,
                c.deep_idle_skips,
                c.no_tokens,
                c.class_cap,
                c.fallback,
                c.wait_us as f64 / c.runs().max(1) as f64,
                c.waits_over_1ms,
                c.lost_cpu,
                c.cut_short,
            )?;
        }
        Ok(())
    }

    /// Counter increase since `prev` (gauges keep their current value).
    pub fn delta(&self, prev: &Metrics) -> Metrics {
        let classes = self
            .classes
            .iter()
            .map(|(k, c)| {
                let d = prev
                    .classes
                    .get(k)
                    .map(|p| c.delta(p))
                    .unwrap_or_else(|| c.clone());
                (k.clone(), d)
            })
            .collect();
        let cpus = self
            .cpus
            .iter()
            .map(|(k, c)| {
                let runs = prev.cpus.get(k).map(|p| p.express_runs).unwrap_or(0);
                (
                    k.clone(),
                    CpuMetrics {
                        express_runs: c.express_runs.wrapping_sub(runs),
                        irq_pct: c.irq_pct,
                    },
                )
            })
            .collect();
        Metrics {
            user_queued: self.user_queued.wrapping_sub(prev.user_queued),
            user_dispatched: self.user_dispatched.wrapping_sub(prev.user_dispatched),
            direct_idle: self.direct_idle.wrapping_sub(prev.direct_idle),
            kthread: self.kthread.wrapping_sub(prev.kthread),
            usersched: self.usersched.wrapping_sub(prev.usersched),
            fallback: self.fallback.wrapping_sub(prev.fallback),
            rescued: self.rescued.wrapping_sub(prev.rescued),
            wakeup_preempt: self.wakeup_preempt.wrapping_sub(prev.wakeup_preempt),
            fair_wakeups: self.fair_wakeups.wrapping_sub(prev.fair_wakeups),
            fair_decide_us: self.fair_decide_us.wrapping_sub(prev.fair_decide_us),
            fair_wait_us: self.fair_wait_us.wrapping_sub(prev.fair_wait_us),
            fair_waits_over_1ms: self
                .fair_waits_over_1ms
                .wrapping_sub(prev.fair_waits_over_1ms),
            fair_preempted: self.fair_preempted.wrapping_sub(prev.fair_preempted),
            fair_queued: self.fair_queued.wrapping_sub(prev.fair_queued),
            fair_charged_ms: self.fair_charged_ms.wrapping_sub(prev.fair_charged_ms),
            fair_forgiven_ms: self.fair_forgiven_ms.wrapping_sub(prev.fair_forgiven_ms),
            fair_starved: self.fair_starved.wrapping_sub(prev.fair_starved),
            user_lag_max_us: self.user_lag_max_us,
            fair_tasks: self.fair_tasks,
            probed_libraries: self.probed_libraries,
            launch_windows: self.launch_windows.wrapping_sub(prev.launch_windows),
            classes,
            cpus,
        }
    }
}

/// The metrics in the Prometheus/OpenMetrics text format, for a textfile
/// collector or any scraper that reads files.
pub fn openmetrics_text(m: &Metrics) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let mut counter = |name: &str, help: &str, samples: &[(String, f64)]| {
        let _ = writeln!(out, "# HELP scx_express_{name} {help}");
        let _ = writeln!(out, "# TYPE scx_express_{name} counter");
        for (labels, v) in samples {
            let _ = writeln!(out, "scx_express_{name}_total{labels} {v}");
        }
    };
    let totals: [(&str, &str, u64); 16] = [
        (
            "user_queued",
            "Tasks handed to the userspace scheduler",
            m.user_queued,
        ),
        (
            "user_dispatched",
            "Decisions sent back by userspace",
            m.user_dispatched,
        ),
        (
            "direct_idle",
            "Wakeups placed directly on an idle CPU",
            m.direct_idle,
        ),
        ("fallback", "Tasks enqueued by BPF alone", m.fallback),
        ("rescued", "Tasks rescued by BPF after rescue_ms", m.rescued),
        (
            "wakeup_preempt",
            "Fair-path wakeups that preempted a later-deadline task",
            m.wakeup_preempt,
        ),
        (
            "fair_wakeups",
            "Fair-path wakeups queued that ran",
            m.fair_wakeups,
        ),
        (
            "fair_decide_us",
            "Time fair wakeups waited for their decision, microseconds",
            m.fair_decide_us,
        ),
        (
            "fair_wait_us",
            "Time fair wakeups waited to run, microseconds",
            m.fair_wait_us,
        ),
        (
            "fair_waits_over_1ms",
            "Fair-path wakeups that waited over 1 ms to run",
            m.fair_waits_over_1ms,
        ),
        (
            "fair_preempted",
            "Fair-path tasks preempted mid-slice, put back in line by BPF",
            m.fair_preempted,
        ),
        (
            "fair_queued",
            "Tasks queued by the BPF fair policy",
            m.fair_queued,
        ),
        (
            "fair_charged_ms",
            "CPU time the fair policy charged to virtual runtime, milliseconds",
            m.fair_charged_ms,
        ),
        (
            "fair_forgiven_ms",
            "Of it, CPU time forgiven at the debt ceiling, milliseconds",
            m.fair_forgiven_ms,
        ),
        (
            "fair_starved",
            "Queued fair-path tasks the starvation guard ran out of deadline order",
            m.fair_starved,
        ),
        (
            "launch_windows",
            "Launch-probe windows opened",
            m.launch_windows,
        ),
    ];
    for (name, help, v) in totals {
        counter(name, help, &[(String::new(), v as f64)]);
    }
    let per_class = |f: fn(&ClassMetrics) -> u64| -> Vec<(String, f64)> {
        m.classes
            .iter()
            .map(|(k, c)| (format!("{{class=\"{k}\"}}"), f(c) as f64))
            .collect()
    };
    type Field = fn(&ClassMetrics) -> u64;
    let lanes: [(&str, &str, Field); 16] = [
        ("express_prev", "Express wakeups on the previous CPU", |c| {
            c.prev
        }),
        (
            "express_llc",
            "Express wakeups on an idle CPU of the same LLC",
            |c| c.llc,
        ),
        ("express_any", "Express wakeups on any idle CPU", |c| c.any),
        (
            "express_preempt",
            "Express wakeups that preempted a normal task",
            |c| c.preempt,
        ),
        (
            "express_preempt_waker",
            "Of those, on the waker's CPU (synchronous wakeups)",
            |c| c.preempt_waker,
        ),
        (
            "express_not_quiet",
            "Express wakeups on an IRQ-hot or deep-idle CPU (none quiet was free)",
            |c| c.not_quiet,
        ),
        (
            "express_requeue",
            "Express tasks kept at the head after a slice",
            |c| c.requeue,
        ),
        (
            "irq_hot_skips",
            "Idle CPUs skipped for being IRQ-hot",
            |c| c.irq_hot_skips,
        ),
        ("deep_idle_skips", "Idle CPUs skipped for deep idle", |c| {
            c.deep_idle_skips
        }),
        ("budget_exhausted", "Express tasks out of tokens", |c| {
            c.no_tokens
        }),
        (
            "class_cap",
            "Express tasks over their class max_share",
            |c| c.class_cap,
        ),
        (
            "express_fallback",
            "Express tasks with no suitable CPU",
            |c| c.fallback,
        ),
        (
            "express_wait_us",
            "Time express dispatches waited to run, microseconds",
            |c| c.wait_us,
        ),
        (
            "express_waits_over_1ms",
            "Express dispatches that waited over 1 ms to run",
            |c| c.waits_over_1ms,
        ),
        (
            "express_lost_cpu",
            "Express runs that lost the CPU while still runnable",
            |c| c.lost_cpu,
        ),
        (
            "express_cut_short",
            "Express runs preempted before their slice ended",
            |c| c.cut_short,
        ),
    ];
    for (name, help, f) in lanes {
        counter(name, help, &per_class(f));
    }
    let _ = writeln!(
        out,
        "# HELP scx_express_probed_libraries Libraries with uprobes attached"
    );
    let _ = writeln!(out, "# TYPE scx_express_probed_libraries gauge");
    let _ = writeln!(out, "scx_express_probed_libraries {}", m.probed_libraries);
    let _ = writeln!(
        out,
        "# HELP scx_express_cpu_irq_pct Hard+soft IRQ time in the last window, percent"
    );
    let _ = writeln!(out, "# TYPE scx_express_cpu_irq_pct gauge");
    for (cpu, c) in &m.cpus {
        let _ = writeln!(
            out,
            "scx_express_cpu_irq_pct{{cpu=\"{cpu}\"}} {}",
            c.irq_pct
        );
    }
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
        assert!(text.ends_with("# EOF\n"));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().unwrap();
            assert!(value.parse::<f64>().is_ok(), "bad sample line {line:?}");
        }
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
