//! Aggregation (median, min–max over repeats; ratios against the same
//! scheduler's baseline and against EEVDF), results.json, report.md, and
//! the completeness check of a report directory.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::parse::{self, Kind, Measured, RawCell};
use super::{Plan, Scenario, Sched, Workload};

/// One measured cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellResult {
    pub sched: Sched,
    pub scenario: Scenario,
    pub workload: Workload,
    pub repeat: u32,
    pub ok: bool,
    #[serde(flatten)]
    pub measured: Measured,
    /// The guest's bookkeeping (rc, wall_cs, sched_ticks, state, ...).
    pub meta: BTreeMap<String, String>,
}

/// One VM boot (one scheduler).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Boot {
    pub sched: String,
    pub info: BTreeMap<String, String>,
    #[serde(rename = "final")]
    pub final_: BTreeMap<String, String>,
}

/// Median and range of one metric over repeats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub values: Vec<f64>,
}

impl Summary {
    pub fn of(values: &[f64]) -> Option<Summary> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Summary {
            median,
            min: v[0],
            max: v[n - 1],
            values: v,
        })
    }
}

/// A metric of one scheduler × scenario × workload over its repeats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Aggregate {
    pub sched: Sched,
    pub scenario: Scenario,
    pub workload: Workload,
    pub metric: String,
    #[serde(flatten)]
    pub summary: Summary,
    /// Median ÷ the same scheduler's baseline median.
    pub vs_baseline: Option<f64>,
    /// Median ÷ EEVDF's median in the same scenario.
    pub vs_eevdf: Option<f64>,
}

/// Everything a run produced: results.json.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Results {
    pub plan: Plan,
    /// UTC date the report was made.
    pub date: String,
    pub kernel: String,
    /// The machine the VMs ran on (host.txt), if known.
    pub host: String,
    pub boots: Vec<Boot>,
    pub cells: Vec<CellResult>,
    pub aggregates: Vec<Aggregate>,
}

type Key = (Sched, Scenario, Workload);

impl Results {
    pub fn build(plan: &Plan, raw: Vec<RawCell>, host: String) -> Results {
        let mut cells: BTreeMap<(Key, u32), CellResult> = BTreeMap::new();
        let mut boots: BTreeMap<String, Boot> = BTreeMap::new();
        for r in raw {
            let sched = r.header.get("sched").cloned().unwrap_or_default();
            match r.kind {
                Kind::Info => {
                    // A bundle run split by repeats leaves one boot per
                    // scheduler and log: the retries of every one count.
                    let b = boots.entry(sched.clone()).or_default();
                    let before = boot_retries(&b.info);
                    b.info = r.meta;
                    let sum = before + boot_retries(&b.info);
                    b.info.insert("retried_boots".into(), sum.to_string());
                }
                Kind::Final => boots.entry(sched.clone()).or_default().final_ = r.meta,
                Kind::Cell => {
                    let h = |k: &str| r.header.get(k).map(String::as_str).unwrap_or("");
                    let (Ok(s), Ok(c), Ok(w), Ok(rep)) = (
                        Sched::parse(h("sched")),
                        Scenario::parse(h("scenario")),
                        Workload::parse(h("workload")),
                        h("repeat").parse::<u32>(),
                    ) else {
                        eprintln!("bench: warning: a cell with an unknown key: {:?}", r.header);
                        continue;
                    };
                    // Only the plan's cells (--from-logs --schedulers picks some).
                    if !plan.schedulers.contains(&s)
                        || !plan.scenarios.contains(&c)
                        || !plan.workloads.contains(&w)
                        || !(1..=plan.repeats).contains(&rep)
                    {
                        continue;
                    }
                    let measured = parse::measure(&r);
                    let ok = measured.errors.is_empty();
                    cells.insert(
                        ((s, c, w), rep),
                        CellResult {
                            sched: s,
                            scenario: c,
                            workload: w,
                            repeat: rep,
                            ok,
                            measured,
                            meta: r.meta,
                        },
                    );
                }
            }
            if let Some(b) = boots.get_mut(&sched) {
                b.sched = sched;
            }
        }
        let cells: Vec<CellResult> = cells.into_values().collect();
        boots.retain(|name, _| plan.schedulers.iter().any(|s| s.name() == *name));
        let kernel = boots
            .values()
            .find_map(|b| b.info.get("kernel").cloned())
            .unwrap_or_else(|| "unknown".into());
        let mut res = Results {
            plan: plan.clone(),
            date: today(),
            kernel,
            host,
            boots: boots.into_values().collect(),
            cells,
            aggregates: vec![],
        };
        res.aggregates = res.aggregate();
        res
    }

    fn aggregate(&self) -> Vec<Aggregate> {
        let mut vals: BTreeMap<(Key, String), Vec<f64>> = BTreeMap::new();
        for c in self.cells.iter().filter(|c| c.ok) {
            for (m, v) in &c.measured.metrics {
                vals.entry(((c.sched, c.scenario, c.workload), m.clone()))
                    .or_default()
                    .push(*v);
            }
        }
        let sums: BTreeMap<(Key, String), Summary> = vals
            .into_iter()
            .filter_map(|(k, v)| Some((k, Summary::of(&v)?)))
            .collect();
        let ratio =
            |a: f64, b: Option<&Summary>| b.map(|b| b.median).filter(|b| *b != 0.0).map(|b| a / b);
        sums.iter()
            .map(|(((s, c, w), m), sum)| Aggregate {
                sched: *s,
                scenario: *c,
                workload: *w,
                metric: m.clone(),
                summary: sum.clone(),
                vs_baseline: ratio(
                    sum.median,
                    sums.get(&((*s, Scenario::Baseline, *w), m.clone())),
                ),
                vs_eevdf: ratio(sum.median, sums.get(&((Sched::Eevdf, *c, *w), m.clone()))),
            })
            .collect()
    }

    pub fn get(&self, s: Sched, c: Scenario, w: Workload, metric: &str) -> Option<&Aggregate> {
        self.aggregates
            .iter()
            .find(|a| a.sched == s && a.scenario == c && a.workload == w && a.metric == metric)
    }

    pub fn expected_cells(&self) -> usize {
        let p = &self.plan;
        p.schedulers.len() * p.scenarios.len() * p.workloads.len() * p.repeats as usize
    }

    /// Planned cells that are absent or failed, as "sched/scenario/workload/rN: why".
    pub fn missing_cells(&self) -> Vec<String> {
        let p = &self.plan;
        let mut out = vec![];
        for &s in &p.schedulers {
            for &c in &p.scenarios {
                for &w in &p.workloads {
                    for r in 1..=p.repeats {
                        let name = format!("{}/{}/{}/r{r}", s.name(), c.name(), w.name());
                        match self.cells.iter().find(|x| {
                            x.sched == s && x.scenario == c && x.workload == w && x.repeat == r
                        }) {
                            None => out.push(format!("{name}: missing")),
                            Some(x) if !x.ok => {
                                out.push(format!("{name}: {}", x.measured.errors.join("; ")))
                            }
                            _ => {}
                        }
                    }
                }
            }
        }
        out
    }
}

/// Today's UTC date, YYYY-MM-DD.
fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    civil_date(secs / 86400)
}

/// Days since 1970-01-01 to a proleptic Gregorian date.
fn civil_date(days: u64) -> String {
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// A table of the report: one metric of one workload.
pub struct TableDef {
    pub workload: Workload,
    pub metric: &'static str,
    pub title: &'static str,
    /// Multiply stored values by this for display.
    pub scale: f64,
    pub unit: &'static str,
    pub higher_is_better: bool,
}

/// The report's workload tables, in order.
pub const TABLES: &[TableDef] = &[
    TableDef {
        workload: Workload::Decode,
        metric: "tok_s",
        title: "Decode stand-in: tokens per second",
        scale: 1.0,
        unit: "tok/s",
        higher_is_better: true,
    },
    TableDef {
        workload: Workload::Decode,
        metric: "tok_p99_us",
        title: "Decode stand-in: per-token p99",
        scale: 1e-3,
        unit: "ms",
        higher_is_better: false,
    },
    TableDef {
        workload: Workload::Decode,
        metric: "tok_p50_us",
        title: "Decode stand-in: per-token p50",
        scale: 1e-3,
        unit: "ms",
        higher_is_better: false,
    },
    TableDef {
        workload: Workload::Decode,
        metric: "sched_per_1k",
        title: "Decode stand-in: Sched/1K (launcher context switches per 1,000 launches)",
        scale: 1.0,
        unit: "",
        higher_is_better: false,
    },
    TableDef {
        workload: Workload::Agent,
        metric: "tail_p99_us",
        title: "Agent stand-in: local tail p99",
        scale: 1.0,
        unit: "µs",
        higher_is_better: false,
    },
    TableDef {
        workload: Workload::Agent,
        metric: "tail_p999_us",
        title: "Agent stand-in: local tail p99.9",
        scale: 1.0,
        unit: "µs",
        higher_is_better: false,
    },
    TableDef {
        workload: Workload::Agent,
        metric: "tail_p50_us",
        title: "Agent stand-in: local tail p50",
        scale: 1.0,
        unit: "µs",
        higher_is_better: false,
    },
    TableDef {
        workload: Workload::Agent,
        metric: "steps_s",
        title: "Agent stand-in: steps per second",
        scale: 1.0,
        unit: "steps/s",
        higher_is_better: true,
    },
    TableDef {
        workload: Workload::Agent,
        metric: "tail_over_1ms",
        title: "Agent stand-in: steps with a local tail over 1 ms",
        scale: 1.0,
        unit: "",
        higher_is_better: false,
    },
    TableDef {
        workload: Workload::Agent,
        metric: "tail_over_1ms_server",
        title: "Agent stand-in: of those, steps where the tool server's write took over half of it (the sending side, not the agent's wakeup)",
        scale: 1.0,
        unit: "",
        higher_is_better: false,
    },
    TableDef {
        workload: Workload::Agent,
        metric: "tail_over_1ms_server_off_cpu",
        title: "Agent stand-in: of those, writes that spent under half their time on the server's CPU clock (off the CPU or in IRQs, not running slowly)",
        scale: 1.0,
        unit: "",
        higher_is_better: false,
    },
    TableDef {
        workload: Workload::Agent,
        metric: "burst_cpu_p50_us",
        title: "Agent stand-in: CPU time of its fixed think step, p50 (a rise is the machine running code slower, not scheduling)",
        scale: 1.0,
        unit: "µs",
        higher_is_better: false,
    },
    TableDef {
        workload: Workload::AgentExec,
        metric: "tail_p99_us",
        title: "Agent with subprocess tools (fork + exec per call): local tail p99",
        scale: 1.0,
        unit: "µs",
        higher_is_better: false,
    },
    TableDef {
        workload: Workload::AgentExec,
        metric: "tail_p999_us",
        title: "Agent with subprocess tools: local tail p99.9",
        scale: 1.0,
        unit: "µs",
        higher_is_better: false,
    },
    TableDef {
        workload: Workload::AgentExec,
        metric: "tail_p50_us",
        title: "Agent with subprocess tools: local tail p50",
        scale: 1.0,
        unit: "µs",
        higher_is_better: false,
    },
    TableDef {
        workload: Workload::AgentExec,
        metric: "steps_s",
        title: "Agent with subprocess tools: steps per second",
        scale: 1.0,
        unit: "steps/s",
        higher_is_better: true,
    },
    TableDef {
        workload: Workload::Wakeup,
        metric: "wake_p99_us",
        title: "Wakeup latency (cyclictest, SCHED_OTHER): p99",
        scale: 1.0,
        unit: "µs",
        higher_is_better: false,
    },
    TableDef {
        workload: Workload::Wakeup,
        metric: "wake_p50_us",
        title: "Wakeup latency (cyclictest, SCHED_OTHER): p50",
        scale: 1.0,
        unit: "µs",
        higher_is_better: false,
    },
    TableDef {
        workload: Workload::Mixed,
        metric: "tok_s",
        title: "Mixed process (decode + helper threads): launcher tokens per second",
        scale: 1.0,
        unit: "tok/s",
        higher_is_better: true,
    },
    TableDef {
        workload: Workload::Mixed,
        metric: "helper_iters_s",
        title: "Mixed process: helper threads' work",
        scale: 1e-6,
        unit: "M iters/s",
        higher_is_better: true,
    },
    TableDef {
        workload: Workload::Mixed,
        metric: "sched_per_1k",
        title: "Mixed process: Sched/1K of the launcher",
        scale: 1.0,
        unit: "",
        higher_is_better: false,
    },
    TableDef {
        workload: Workload::Scale,
        metric: "launchers_tok_s_min",
        title: "Scale (launchers and agents at once): the slowest launcher's tokens per second",
        scale: 1.0,
        unit: "tok/s",
        higher_is_better: true,
    },
    TableDef {
        workload: Workload::Scale,
        metric: "launchers_tok_s_median",
        title: "Scale: the median launcher's tokens per second",
        scale: 1.0,
        unit: "tok/s",
        higher_is_better: true,
    },
    TableDef {
        workload: Workload::Scale,
        metric: "agents_tail_p99_max_us",
        title: "Scale: the worse agent's local tail p99",
        scale: 1.0,
        unit: "µs",
        higher_is_better: false,
    },
    TableDef {
        workload: Workload::Scale,
        metric: "agents_tail_p50_max_us",
        title: "Scale: the worse agent's local tail p50",
        scale: 1.0,
        unit: "µs",
        higher_is_better: false,
    },
];

/// Noise metrics: (metric, label, scenarios that have it).
pub const NOISE: &[(&str, &str, &[Scenario])] = &[
    (
        "cpu_bogo_ops_s",
        "stress-ng bogo-ops/s",
        &[Scenario::Cpu1x, Scenario::Cpu4x, Scenario::Heavy],
    ),
    (
        "net_gbit_s",
        "iperf3 Gbit/s",
        &[Scenario::Net, Scenario::Heavy],
    ),
    ("disk_iops", "fio IOPS", &[Scenario::Disk, Scenario::Heavy]),
];

/// Columns of the express-lane table: (metric, header).
const LANE_COLUMNS: &[(&str, &str)] = &[
    ("lane_wakeups", "express wakeups"),
    ("lane_prev", "prev"),
    ("lane_llc", "LLC"),
    ("lane_any", "any"),
    ("lane_preempt", "preempt"),
    ("lane_preempt_waker", "(waker)"),
    ("lane_not_quiet", "not quiet"),
    ("lane_requeue", "kept after slice"),
    ("lane_no_tokens", "out of tokens"),
    ("lane_class_cap", "class cap"),
    ("lane_fallback", "no CPU"),
    ("lane_slice_fallback", "slice end to fair"),
    ("lane_behind", "behind express"),
    ("lane_irq_hot_skips", "IRQ-hot skipped"),
    ("lane_deep_idle_skips", "deep skipped"),
    ("lane_waits_over_1ms", "waits > 1 ms"),
    ("lane_slow_irq", "(in IRQs)"),
    ("lane_slow_behind", "(behind tasks)"),
    ("lane_slow_idle", "(CPU ran nothing)"),
    ("lane_slow_idle_skips", "slow-idle skipped"),
    ("lane_hold_slow_idle", "holds refused (slow idle)"),
    ("lane_lost_cpu", "lost CPU"),
    ("lane_cut_short", "cut short"),
    ("lane_run_us", "ran in lane (µs)"),
    ("lane_holds", "holds"),
    ("lane_hold_back", "holds taken back"),
    ("lane_held_us", "held (µs)"),
    ("lane_hold_no_quota", "holds refused (quota)"),
    ("lane_hold_whole", "whole-sleep holds"),
    ("lane_hold_irregular", "holds refused (irregular)"),
    ("lane_hold_spare", "not held (CPU idle)"),
    ("lane_hold_taken", "holds taken by others"),
    ("lane_hold_early", "back before window"),
    ("fair_waits_over_1ms", "fair waits > 1 ms"),
    ("launch_windows", "launch windows"),
];

/// One scheduler × scenario of the scale workload, medians over repeats.
#[derive(Debug, Clone, PartialEq)]
pub struct ScaleRow {
    pub launchers: Option<f64>,
    pub tok_min: Option<f64>,
    pub tok_median: Option<f64>,
    /// The slowest launcher ÷ the median launcher of the same scheduler's
    /// baseline (clean) cell.
    pub worst_retention: Option<f64>,
    /// The worse agent's p99, and its ratio to the baseline cell's.
    pub agent_p99: Option<f64>,
    pub agent_p99_vs_clean: Option<f64>,
    /// Each agent's p50/p99 (µs), by agent.
    pub agents: Vec<(f64, f64)>,
    /// stress-ng bogo-ops/s ÷ EEVDF's in the same scenario.
    pub hogs_vs_eevdf: Option<f64>,
}

/// The scale workload's numbers of scheduler `s` in scenario `c`.
pub fn scale_row(r: &Results, s: Sched, c: Scenario) -> ScaleRow {
    let med = |c: Scenario, m: &str| r.get(s, c, Workload::Scale, m).map(|a| a.summary.median);
    let div = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b != 0.0 => Some(a / b),
        _ => None,
    };
    let agents = (1..)
        .map_while(|j| {
            Some((
                med(c, &format!("agent_{j}_tail_p50_us"))?,
                med(c, &format!("agent_{j}_tail_p99_us"))?,
            ))
        })
        .collect();
    ScaleRow {
        launchers: med(c, "launchers"),
        tok_min: med(c, "launchers_tok_s_min"),
        tok_median: med(c, "launchers_tok_s_median"),
        worst_retention: div(
            med(c, "launchers_tok_s_min"),
            med(Scenario::Baseline, "launchers_tok_s_median"),
        ),
        agent_p99: med(c, "agents_tail_p99_max_us"),
        agent_p99_vs_clean: div(
            med(c, "agents_tail_p99_max_us"),
            med(Scenario::Baseline, "agents_tail_p99_max_us"),
        ),
        agents,
        hogs_vs_eevdf: r
            .get(s, c, Workload::Scale, "cpu_bogo_ops_s")
            .and_then(|a| a.vs_eevdf),
    }
}

/// "### Scale": per scheduler and scenario, the launchers' worst
/// retention against the same scheduler's clean cell, the agents' p99
/// against the clean p99, the hogs against EEVDF's; nothing without
/// scale cells.
fn scale_table(r: &Results) -> String {
    let p = &r.plan;
    if !p.workloads.contains(&Workload::Scale) {
        return String::new();
    }
    let mut md = "### Scale: launchers and agents at once\n\n\
                  One decode launcher per two vCPUs (one per \"GPU\") and two agent \
                  loops in one cell; medians over repeats. Worst retention = the slowest \
                  launcher's tok/s ÷ the median launcher's in the same scheduler's \
                  baseline cell; agent p99 = the worse agent's, ÷ the same in the \
                  baseline cell; hogs = stress-ng bogo-ops/s ÷ EEVDF's.\n\n"
        .to_string();
    let cols: Vec<String> = [
        "scenario",
        "launchers",
        "tok/s min",
        "tok/s median",
        "worst retention",
        "agent p99 (µs)",
        "÷ clean",
        "agents p50/p99 (µs)",
        "hogs ÷ EEVDF",
    ]
    .iter()
    .map(|c| c.to_string())
    .collect();
    md += &header_row("scheduler", &cols);
    let num = |v: Option<f64>| v.map(fmt_num).unwrap_or("–".into());
    for &s in &p.schedulers {
        for &c in &p.scenarios {
            let x = scale_row(r, s, c);
            let agents: Vec<String> = x
                .agents
                .iter()
                .map(|(a, b)| format!("{}/{}", fmt_num(*a), fmt_num(*b)))
                .collect();
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                s.name(),
                c.name(),
                x.launchers.map(|n| format!("{n:.0}")).unwrap_or("–".into()),
                num(x.tok_min),
                num(x.tok_median),
                fmt_ratio(x.worst_retention),
                num(x.agent_p99),
                fmt_ratio(x.agent_p99_vs_clean),
                if agents.is_empty() {
                    "–".into()
                } else {
                    agents.join(", ")
                },
                fmt_ratio(x.hogs_vs_eevdf),
            );
        }
    }
    md + "\n"
}

/// The express lane's counters during scx_express's cells (median per
/// cell), from `scx_express stats` before and after each workload: where
/// the class's wakeups went, and why any left the lane.
fn lane_table(r: &Results) -> String {
    let p = &r.plan;
    if !p.schedulers.contains(&Sched::Express)
        || !r.aggregates.iter().any(|a| a.metric == "lane_wakeups")
    {
        return String::new();
    }
    let mut md = "### The express lane during scx_express's cells\n\n\
                  Counters of the workload's class (`gpu` for decode, mixed and scale, `agent` \
                  for agent and agent-exec) over each cell, median of the repeats; the fair-path column \
                  is machine-wide. From `scx_express stats` before the cell's noise starts and 1.1 s \
                  after the workload ends, so they also count the noise's warm-up (for agent, \
                  agent-exec and scale, their go-file polls: a wakeup per 5 ms); \
                  `scx_express --help-stats` explains each.\n\n"
        .to_string();
    let cols: Vec<String> = LANE_COLUMNS.iter().map(|(_, h)| h.to_string()).collect();
    md += &header_row("workload, scenario", &cols);
    for &w in &p.workloads {
        for &c in &p.scenarios {
            let _ = write!(md, "| {} {} |", w.name(), c.name());
            for (m, _) in LANE_COLUMNS {
                let v = r.get(Sched::Express, c, w, m).map(|a| a.summary.median);
                let _ = write!(
                    md,
                    " {} |",
                    v.map(|v| format!("{v:.0}")).unwrap_or("–".into())
                );
            }
            md += "\n";
        }
    }
    md + "\n"
}

fn fmt_num(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.3e}", v)
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn fmt_ratio(r: Option<f64>) -> String {
    r.map(|r| format!("{r:.2}")).unwrap_or_else(|| "–".into())
}

/// One table cell: `median (min–max)` and the ratios.
fn cell_text(a: Option<&Aggregate>, scale: f64, show_base: bool, show_eevdf: bool) -> String {
    let Some(a) = a else {
        return "missing".into();
    };
    let s = &a.summary;
    let mut t = format!(
        "{} ({}–{})",
        fmt_num(s.median * scale),
        fmt_num(s.min * scale),
        fmt_num(s.max * scale)
    );
    let mut r = vec![];
    if show_base {
        r.push(format!("b {}", fmt_ratio(a.vs_baseline)));
    }
    if show_eevdf {
        r.push(format!("e {}", fmt_ratio(a.vs_eevdf)));
    }
    if !r.is_empty() {
        t += "<br>";
        t += &r.join(" · ");
    }
    t
}

fn header_row(first: &str, cols: &[String]) -> String {
    let mut s = format!("| {first} |");
    for c in cols {
        s += &format!(" {c} |");
    }
    s += "\n|---|";
    for _ in cols {
        s += "---|";
    }
    s + "\n"
}

fn headline_scenario(p: &Plan) -> Scenario {
    if p.scenarios.contains(&Scenario::Cpu4x) {
        Scenario::Cpu4x
    } else {
        p.scenarios
            .iter()
            .copied()
            .find(|s| *s != Scenario::Baseline)
            .unwrap_or(Scenario::Baseline)
    }
}

/// The VMs' vCPUs as their boots reported them, else the plan's: a
/// bundle's runner may boot them with another `--smp` than the plan's.
fn reported_smp(r: &Results) -> String {
    let mut seen: Vec<&str> = r
        .boots
        .iter()
        .filter_map(|b| b.info.get("smp").map(String::as_str))
        .collect();
    seen.sort_unstable();
    seen.dedup();
    if seen.is_empty() {
        r.plan.smp.to_string()
    } else {
        seen.join(", ")
    }
}

/// report.md. `plots` are the PNG file names (same directory).
pub fn markdown(r: &Results, plots: &[(String, String)]) -> String {
    let mut md = header(r);
    md += &summary(r);
    md += &plots_section(plots);
    md += &workload_tables(r);
    md += &scale_table(r);
    md += &noise_tables(r);
    md += &cpu_time_table(r);
    md += &lane_table(r);
    md += &boots_table(r);
    md += &classification(r);
    md += &method(&r.plan);
    md
}

/// The title, the TCG caveat and the run's facts: date, kernel, VMs, host,
/// command, source, plan, and the cells missing or failed by reason.
fn header(r: &Results) -> String {
    let p = &r.plan;
    let mut md = String::new();
    let scheds: Vec<String> = p.schedulers.iter().map(|s| s.name()).collect();
    let scens: Vec<String> = p.scenarios.iter().map(|s| s.name()).collect();
    let _ = writeln!(md, "# scx_express bench: {} preset\n", p.preset.name());
    let _ = writeln!(
        md,
        "> **Caveat:** the VMs run under QEMU TCG (software emulation). TCG timings \
         count only as ratios within one run: compare schedulers and scenarios of \
         this report with each other, never with absolute numbers from elsewhere \
         or from another run (they move by up to 30% between boots).\n"
    );
    let _ = writeln!(md, "- Date: {} (UTC)", r.date);
    let _ = writeln!(md, "- Guest kernel: {}", r.kernel);
    let _ = writeln!(
        md,
        "- VMs: {} vCPUs, {} memory, one boot per scheduler",
        reported_smp(r),
        p.mem
    );
    let _ = writeln!(
        md,
        "- Host: {}",
        if r.host.is_empty() {
            "unknown"
        } else {
            &r.host
        }
    );
    let _ = writeln!(md, "- Command: `{}`", p.command);
    if !p.source_version.is_empty() {
        let _ = writeln!(md, "- Source (git describe): {}", p.source_version);
    }
    let _ = writeln!(
        md,
        "- Plan: schedulers {}; scenarios {}; workloads {}; {} repeat(s) of {} s per cell \
         (noise starts {} s before the workload); express config `{}`",
        scheds.join(", "),
        scens.join(", "),
        p.workloads
            .iter()
            .map(|w| w.name())
            .collect::<Vec<_>>()
            .join(", "),
        p.repeats,
        p.duration_s,
        p.warm_s,
        p.express_config
    );
    md += &cells_line(r);
    md += &retried_line(r);
    md += &noise_margin_line(r);
    md + "\n"
}

/// Boots booted again for one boot's info: its `attempt` (the boot whose
/// cells count) minus one, or more where the log showed more dead boots.
fn boot_retries(info: &BTreeMap<String, String>) -> u32 {
    let n = |k: &str| info.get(k).and_then(|v| v.parse::<u32>().ok());
    let from_attempt = n("attempt").unwrap_or(1).saturating_sub(1);
    from_attempt.max(n("retried_boots").unwrap_or(0))
}

/// Boots booted again per scheduler, over all its logs.
pub fn retried_boots(r: &Results) -> Vec<(String, u32)> {
    r.boots
        .iter()
        .map(|b| (b.sched.clone(), boot_retries(&b.info)))
        .collect()
}

/// "- Retried boots: N": guests that died without a result (an early-boot
/// panic under TCG, a hang) and were booted again; their cells never count.
fn retried_line(r: &Results) -> String {
    let v = retried_boots(r);
    let total: u32 = v.iter().map(|(_, n)| n).sum();
    let who: Vec<String> = v
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(s, n)| format!("{s} {n}"))
        .collect();
    let mut md = format!("- Retried boots: {total}");
    if total > 0 {
        let _ = write!(
            md,
            " ({}): a guest that died without a result (e.g. an early-boot panic \
             under TCG) was booted again; only the boot with a result counts",
            who.join(", ")
        );
    }
    md + "\n"
}

/// The header's noise line: how long each noisy cell's noise outlasted its
/// workload's measurement (the guest's noise_margin_cs: planned end of the
/// noise less the workload's end). A cell whose noise ended first measured
/// partly on a quiet machine; they are named. Empty for runs without it.
fn noise_margin_line(r: &Results) -> String {
    let mut least: Option<f64> = None;
    let mut short = Vec::new();
    for c in &r.cells {
        let Some(m) = c
            .meta
            .get("noise_margin_cs")
            .and_then(|v| v.parse::<f64>().ok())
        else {
            continue;
        };
        least = Some(least.map_or(m, |l: f64| l.min(m)));
        if m < 0.0 {
            short.push(format!(
                "{}/{}/{}/r{} ({:.1} s)",
                c.sched.name(),
                c.scenario.name(),
                c.workload.name(),
                c.repeat,
                m / 100.0
            ));
        }
    }
    match least {
        None => String::new(),
        Some(_) if !short.is_empty() => format!(
            "- Noise ended before the measurement in {} cell(s), which measured partly \
             on a quiet machine: {}\n",
            short.len(),
            short.join(", ")
        ),
        Some(l) => format!(
            "- Noise outlasted every measurement (least margin {:.1} s)\n",
            l / 100.0
        ),
    }
}

/// The "Cells: N of M ok" line, then the missing or failed cells grouped
/// by reason.
fn cells_line(r: &Results) -> String {
    let mut md = String::new();
    let missing = r.missing_cells();
    let _ = writeln!(
        md,
        "- Cells: {} of {} ok",
        r.expected_cells() - missing.len(),
        r.expected_cells()
    );
    let mut why: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for m in &missing {
        let (cell, reason) = m.split_once(": ").unwrap_or((m, ""));
        why.entry(reason).or_default().push(cell);
    }
    for (reason, cells) in why {
        let _ = writeln!(
            md,
            "  - {} missing or failed ({reason}): {}",
            cells.len(),
            cells.join(", ")
        );
    }
    md
}

/// The headline: one row per scheduler in the headline scenario.
fn summary(r: &Results) -> String {
    let p = &r.plan;
    let mut md = String::new();
    let h = headline_scenario(p);
    let _ = writeln!(md, "## Summary ({} vs baseline)\n", h.name());
    let _ = writeln!(
        md,
        "Medians over repeats. Retention = {h} ÷ the same scheduler's baseline; \
         noise = the noise's throughput during the decode cells ÷ EEVDF's (cost to \
         others: below 1 means the scheduler took CPU from the noise).\n",
        h = h.name()
    );
    let cols = [
        "decode tok/s retention",
        "mixed tok/s retention",
        "agent tail p99 (µs)",
        "wakeup p99 (µs)",
        "noise ÷ EEVDF",
        "scheduler CPU %",
    ];
    md += &header_row(
        "scheduler",
        &cols.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
    );
    for &s in &p.schedulers {
        md += &summary_row(r, s, h);
    }
    md + "\n"
}

/// One scheduler's row of the summary, for headline scenario `h`.
fn summary_row(r: &Results, s: Sched, h: Scenario) -> String {
    let g = |w, m: &str| r.get(s, h, w, m);
    let noise_metric = match h {
        Scenario::Net => "net_gbit_s",
        Scenario::Disk => "disk_iops",
        _ => "cpu_bogo_ops_s",
    };
    let cpu = Summary::of(
        &r.cells
            .iter()
            .filter(|c| c.ok && c.sched == s)
            .filter_map(|c| c.measured.metrics.get("sched_cpu_pct").copied())
            .collect::<Vec<_>>(),
    );
    format!(
        "| {} | {} | {} | {} | {} | {} | {} |\n",
        s.name(),
        fmt_ratio(g(Workload::Decode, "tok_s").and_then(|a| a.vs_baseline)),
        fmt_ratio(g(Workload::Mixed, "tok_s").and_then(|a| a.vs_baseline)),
        g(Workload::Agent, "tail_p99_us")
            .map(|a| fmt_num(a.summary.median))
            .unwrap_or("–".into()),
        g(Workload::Wakeup, "wake_p99_us")
            .map(|a| fmt_num(a.summary.median))
            .unwrap_or("–".into()),
        fmt_ratio(g(Workload::Decode, noise_metric).and_then(|a| a.vs_eevdf)),
        cpu.map(|c| format!("{:.1}", c.median))
            .unwrap_or("–".into()),
    )
}

/// The plots, each under its title; nothing when there are none.
fn plots_section(plots: &[(String, String)]) -> String {
    let mut md = String::new();
    if !plots.is_empty() {
        md += "## Plots\n\n";
        for (file, title) in plots {
            let _ = writeln!(md, "**{title}**\n\n![{title}]({file})\n");
        }
    }
    md
}

/// "## Tables": one table per entry of TABLES the plan's workloads have.
fn workload_tables(r: &Results) -> String {
    let p = &r.plan;
    let mut md = "## Tables\n\n\
                  Each cell: median (min–max) over repeats; `b` = median ÷ the same \
                  scheduler's baseline median, `e` = median ÷ EEVDF's median in the same \
                  scenario. `missing` = no successful cell.\n\n"
        .to_string();
    for t in TABLES.iter().filter(|t| p.workloads.contains(&t.workload)) {
        md += &workload_table(r, t);
    }
    md
}

/// One table of TABLES: schedulers × scenarios.
fn workload_table(r: &Results, t: &TableDef) -> String {
    let p = &r.plan;
    let mut md = String::new();
    let scens: Vec<String> = p.scenarios.iter().map(|s| s.name()).collect();
    let unit = if t.unit.is_empty() {
        String::new()
    } else {
        format!(" ({})", t.unit)
    };
    let _ = writeln!(
        md,
        "### {}{unit}\n\n{} is better.\n",
        t.title,
        if t.higher_is_better {
            "Higher"
        } else {
            "Lower"
        }
    );
    md += &header_row("scheduler", &scens);
    let q = tail_quantile(t.metric);
    let mut thin = false;
    for &s in &p.schedulers {
        let _ = write!(md, "| {} |", s.name());
        for &c in &p.scenarios {
            let a = r.get(s, c, t.workload, t.metric);
            let mut text = cell_text(a, t.scale, c != Scenario::Baseline, s != Sched::Eevdf);
            if a.is_some() && q.is_some_and(|q| thin_tail(r, s, c, t.workload, q)) {
                text += " †";
                thin = true;
            }
            let _ = write!(md, " {text} |");
        }
        md += "\n";
    }
    if let (true, Some(q)) = (thin, q) {
        let _ = writeln!(
            md,
            "\n† At least one repeat of this cell had fewer than {:.0} steps (steps/s × \
             {} s), so its nearest-rank percentile is its slowest step: one outlier, not a \
             tail that ranks schedulers. Longer cells (`--duration`) give more steps.",
            steps_needed(q),
            p.duration_s
        );
    }
    md + "\n"
}

/// The quantile of a tail table's metric: what the thin-sample mark needs.
fn tail_quantile(metric: &str) -> Option<f64> {
    match metric {
        "tail_p99_us" => Some(0.99),
        "tail_p999_us" => Some(0.999),
        _ => None,
    }
}

/// The fewest steps for which a nearest-rank quantile q is not simply the
/// sample set's maximum: 1 / (1 - q), 100 for a p99, 1,000 for a p99.9.
fn steps_needed(q: f64) -> f64 {
    (1.0 / (1.0 - q)).round() // 1 / (1 - 0.99) is 100.00000000000009
}

/// Whether a repeat of the cell had too few steps for the tail quantile q.
/// The subprocess agent makes tens of steps a second, so its 3-second
/// cells fall below 100 (docs/benchmarks.md, "Outputs").
fn thin_tail(r: &Results, s: Sched, c: Scenario, w: Workload, q: f64) -> bool {
    r.get(s, c, w, "steps_s")
        .is_some_and(|a| a.summary.min * f64::from(r.plan.duration_s) < steps_needed(q))
}

/// Cost to others: the noise's own throughput during each workload, one
/// table per workload; nothing when the plan has no noisy scenario.
fn noise_tables(r: &Results) -> String {
    let p = &r.plan;
    let mut md = String::new();
    let noisy: Vec<(&str, &str, Scenario)> = NOISE
        .iter()
        .flat_map(|(m, l, sc)| sc.iter().map(move |s| (*m, *l, *s)))
        .filter(|(_, _, s)| p.scenarios.contains(s))
        .collect();
    if noisy.is_empty() {
        return md;
    }
    md += "### Cost to others: the noise's own throughput\n\n\
           Higher is better for the noise; `e` = ÷ EEVDF in the same scenario \
           and workload.\n\n";
    let cols: Vec<String> = noisy
        .iter()
        .map(|(_, l, s)| format!("{}: {l}", s.name()))
        .collect();
    for &w in &p.workloads {
        let _ = writeln!(md, "During **{}**:\n", w.name());
        md += &header_row("scheduler", &cols);
        for &s in &p.schedulers {
            let _ = write!(md, "| {} |", s.name());
            for (m, _, c) in &noisy {
                let _ = write!(
                    md,
                    " {} |",
                    cell_text(r.get(s, *c, w, m), 1.0, false, s != Sched::Eevdf)
                );
            }
            md += "\n";
        }
        md += "\n";
    }
    md
}

/// The scheduler's own CPU time per scenario, all workloads pooled.
fn cpu_time_table(r: &Results) -> String {
    let p = &r.plan;
    let scens: Vec<String> = p.scenarios.iter().map(|s| s.name()).collect();
    let mut md = "### The scheduler's own CPU time (% of one CPU, all workloads pooled)\n\n\
                  utime+stime of the scheduler process over each cell ÷ the cell's wall \
                  time; 0 for EEVDF and its variants.\n\n"
        .to_string();
    md += &header_row("scheduler", &scens);
    for &s in &p.schedulers {
        let _ = write!(md, "| {} |", s.name());
        for &c in &p.scenarios {
            let v: Vec<f64> = r
                .cells
                .iter()
                .filter(|x| x.ok && x.sched == s && x.scenario == c)
                .filter_map(|x| x.measured.metrics.get("sched_cpu_pct").copied())
                .collect();
            let _ = write!(
                md,
                " {} |",
                Summary::of(&v)
                    .map(|x| format!("{:.1} ({:.1}–{:.1})", x.median, x.min, x.max))
                    .unwrap_or("missing".into())
            );
        }
        md += "\n";
    }
    md + "\n"
}

/// "## Boots": one row per scheduler's VM boot, from its info and final
/// records.
fn boots_table(r: &Results) -> String {
    let mut md = "## Boots\n\n| scheduler | ops | attach | boots | cells failed | state at end | scheduler CPU (s) | bench wall (s) |\n|---|---|---|---|---|---|---|---|\n".to_string();
    for &s in &r.plan.schedulers {
        let b = r.boots.iter().find(|b| b.sched == s.name());
        let i = |k: &str| b.and_then(|b| b.info.get(k)).cloned().unwrap_or("?".into());
        let f = |k: &str| {
            b.and_then(|b| b.final_.get(k))
                .cloned()
                .unwrap_or("?".into())
        };
        let cs = |v: String| {
            v.parse::<f64>()
                .map(|x| format!("{:.1}", x / 100.0))
                .unwrap_or(v)
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} s | {} | {} | {} | {} | {} |",
            s.name(),
            i("ops"),
            cs(i("attach_cs")),
            i("attempt"),
            f("failed_cells"),
            f("state_at_end"),
            cs(f("sched_ticks")),
            cs(f("wall_cs")),
        );
    }
    md + "\n"
}

/// How often `scx_express ps` showed the launcher as `gpu` in the express
/// decode and mixed cells; nothing when there were none.
fn classification(r: &Results) -> String {
    let classified: Vec<&CellResult> = r
        .cells
        .iter()
        .filter(|c| {
            c.sched == Sched::Express
                && matches!(
                    c.workload,
                    Workload::Decode | Workload::Mixed | Workload::Scale
                )
        })
        .collect();
    if classified.is_empty() {
        return String::new();
    }
    let gpu = classified
        .iter()
        .filter(|c| c.measured.class.as_deref() == Some("gpu"))
        .count();
    format!(
        "Classification: `scx_express ps` (once more 1 s later if a launcher was not \
         `gpu` yet), 0.5 s into each express decode and mixed cell and in a scale cell \
         before its noise starts (every launcher, after the syncs it makes while it \
         waits for the go file), showed the launcher thread as `gpu` in {gpu} of {} \
         cells (CUDA uprobes on the stand-in libcuda.so.1 alone). The agent loop is \
         opt-in: the bench marks each loop thread and its tool-server process with \
         `scx_express mark` (`--tid`, `--pid`), the processes eevdf-nice's `nice` covers.\n\n",
        classified.len()
    )
}

/// The report's closing section: how a run is made.
fn method(p: &Plan) -> String {
    let reply = if p.agent_reply_us.is_multiple_of(1000) {
        format!("{} ms", p.agent_reply_us / 1000)
    } else {
        format!("{} µs", p.agent_reply_us)
    };
    METHOD
        .replace("{reply}", &reply)
        .replace("{burst}", &p.agent_burst_iters.to_string())
}

/// The Method section; `{reply}` and `{burst}` come from the plan.
const METHOD: &str = "## Method\n\n\
    One VM boot per scheduler runs every repeat × scenario × workload cell \
    (repeats outermost). In a cell the noise starts, the workload measures \
    for the planned seconds, and the noise stops by its own time limit. \
    Noise: cpu1x/cpu4x = `stress-ng --cpu N --cpu-method fft` with N = 1×/4× \
    vCPUs; net = iperf3 over loopback, one server and client pair per 2 \
    vCPUs (at least one), 10 parallel streams each; disk = fio randwrite \
    bs=4k iodepth=32 numjobs = 2 × vCPUs on an emulated NVMe scratch disk \
    (libaio, O_DIRECT); heavy = cpu4x + net + disk. Runs before `iperf-K.json` \
    existed used one pair and 4 jobs at every size. \
    eevdf-nice runs the workload under `taskset` (first quarter of the \
    vCPUs, at least one) and `nice -n -10`; eevdf-fifo under `chrt -f 10` \
    (cyclictest with `-p 10`); eevdf-probes with scx_express's probes \
    attached and no scheduler (`scx_express trace --probe-policy scheduler \
    --no-events`). Workloads: `decode` (100 launches + 1 sync per \
    token against the stand-in libcuda.so.1), `agent` ({reply} tool reply, \
    then a CPU burst of {burst} loop iterations; local tail = reply read − server send), `agent-exec` \
    (the same loop, its tool call a fork + exec of a small program that \
    reads a file and replies over a pipe; local tail = reply read − the \
    tool's send), `wakeup` \
    (cyclictest, one SCHED_OTHER thread, 1 ms interval), `mixed` (`decode \
    --helpers N`, N = vCPUs), `scale` (one decode per two vCPUs, at least \
    one, and two agents at once, each run and classified as its own workload \
    is). Raw numbers of every cell are in \
    `results.json`.\n";

/// Problems with a report directory (empty: complete and well formed).
pub fn check_dir(dir: &Path) -> Result<Vec<String>> {
    let mut problems = vec![];
    let path = dir.join("results.json");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let r: Results = match serde_json::from_str(&text) {
        Ok(r) => r,
        Err(e) => return Ok(vec![format!("results.json does not parse: {e}")]),
    };
    problems.extend(r.missing_cells());
    if r.cells.len() != r.expected_cells() {
        problems.push(format!(
            "results.json has {} cells, the plan {}",
            r.cells.len(),
            r.expected_cells()
        ));
    }
    problems.extend(check_tables(&r));
    problems.extend(check_noise(&r));
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap_or_default();
    problems.extend(check_markdown(&md, &r.plan));
    problems.extend(check_plots(dir, &md));
    Ok(problems)
}

/// Every table's metric for every scheduler × scenario: present, one value
/// per repeat, with the bases of its ratios.
fn check_tables(r: &Results) -> Vec<String> {
    let p = &r.plan;
    let mut problems = vec![];
    for t in TABLES.iter().filter(|t| p.workloads.contains(&t.workload)) {
        if t.metric == "helper_iters_s" && p.helpers == 0 {
            continue;
        }
        for &s in &p.schedulers {
            for &c in &p.scenarios {
                problems.extend(check_table_cell(r, t, s, c));
            }
        }
    }
    problems
}

/// One cell of a table (see `check_tables`).
fn check_table_cell(r: &Results, t: &TableDef, s: Sched, c: Scenario) -> Vec<String> {
    let p = &r.plan;
    let mut problems = vec![];
    let Some(a) = r.get(s, c, t.workload, t.metric) else {
        problems.push(format!(
            "no {} for {}/{}/{}",
            t.metric,
            s.name(),
            c.name(),
            t.workload.name()
        ));
        return problems;
    };
    if !a.summary.median.is_finite() || a.summary.values.len() != p.repeats as usize {
        problems.push(format!(
            "{} of {}/{}/{}: {:?}",
            t.metric,
            s.name(),
            c.name(),
            t.workload.name(),
            a.summary.values
        ));
    }
    // A ratio can be missing because its base is 0 (a count,
    // such as slow steps); only a missing base is a problem.
    if r.get(s, Scenario::Baseline, t.workload, t.metric).is_none()
        || (p.schedulers.contains(&Sched::Eevdf)
            && r.get(Sched::Eevdf, c, t.workload, t.metric).is_none())
    {
        problems.push(format!(
            "{} of {}/{}/{}: a ratio is missing",
            t.metric,
            s.name(),
            c.name(),
            t.workload.name()
        ));
    }
    problems
}

/// The noise's throughput in every cell of a noisy scenario.
fn check_noise(r: &Results) -> Vec<String> {
    let p = &r.plan;
    let mut problems = vec![];
    for (m, _, scens) in NOISE {
        for &c in scens.iter().filter(|c| p.scenarios.contains(c)) {
            for &s in &p.schedulers {
                for &w in &p.workloads {
                    if r.get(s, c, w, m).is_none() {
                        problems.push(format!("no {m} for {}/{}/{}", s.name(), c.name(), w.name()));
                    }
                }
            }
        }
    }
    problems
}

/// report.md: there, with no missing cells, a row per scheduler, and the
/// TCG caveat.
fn check_markdown(md: &str, p: &Plan) -> Vec<String> {
    let mut problems = vec![];
    if md.is_empty() {
        problems.push("report.md is missing or empty".into());
    }
    if md.contains("| missing") || md.contains(" missing |") {
        problems.push("report.md has missing table cells".into());
    }
    for s in &p.schedulers {
        let rows = md
            .lines()
            .filter(|l| l.starts_with(&format!("| {} |", s.name())))
            .count();
        if rows == 0 {
            problems.push(format!("report.md has no row for {}", s.name()));
        }
    }
    if !md.contains("TCG timings count only as ratios within one run") {
        problems.push("report.md lacks the TCG caveat".into());
    }
    problems
}

/// Each plot: a PNG of some size, shown in report.md.
fn check_plots(dir: &Path, md: &str) -> Vec<String> {
    let mut problems = vec![];
    for png in super::plot::FILES {
        let path = dir.join(png);
        match std::fs::read(&path) {
            Ok(b) if b.len() > 1000 && b.starts_with(b"\x89PNG\r\n\x1a\n") => {}
            Ok(b) => problems.push(format!("{png}: not a PNG or too small ({} bytes)", b.len())),
            Err(e) => problems.push(format!("{png}: {e}")),
        }
        if !md.contains(&format!("]({png})")) {
            problems.push(format!("report.md does not show {png}"));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::super::parse::tests::{cell_text as raw_cell, AGENT, CYC, DECODE, STRESS};
    use super::super::{test_args, BenchArgs, Preset};
    use super::*;

    fn smoke_plan() -> Plan {
        let a = BenchArgs {
            repeats: Some(3),
            ..test_args(Preset::Smoke)
        };
        Plan::from_args(
            &a,
            Path::new("configs/default.toml"),
            "scx_express_bench --preset smoke".into(),
        )
        .unwrap()
    }

    /// Raw cells for a plan; decode tok/s = base × factor(sched, scenario) + repeat.
    fn raw_cells(p: &Plan, skip: Option<(Sched, u32)>) -> Vec<RawCell> {
        let mut v = vec![];
        for &s in &p.schedulers {
            v.push(RawCell::info(
                &s.name(),
                "kernel=7.2.13\nsmp=2\nattach_cs=150\nops=x\nattempt=1\n",
            ));
            v.push(RawCell::final_(
                &s.name(),
                "failed_cells=0\nstate_at_end=enabled\nsched_ticks=300\nwall_cs=6000\n---\nlog\n",
            ));
            for &c in &p.scenarios {
                for &w in &p.workloads {
                    for r in 1..=p.repeats {
                        if skip == Some((s, r)) && w == Workload::Agent {
                            continue;
                        }
                        let tok = match (s, c) {
                            (_, Scenario::Baseline) => 400.0,
                            (Sched::Eevdf, _) => 100.0,
                            _ => 360.0,
                        } + r as f64;
                        let decode = DECODE.replace("412.5", &tok.to_string());
                        let mut files: Vec<(&str, &str)> = match w {
                            Workload::Decode | Workload::Mixed => vec![("workload.out", &decode)],
                            Workload::Agent | Workload::AgentExec => {
                                vec![("workload.out", AGENT)]
                            }
                            Workload::Wakeup => vec![("cyclictest.json", CYC)],
                            Workload::Scale => vec![],
                        };
                        if c != Scenario::Baseline {
                            files.push(("stress.yaml", STRESS));
                        }
                        let lane1 = format!("fair_wakeups 9\nclasses.agent.prev {r}");
                        if s == Sched::Express {
                            files.push(("lane0.txt", "fair_wakeups 0"));
                            files.push(("lane1.txt", &lane1));
                        }
                        let t = raw_cell(&s.name(), &c.name(), &w.name(), r, &files);
                        v.push(parse::split_cell(&t).unwrap());
                    }
                }
            }
        }
        v
    }

    #[test]
    fn summary_median_and_range() {
        let s = Summary::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        assert_eq!(Summary::of(&[4.0, 1.0, 2.0, 3.0]).unwrap().median, 2.5);
        assert!(Summary::of(&[f64::NAN]).is_none());
        assert!(Summary::of(&[]).is_none());
    }

    #[test]
    fn dates() {
        assert_eq!(civil_date(0), "1970-01-01");
        assert_eq!(civil_date(19_723), "2024-01-01");
        assert_eq!(civil_date(20_513), "2026-03-01");
    }

    #[test]
    fn aggregation_and_ratios() {
        let p = smoke_plan();
        let r = Results::build(&p, raw_cells(&p, None), "test host".into());
        assert_eq!(r.cells.len(), r.expected_cells());
        assert!(r.missing_cells().is_empty(), "{:?}", r.missing_cells());
        assert_eq!(r.kernel, "7.2.13");
        let e = r
            .get(Sched::Eevdf, Scenario::Cpu4x, Workload::Decode, "tok_s")
            .unwrap();
        assert_eq!(e.summary.values, vec![101.0, 102.0, 103.0]);
        assert_eq!(e.summary.median, 102.0);
        assert!((e.vs_baseline.unwrap() - 102.0 / 402.0).abs() < 1e-12);
        assert_eq!(e.vs_eevdf, Some(1.0));
        let x = r
            .get(Sched::Express, Scenario::Cpu4x, Workload::Decode, "tok_s")
            .unwrap();
        assert!((x.vs_eevdf.unwrap() - 362.0 / 102.0).abs() < 1e-12);
        assert!((x.vs_baseline.unwrap() - 362.0 / 402.0).abs() < 1e-12);
        // Noise: only where there was noise; no baseline ratio.
        let n = r
            .get(
                Sched::Express,
                Scenario::Cpu4x,
                Workload::Agent,
                "cpu_bogo_ops_s",
            )
            .unwrap();
        assert_eq!(n.vs_eevdf, Some(1.0));
        assert!(r
            .get(
                Sched::Express,
                Scenario::Baseline,
                Workload::Agent,
                "cpu_bogo_ops_s"
            )
            .is_none());

        let md = markdown(&r, &[("tokps-retention.png".into(), "t".into())]);
        assert!(md.contains("TCG timings count only as ratios within one run"));
        assert!(md.contains("| express | 0.90 |"), "{md}");
        assert!(md.contains("362 (361–363)<br>b 0.90 · e 3.55"), "{md}");
        assert!(!md.contains(" missing |"), "{md}");
        assert!(md.contains("![t](tokps-retention.png)"));
        // The express lane's counters: the agent class's prev placements
        // (1, 2, 3 over the repeats: median 2); gpu cells saw none.
        assert!(md.contains("### The express lane during"), "{md}");
        assert!(md.contains("| agent cpu4x | 2 | 2 | 0 |"), "{md}");
        assert!(md.contains("| decode cpu4x | 0 | 0 | 0 |"), "{md}");
        // The Method section names the agent's shape from the plan.
        assert!(md.contains("`agent` (2 ms tool reply, then a CPU burst of 125000 loop"));
        let mut other = r.clone();
        other.plan.agent_reply_us = 500;
        assert!(markdown(&other, &[]).contains("`agent` (500 µs tool reply"));
    }

    /// A scale plan (eevdf, express; baseline, cpu4x) with 3 repeats:
    /// launchers at `tok(sched, scenario)` and `tok/2`, agents' p99 900 µs
    /// clean and 1800 µs under cpu4x.
    fn scale_results() -> Results {
        let mut a = BenchArgs {
            repeats: Some(3),
            ..test_args(Preset::Smoke)
        };
        a.workloads = Some(vec![Workload::Scale]);
        let p = Plan::from_args(&a, Path::new("c.toml"), "x".into()).unwrap();
        let mut raw = vec![];
        for &s in &p.schedulers {
            let attempt = if s == Sched::Express { 3 } else { 1 };
            raw.push(RawCell::info(
                &s.name(),
                &format!("smp=8\nattempt={attempt}\n"),
            ));
            for &c in &p.scenarios {
                for rep in 1..=p.repeats {
                    let tok = match (s, c) {
                        (_, Scenario::Baseline) => 400.0,
                        (Sched::Eevdf, _) => 100.0,
                        _ => 360.0,
                    };
                    let p99 = if c == Scenario::Baseline {
                        900.0
                    } else {
                        1800.0
                    };
                    let mut files = parse::tests::scale_files(&[tok, tok / 2.0], &[p99, 500.0]);
                    if c != Scenario::Baseline {
                        let bogo = if s == Sched::Eevdf {
                            "2927.5"
                        } else {
                            "1463.75"
                        };
                        files.push(("stress.yaml".into(), STRESS.replace("2927.5", bogo)));
                    }
                    let f: Vec<(&str, &str)> = files
                        .iter()
                        .map(|(a, b)| (a.as_str(), b.as_str()))
                        .collect();
                    let t = raw_cell(&s.name(), &c.name(), "scale", rep, &f);
                    raw.push(parse::split_cell(&t).unwrap());
                }
            }
        }
        Results::build(&p, raw, String::new())
    }

    #[test]
    fn the_scale_table_compares_with_the_clean_cell_and_eevdf() {
        let r = scale_results();
        assert!(r.missing_cells().is_empty(), "{:?}", r.missing_cells());
        let x = scale_row(&r, Sched::Express, Scenario::Cpu4x);
        assert_eq!(x.launchers, Some(2.0));
        assert_eq!((x.tok_min, x.tok_median), (Some(180.0), Some(270.0)));
        // The slowest launcher ÷ the clean cell's median launcher (300).
        assert_eq!(x.worst_retention, Some(0.6));
        assert_eq!(
            (x.agent_p99, x.agent_p99_vs_clean),
            (Some(1800.0), Some(2.0))
        );
        assert_eq!(x.agents, vec![(60.0, 1800.0), (60.0, 500.0)]);
        assert_eq!(x.hogs_vs_eevdf, Some(0.5));
        assert_eq!(
            scale_row(&r, Sched::Eevdf, Scenario::Baseline).hogs_vs_eevdf,
            None
        );
        let md = markdown(&r, &[]);
        assert!(
            md.contains("### Scale: launchers and agents at once"),
            "{md}"
        );
        assert!(
            md.contains("| express | cpu4x | 2 | 180 | 270 | 0.60 | 1800 | 2.00 | 60.0/1800, 60.0/500 | 0.50 |"),
            "{md}"
        );
        assert!(md.contains("### Scale (launchers and agents at once): the slowest"));
        // The express boot was the third: two retried boots, said so.
        assert!(md.contains("- Retried boots: 2 (express 2)"), "{md}");
        assert_eq!(check_tables(&r), Vec::<String>::new());
    }

    #[test]
    fn the_header_gives_the_vcpus_the_boots_reported() {
        let p = smoke_plan();
        let header = |r: &Results| {
            markdown(r, &[])
                .lines()
                .find(|l| l.starts_with("- VMs:"))
                .unwrap()
                .to_string()
        };
        let r = Results::build(&p, raw_cells(&p, None), String::new());
        assert!(header(&r).starts_with("- VMs: 2 vCPUs"), "{}", header(&r));
        // A bundle's runner booted them with --smp 8: the plan still says 2.
        let raw = raw_cells(&p, None)
            .into_iter()
            .map(|mut c| {
                if c.kind == Kind::Info {
                    c.meta.insert("smp".into(), "8".into());
                }
                c
            })
            .collect();
        let r = Results::build(&p, raw, String::new());
        assert_eq!(p.smp, 2);
        assert!(header(&r).starts_with("- VMs: 8 vCPUs"), "{}", header(&r));
    }

    #[test]
    fn a_tail_from_too_few_steps_is_marked() {
        let p = smoke_plan();
        let steps = p.duration_s as f64 * 400.0; // AGENT: 400 steps a second
        assert!(steps * 0.01 >= 1.0 && steps * 0.001 < 1.0, "{steps}");
        // Express's cpu4x agent r2 makes 20 steps a second instead.
        let raw = raw_cells(&p, None)
            .into_iter()
            .map(|mut c| {
                let h = |k: &str| c.header.get(k).cloned().unwrap_or_default();
                let one = h("sched") == "express"
                    && h("scenario") == "cpu4x"
                    && h("workload") == "agent"
                    && h("repeat") == "2";
                if one {
                    let a = AGENT.replace("\"steps_per_s\":400", "\"steps_per_s\":20");
                    c.files.insert("workload.out".into(), a);
                }
                c
            })
            .collect();
        let r = Results::build(&p, raw, String::new());
        let table = |metric: &str| {
            let t = TABLES
                .iter()
                .find(|t| t.workload == Workload::Agent && t.metric == metric)
                .unwrap();
            workload_table(&r, t)
        };
        let p99 = table("tail_p99_us");
        let marked: Vec<&str> = p99.lines().filter(|l| l.contains(" †")).collect();
        assert_eq!(marked.len(), 1, "{p99}");
        assert!(marked[0].starts_with("| express |"), "{p99}");
        assert_eq!(marked[0].matches('†').count(), 1, "{p99}");
        assert!(p99.contains("fewer than 100 steps"), "{p99}");
        // The p99.9 of every cell is its slowest step: all marked.
        let p999 = table("tail_p999_us");
        let cells = p.schedulers.len() * p.scenarios.len();
        assert_eq!(p999.matches(" †").count(), cells, "{p999}");
        assert!(p999.contains("fewer than 1000 steps"), "{p999}");
        // Not a tail: no mark.
        assert!(!table("tail_p50_us").contains('†'));
    }

    #[test]
    fn a_noise_that_ends_before_the_measurement_is_named() {
        let p = smoke_plan();
        // Every cpu4x cell gets margin `rest`, express's agent r1 `first`.
        let with_margins = |first: &str, rest: &str| {
            let raw = raw_cells(&p, None)
                .into_iter()
                .map(|mut c| {
                    let h = |k: &str| c.header.get(k).cloned().unwrap_or_default();
                    if c.kind == Kind::Cell && h("scenario") == "cpu4x" {
                        let one = h("sched") == "express"
                            && h("workload") == "agent"
                            && h("repeat") == "1";
                        let m = if one { first } else { rest };
                        c.meta.insert("noise_margin_cs".into(), m.into());
                    }
                    c
                })
                .collect();
            markdown(&Results::build(&p, raw, String::new()), &[])
        };
        let md = with_margins("40", "250");
        assert!(
            md.contains("- Noise outlasted every measurement (least margin 0.4 s)"),
            "{md}"
        );
        let md = with_margins("-150", "300");
        assert!(
            md.contains(
                "- Noise ended before the measurement in 1 cell(s), which measured partly on a quiet machine: express/cpu4x/agent/r1 (-1.5 s)"
            ),
            "{md}"
        );
        // Older logs have no margin: no line.
        let md = markdown(&Results::build(&p, raw_cells(&p, None), String::new()), &[]);
        assert!(!md.contains("- Noise "), "{md}");
    }

    #[test]
    fn retries_of_every_log_of_a_scheduler_count() {
        // A run split by repeats: three logs per scheduler, one info each.
        // express's second log had a dead boot (runner: retried_boots=1),
        // its third none; eevdf's last boot was its second (attempt=2).
        let p = smoke_plan();
        let mut raw = raw_cells(&p, None);
        raw.push(RawCell::info(
            "express",
            "smp=2\nattempt=1\nretried_boots=1\n",
        ));
        raw.push(RawCell::info(
            "express",
            "smp=2\nattempt=1\nretried_boots=0\n",
        ));
        raw.push(RawCell::info("eevdf", "smp=2\nattempt=2\n"));
        let r = Results::build(&p, raw, String::new());
        let got: BTreeMap<String, u32> = retried_boots(&r).into_iter().collect();
        assert_eq!(got.get("express"), Some(&1));
        assert_eq!(got.get("eevdf"), Some(&1));
        let md = markdown(&r, &[]);
        assert!(
            md.contains("- Retried boots: 2 (eevdf 1, express 1)"),
            "{md}"
        );
    }

    #[test]
    fn cells_outside_the_plan_are_left_out() {
        let p = smoke_plan();
        let raw = raw_cells(&p, None);
        let mut only_express = p.clone();
        only_express.schedulers = vec![Sched::Express];
        let r = Results::build(&only_express, raw, String::new());
        assert_eq!(r.cells.len(), r.expected_cells());
        assert!(r.cells.iter().all(|c| c.sched == Sched::Express));
        assert_eq!(r.boots.len(), 1);
        // No EEVDF in the plan: no EEVDF ratios, own-baseline ratios stay.
        let a = r
            .get(Sched::Express, Scenario::Cpu4x, Workload::Decode, "tok_s")
            .unwrap();
        assert!(a.vs_eevdf.is_none() && a.vs_baseline.is_some());
    }

    #[test]
    fn missing_cells_are_reported() {
        let p = smoke_plan();
        let r = Results::build(&p, raw_cells(&p, Some((Sched::Express, 2))), String::new());
        let m = r.missing_cells();
        assert_eq!(m.len(), 2, "{m:?}");
        assert!(m[0].starts_with("express/baseline/agent/r2: missing"));
        // Two of three repeats still aggregate.
        let a = r
            .get(
                Sched::Express,
                Scenario::Cpu4x,
                Workload::Agent,
                "tail_p99_us",
            )
            .unwrap();
        assert_eq!(a.summary.values.len(), 2);
        assert!(markdown(&r, &[]).contains(
            "2 missing or failed (missing): express/baseline/agent/r2, express/cpu4x/agent/r2"
        ));
    }

    #[test]
    fn check_dir_flags_an_incomplete_report() {
        let dir = std::env::temp_dir().join(format!("bench-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = smoke_plan();
        let r = Results::build(&p, raw_cells(&p, Some((Sched::Eevdf, 1))), String::new());
        super::super::write_json(&dir.join("results.json"), &r).unwrap();
        std::fs::write(dir.join("report.md"), markdown(&r, &[])).unwrap();
        let problems = check_dir(&dir).unwrap();
        assert!(
            problems
                .iter()
                .any(|p| p.contains("eevdf/baseline/agent/r1: missing")),
            "{problems:?}"
        );
        assert!(
            problems.iter().any(|p| p.contains("tokps-retention.png")),
            "{problems:?}"
        );
        std::fs::write(dir.join("results.json"), "{").unwrap();
        assert!(check_dir(&dir).unwrap()[0].contains("does not parse"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
