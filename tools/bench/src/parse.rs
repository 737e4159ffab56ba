//! Turning one cell's raw output (workload JSON, cyclictest JSON,
//! stress-ng YAML, iperf3 and fio JSON, `scx_express ps`) into numbers.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What an exported file was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// One repeat × scenario × workload measurement.
    Cell,
    /// A boot's facts (kernel, vCPUs, attach time).
    Info,
    /// A boot's summary (scheduler CPU time, state at the end).
    Final,
}

/// A cell file split into its parts.
#[derive(Debug, Clone, PartialEq)]
pub struct RawCell {
    pub kind: Kind,
    /// `@@bench` words (sched, scenario, workload, repeat), or just sched.
    pub header: BTreeMap<String, String>,
    /// `@@meta` words, or the KEY=VALUE lines of an info/final file.
    pub meta: BTreeMap<String, String>,
    /// `@@file NAME` sections.
    pub files: BTreeMap<String, String>,
}

fn words(s: &str) -> BTreeMap<String, String> {
    s.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn kv_lines(s: &str) -> BTreeMap<String, String> {
    s.lines()
        .take_while(|l| !l.starts_with("---"))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

impl RawCell {
    fn boot_file(kind: Kind, sched: &str, text: &str) -> RawCell {
        let mut files = BTreeMap::new();
        files.insert("text".to_string(), text.to_string());
        RawCell {
            kind,
            header: [("sched".to_string(), sched.to_string())].into(),
            meta: kv_lines(text),
            files,
        }
    }
    pub fn info(sched: &str, text: &str) -> RawCell {
        RawCell::boot_file(Kind::Info, sched, text)
    }
    pub fn final_(sched: &str, text: &str) -> RawCell {
        RawCell::boot_file(Kind::Final, sched, text)
    }
}

/// Splits a cell file (format in guest.sh).
pub fn split_cell(text: &str) -> Result<RawCell> {
    let mut lines = text.lines();
    let head = lines
        .next()
        .and_then(|l| l.strip_prefix("@@bench "))
        .context("no @@bench line")?;
    let header = words(head);
    for k in ["sched", "scenario", "workload", "repeat"] {
        if !header.contains_key(k) {
            bail!("@@bench line lacks {k}");
        }
    }
    let mut cell = RawCell {
        kind: Kind::Cell,
        header,
        meta: BTreeMap::new(),
        files: BTreeMap::new(),
    };
    let mut cur: Option<(String, String)> = None;
    let mut ended = false;
    for l in lines {
        if let Some(m) = l.strip_prefix("@@meta ") {
            cell.meta.extend(words(m));
        } else if let Some(n) = l.strip_prefix("@@file ") {
            if let Some((k, v)) = cur.take() {
                cell.files.insert(k, v);
            }
            cur = Some((n.trim().to_string(), String::new()));
        } else if l == "@@end" {
            ended = true;
            break;
        } else if let Some((_, v)) = cur.as_mut() {
            v.push_str(l);
            v.push('\n');
        }
    }
    if let Some((k, v)) = cur.take() {
        cell.files.insert(k, v);
    }
    if !ended {
        bail!("cell file is truncated (no @@end)");
    }
    Ok(cell)
}

/// The last line of a text that parses as a JSON object.
fn last_json(text: &str) -> Option<Value> {
    text.lines()
        .rev()
        .map(str::trim)
        .filter(|l| l.starts_with('{'))
        .find_map(|l| serde_json::from_str::<Value>(l).ok())
}

fn num(v: &Value, key: &str) -> Result<f64> {
    v.get(key)
        .and_then(Value::as_f64)
        .with_context(|| format!("no number '{key}'"))
}

/// Numbers of a decode run: tok/s, per-token p50/p99 (µs), Sched/1K (the
/// launcher's context switches per 1,000 launches), GPU busy fraction, and
/// helper throughput.
pub fn decode(text: &str, m: &mut BTreeMap<String, f64>) -> Result<()> {
    let v = last_json(text).context("decode printed no JSON report")?;
    m.insert("tok_s".into(), num(&v, "tok_per_s")?);
    m.insert("tok_p50_us".into(), num(&v, "p50_us")?);
    m.insert("tok_p99_us".into(), num(&v, "p99_us")?);
    m.insert("gpu_busy".into(), num(&v, "gpu_busy_frac")?);
    let launches = num(&v, "launches")?;
    let cs = num(&v, "launcher_nvcsw")? + num(&v, "launcher_nivcsw")?;
    m.insert("launcher_nvcsw".into(), num(&v, "launcher_nvcsw")?);
    m.insert("launcher_nivcsw".into(), num(&v, "launcher_nivcsw")?);
    m.insert("launches".into(), launches);
    if launches > 0.0 {
        m.insert("sched_per_1k".into(), cs * 1000.0 / launches);
    }
    if num(&v, "helpers")? > 0.0 {
        m.insert("helper_iters_s".into(), num(&v, "helper_iters_per_s")?);
    }
    // How late the sleeping syncs woke past the fake GPU's end: the timer's
    // delivery plus the wait to run (fakecuda.c). Absent in logs from
    // before the stand-in counted it.
    if num(&v, "sync_sleeps").is_ok_and(|n| n > 0.0) {
        m.insert("sync_late_mean_us".into(), num(&v, "sync_late_mean_us")?);
        m.insert("sync_late_over_1ms".into(), num(&v, "sync_late_over_1ms")?);
    }
    Ok(())
}

/// Numbers of an agent run, and its local-tail quantiles `[(q, µs)]`.
pub fn agent(text: &str, m: &mut BTreeMap<String, f64>) -> Result<Vec<(f64, f64)>> {
    let v = last_json(text).context("agent printed no JSON report")?;
    for (k, j) in [
        ("steps_s", "steps_per_s"),
        ("tail_p50_us", "tail_p50_us"),
        ("tail_p99_us", "tail_p99_us"),
        ("tail_p999_us", "tail_p999_us"),
        ("tail_max_us", "tail_max_us"),
        ("agent_nvcsw", "agent_nvcsw"),
        ("agent_nivcsw", "agent_nivcsw"),
    ] {
        m.insert(k.into(), num(&v, j)?);
    }
    // Newer stand-ins only.
    for k in [
        "burst_cpu_p50_us",
        "server_write_p99_us",
        "tail_over_1ms",
        "tail_over_1ms_server",
        "tail_over_1ms_server_off_cpu",
        "tail_over_1ms_server_blocked",
        "tail_over_1ms_server_preempted",
        "tool_spawn_p50_us",
        "tool_spawn_p99_us",
    ] {
        if let Some(x) = v.get(k).and_then(Value::as_f64) {
            m.insert(k.into(), x);
        }
    }
    let cdf = v
        .get("tail_cdf")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|p| Some((p.get(0)?.as_f64()?, p.get(1)?.as_f64()?)))
                .collect()
        })
        .unwrap_or_default();
    Ok(cdf)
}

/// Median of some numbers (NaN-free); None when there are none.
pub fn median(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// The `NAME-I.EXT` files of a cell (`ext` with its dot), by I (1, 2, ...).
fn numbered<'a>(files: &'a BTreeMap<String, String>, name: &str, ext: &str) -> Vec<(u32, &'a str)> {
    let mut v: Vec<(u32, &str)> = files
        .iter()
        .filter_map(|(k, t)| {
            let i = k.strip_prefix(name)?.strip_prefix('-')?.strip_suffix(ext)?;
            Some((i.parse().ok()?, t.as_str()))
        })
        .collect();
    v.sort_by_key(|(i, _)| *i);
    v
}

/// Numbers of a scale cell (several launchers and agents at once, see
/// guest.sh's run_scale): each launcher's tok/s (`launcher_I_tok_s`) with
/// their minimum and median, each agent's local tail p50/p99
/// (`agent_J_tail_p50_us`, ...) with the worst agent's. `scale.txt` says
/// how many of each the guest started; fewer reports is an error.
pub fn scale(files: &BTreeMap<String, String>, m: &mut BTreeMap<String, f64>) -> Result<()> {
    let want = kv_lines(files.get("scale.txt").map(String::as_str).unwrap_or(""));
    let want = |k: &str| want.get(k).and_then(|v| v.parse::<usize>().ok());
    let (launchers, agents) = (
        numbered(files, "launcher", ".out"),
        numbered(files, "agent", ".out"),
    );
    let (Some(nl), Some(na)) = (want("launchers"), want("agents")) else {
        bail!("scale.txt does not say how many launchers and agents ran");
    };
    if launchers.len() != nl || agents.len() != na || nl == 0 || na == 0 {
        bail!(
            "scale: {} of {nl} launcher and {} of {na} agent reports",
            launchers.len(),
            agents.len()
        );
    }
    let mut tok = vec![];
    for (i, text) in launchers {
        let mut one = BTreeMap::new();
        decode(text, &mut one).with_context(|| format!("launcher {i}"))?;
        m.insert(format!("launcher_{i}_tok_s"), one["tok_s"]);
        tok.push(one["tok_s"]);
    }
    let (mut p50, mut p99) = (vec![], vec![]);
    for (j, text) in agents {
        let mut one = BTreeMap::new();
        agent(text, &mut one).with_context(|| format!("agent {j}"))?;
        for k in ["tail_p50_us", "tail_p99_us", "steps_s"] {
            m.insert(format!("agent_{j}_{k}"), one[k]);
        }
        p50.push(one["tail_p50_us"]);
        p99.push(one["tail_p99_us"]);
    }
    let max = |v: &[f64]| v.iter().copied().fold(f64::MIN, f64::max);
    m.insert("launchers".into(), tok.len() as f64);
    m.insert(
        "launchers_tok_s_min".into(),
        tok.iter().copied().fold(f64::MAX, f64::min),
    );
    m.insert("launchers_tok_s_median".into(), median(&tok).unwrap_or(0.0));
    m.insert("agents_tail_p50_max_us".into(), max(&p50));
    m.insert("agents_tail_p99_max_us".into(), max(&p99));
    Ok(())
}

/// cyclictest --json with -h: p50/p99/max wakeup latency (µs) from the
/// histogram; samples past the histogram count as the maximum.
pub fn cyclictest(text: &str, m: &mut BTreeMap<String, f64>) -> Result<()> {
    let v: Value = serde_json::from_str(text.trim()).context("cyclictest JSON")?;
    let t = v
        .get("thread")
        .and_then(|t| t.get("0"))
        .context("cyclictest JSON has no thread 0")?;
    let cycles = num(t, "cycles")?;
    let max = num(t, "max")?;
    if cycles <= 0.0 {
        bail!("cyclictest measured no cycles");
    }
    let mut hist: Vec<(f64, f64)> = t
        .get("histogram")
        .and_then(Value::as_object)
        .map(|h| {
            h.iter()
                .filter_map(|(k, c)| Some((k.parse::<f64>().ok()?, c.as_f64()?)))
                .collect()
        })
        .unwrap_or_default();
    hist.sort_by(|a, b| a.0.total_cmp(&b.0));
    let pct = |p: f64| {
        let want = (p * cycles).ceil().max(1.0);
        let mut acc = 0.0;
        for &(us, c) in &hist {
            acc += c;
            if acc >= want {
                return us;
            }
        }
        max
    };
    m.insert("wake_p50_us".into(), pct(0.50));
    m.insert("wake_p99_us".into(), pct(0.99));
    m.insert("wake_max_us".into(), max);
    m.insert("wake_avg_us".into(), num(t, "avg")?);
    Ok(())
}

/// stress-ng --yaml: bogo-ops per second (real time), all stressors.
pub fn stress_ng(text: &str) -> Result<f64> {
    let mut total = None;
    for l in text.lines() {
        if let Some(v) = l.trim().strip_prefix("bogo-ops-per-second-real-time:") {
            *total.get_or_insert(0.0) += v.trim().parse::<f64>().context("stress-ng bogo-ops/s")?;
        }
    }
    total.context("stress-ng YAML has no bogo-ops-per-second-real-time")
}

/// iperf3 -J: received Gbit/s of the whole test.
pub fn iperf3(text: &str) -> Result<f64> {
    let v: Value = serde_json::from_str(text.trim()).context("iperf3 JSON")?;
    if let Some(e) = v.get("error").and_then(Value::as_str) {
        bail!("iperf3: {e}");
    }
    let bps = v
        .pointer("/end/sum_received/bits_per_second")
        .and_then(Value::as_f64)
        .context("iperf3 JSON has no end.sum_received")?;
    Ok(bps / 1e9)
}

/// The net noise's throughput: the sum of its iperf3 pairs, one
/// `iperf-K.json` each (the guest runs one pair per two vCPUs), or one
/// `iperf.json` in logs from before the pairs.
pub fn iperf3_pairs(files: &BTreeMap<String, String>) -> Result<f64> {
    let mut pairs: Vec<(String, &str)> = numbered(files, "iperf", ".json")
        .into_iter()
        .map(|(k, t)| (format!("iperf-{k}.json"), t))
        .collect();
    if let Some(t) = files.get("iperf.json") {
        pairs.push(("iperf.json".into(), t));
    }
    if pairs.is_empty() {
        bail!("no iperf3 output (iperf-1.json)");
    }
    pairs
        .iter()
        .map(|(n, t)| iperf3(t).with_context(|| n.clone()))
        .sum()
}

/// fio --output-format=json with group reporting: write IOPS.
pub fn fio(text: &str) -> Result<f64> {
    // fio may print notes before the JSON.
    let start = text.find('{').context("fio printed no JSON")?;
    let v: Value = serde_json::from_str(&text[start..]).context("fio JSON")?;
    let jobs = v
        .get("jobs")
        .and_then(Value::as_array)
        .context("fio JSON has no jobs")?;
    let iops: f64 = jobs
        .iter()
        .filter_map(|j| j.pointer("/write/iops").and_then(Value::as_f64))
        .sum();
    Ok(iops)
}

/// `scx_express ps` output (one or more listings) for thread `tid`: its
/// class (column 4); `gpu`/`agent` wins over an earlier `normal`.
pub fn ps_class(ps: &str, tid: &str) -> Option<String> {
    let classes: Vec<&str> = ps
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.first() == Some(&tid)).then(|| f.get(3).copied())?
        })
        .collect();
    classes
        .iter()
        .find(|c| **c != "normal")
        .or(classes.first())
        .map(|c| c.to_string())
}

/// Counters of the express lane reported per cell: `(stats key, metric)`.
/// `{c}` is the workload's class; the fair-path ones are machine-wide.
pub const LANE_COUNTERS: &[(&str, &str)] = &[
    ("classes.{c}.prev", "lane_prev"),
    ("classes.{c}.llc", "lane_llc"),
    ("classes.{c}.any", "lane_any"),
    ("classes.{c}.preempt", "lane_preempt"),
    ("classes.{c}.preempt_waker", "lane_preempt_waker"),
    ("classes.{c}.not_quiet", "lane_not_quiet"),
    ("classes.{c}.requeue", "lane_requeue"),
    ("classes.{c}.no_tokens", "lane_no_tokens"),
    ("classes.{c}.class_cap", "lane_class_cap"),
    ("classes.{c}.fallback", "lane_fallback"),
    ("classes.{c}.slice_fallback", "lane_slice_fallback"),
    ("classes.{c}.behind", "lane_behind"),
    ("classes.{c}.irq_hot_skips", "lane_irq_hot_skips"),
    ("classes.{c}.deep_idle_skips", "lane_deep_idle_skips"),
    ("classes.{c}.wait_us", "lane_wait_us"),
    ("classes.{c}.waits_over_1ms", "lane_waits_over_1ms"),
    ("classes.{c}.slow_irq", "lane_slow_irq"),
    ("classes.{c}.slow_behind", "lane_slow_behind"),
    ("classes.{c}.slow_idle", "lane_slow_idle"),
    ("classes.{c}.slow_idle_skips", "lane_slow_idle_skips"),
    ("classes.{c}.hold_slow_idle", "lane_hold_slow_idle"),
    ("classes.{c}.lost_cpu", "lane_lost_cpu"),
    ("classes.{c}.cut_short", "lane_cut_short"),
    ("classes.{c}.run_us", "lane_run_us"),
    ("classes.{c}.holds", "lane_holds"),
    ("classes.{c}.hold_back", "lane_hold_back"),
    ("classes.{c}.held_us", "lane_held_us"),
    ("classes.{c}.hold_no_quota", "lane_hold_no_quota"),
    ("classes.{c}.hold_irregular", "lane_hold_irregular"),
    ("classes.{c}.hold_spare", "lane_hold_spare"),
    ("classes.{c}.hold_whole", "lane_hold_whole"),
    ("classes.{c}.hold_taken", "lane_hold_taken"),
    ("classes.{c}.hold_early", "lane_hold_early"),
    ("fair_wakeups", "fair_wakeups"),
    ("fair_waits_over_1ms", "fair_waits_over_1ms"),
    ("fair_preempted", "fair_preempted"),
    ("fair_kept_local", "fair_kept_local"),
    ("rescued", "fair_rescued"),
    ("launch_windows", "launch_windows"),
];

/// The express lane's counters over a cell: the difference of two
/// `scx_express stats --flat` snapshots, for `class`'s counters and the
/// fair path's. A counter missing from both (a class never seen) is 0.
pub fn lane(before: &str, after: &str, class: &str, m: &mut BTreeMap<String, f64>) -> Result<()> {
    let read = |text: &str, which: &str| -> Result<BTreeMap<String, f64>> {
        let v: BTreeMap<String, f64> = text
            .lines()
            .filter_map(|l| {
                let (k, v) = l.split_once(' ')?;
                Some((k.to_string(), v.trim().parse().ok()?))
            })
            .collect();
        if !v.contains_key("fair_wakeups") {
            bail!(
                "{which}: no express-lane counters (`scx_express stats --flat` said: {})",
                text.lines().next().unwrap_or("nothing")
            );
        }
        Ok(v)
    };
    let (b, a) = (read(before, "lane0.txt")?, read(after, "lane1.txt")?);
    for (key, name) in LANE_COUNTERS {
        let key = key.replace("{c}", class);
        let d = a.get(&key).unwrap_or(&0.0) - b.get(&key).unwrap_or(&0.0);
        m.insert(name.to_string(), d.max(0.0));
    }
    let placed: f64 = ["lane_prev", "lane_llc", "lane_any", "lane_preempt"]
        .iter()
        .map(|k| m[*k])
        .sum();
    m.insert("lane_wakeups".into(), placed);
    Ok(())
}

/// Everything measured in one cell.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    pub metrics: BTreeMap<String, f64>,
    /// Agent local-tail quantiles, `[q, µs]`.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub tail_cdf: Vec<(f64, f64)>,
    /// Class `scx_express ps` gave the launcher/agent thread (express only).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub class: Option<String>,
    /// Problems; a cell with any is not ok.
    pub errors: Vec<String>,
}

/// Measures a cell: the workload's numbers, the noise's throughput, the
/// scheduler's CPU time.
pub fn measure(cell: &RawCell) -> Measured {
    let mut r = Measured::default();
    let f = |n: &str| cell.files.get(n).map(String::as_str).unwrap_or("");
    let wl = cell
        .header
        .get("workload")
        .map(String::as_str)
        .unwrap_or("");
    let scen = cell
        .header
        .get("scenario")
        .map(String::as_str)
        .unwrap_or("");

    r.errors.extend(exit_error(cell));
    let res = match wl {
        "decode" | "mixed" => decode(f("workload.out"), &mut r.metrics),
        "agent" | "agent-exec" => agent(f("workload.out"), &mut r.metrics).map(|c| r.tail_cdf = c),
        "wakeup" => cyclictest(f("cyclictest.json"), &mut r.metrics),
        "scale" => scale(&cell.files, &mut r.metrics),
        _ => Err(anyhow::anyhow!("unknown workload '{wl}'")),
    };
    if let Err(e) = res {
        r_err(&mut r.errors, e);
    }
    let mut noise = |name: &str, v: Result<f64>| match v {
        Ok(v) => {
            r.metrics.insert(name.into(), v);
        }
        Err(e) => r_err(&mut r.errors, e),
    };
    if matches!(scen, "cpu1x" | "cpu4x" | "heavy") {
        noise(
            "cpu_bogo_ops_s",
            stress_ng(f("stress.yaml")).context("stress.yaml"),
        );
    }
    if matches!(scen, "net" | "heavy") {
        noise("net_gbit_s", iperf3_pairs(&cell.files));
    }
    if matches!(scen, "disk" | "heavy") {
        noise("disk_iops", fio(f("fio.json")).context("fio.json"));
    }
    sched_cpu(cell, &mut r.metrics);
    let sched = cell.header.get("sched").map(String::as_str).unwrap_or("");
    let state = cell.meta.get("state").map(String::as_str).unwrap_or("?");
    if !sched.starts_with("eevdf") && state != "enabled" {
        r.errors.push(format!(
            "the scheduler was not attached at the end of the cell (state {state})"
        ));
    }
    // Diagnostics only: without them the cell's measurement still stands.
    if sched == "express" && cell.files.contains_key("lane1.txt") {
        let class = if wl.starts_with("agent") {
            "agent"
        } else {
            "gpu"
        };
        if let Err(e) = lane(f("lane0.txt"), f("lane1.txt"), class, &mut r.metrics) {
            eprintln!("bench: warning: {sched} {scen} {wl}: express-lane counters left out: {e:#}");
        }
    }
    if let Some(tid) = cell.files.get("tid") {
        r.class = Some(ps_class(f("ps.txt"), tid.trim()).unwrap_or_else(|| "none".into()));
    }
    if wl == "scale" && sched == "express" {
        scale_classes(cell, &mut r);
    }
    r
}

/// A scale cell's classification under express: how many launchers
/// `scx_express ps` showed as `gpu` and agents as `agent`
/// (`launchers_gpu`, `agents_marked`); the cell's class is `gpu` when
/// every launcher was, else the first other class seen.
fn scale_classes(cell: &RawCell, r: &mut Measured) {
    let ps = cell.files.get("ps.txt").map(String::as_str).unwrap_or("");
    let class_of = |prefix: &str| -> Vec<String> {
        cell.files
            .iter()
            .filter(|(k, _)| k.starts_with(prefix) && k.ends_with(".tid"))
            .map(|(_, tid)| ps_class(ps, tid.trim()).unwrap_or_else(|| "none".into()))
            .collect()
    };
    let (l, a) = (class_of("launcher-"), class_of("agent-"));
    let count = |v: &[String], c: &str| v.iter().filter(|x| *x == c).count() as f64;
    r.metrics.insert("launchers_gpu".into(), count(&l, "gpu"));
    r.metrics.insert("agents_marked".into(), count(&a, "agent"));
    let want = r.metrics.get("launchers").copied().unwrap_or(0.0);
    r.class = Some(if l.len() as f64 == want && count(&l, "gpu") == want {
        "gpu".into()
    } else {
        l.into_iter()
            .find(|c| c != "gpu")
            .unwrap_or_else(|| "none".into())
    });
}

/// The workload's exit, if it failed: killed at its time limit, or its
/// rc and the last line of its stderr.
fn exit_error(cell: &RawCell) -> Option<String> {
    let f = |n: &str| cell.files.get(n).map(String::as_str).unwrap_or("");
    let rc = cell.meta.get("rc").map(String::as_str);
    if rc == Some("137") {
        Some(format!(
            "the workload did not finish within {} s and was killed",
            cell.meta.get("limit_s").map(String::as_str).unwrap_or("?")
        ))
    } else if rc != Some("0") {
        Some(format!(
            "workload exited rc={}: {}",
            cell.meta.get("rc").map(String::as_str).unwrap_or("?"),
            f("workload.err").lines().last().unwrap_or("").trim()
        ))
    } else {
        None
    }
}

/// The scheduler's CPU time over the cell (sched_cpu_ms) and its share of
/// the cell's wall time (sched_cpu_pct), from the guest's bookkeeping.
fn sched_cpu(cell: &RawCell, m: &mut BTreeMap<String, f64>) {
    let ticks = cell
        .meta
        .get("sched_ticks")
        .and_then(|v| v.parse::<f64>().ok());
    let wall = cell.meta.get("wall_cs").and_then(|v| v.parse::<f64>().ok());
    if let (Some(t), Some(w)) = (ticks, wall) {
        // Clock ticks are 10 ms, wall time is in centiseconds.
        m.insert("sched_cpu_ms".into(), t * 10.0);
        if w > 0.0 {
            m.insert("sched_cpu_pct".into(), 100.0 * t / w);
        }
    }
}

fn r_err(errors: &mut Vec<String>, e: anyhow::Error) {
    errors.push(format!("{e:#}"));
}

#[cfg(test)]
pub mod tests {
    use super::*;

    pub const DECODE: &str = "launcher_tid=77\n{\"workload\":\"decode\",\"tok_per_s\":412.5,\"p50_us\":2100.0,\"p99_us\":3900.5,\"launches\":20000,\"launcher_nvcsw\":300,\"launcher_nivcsw\":100,\"gpu_busy_frac\":0.9,\"helpers\":2,\"helper_iters_per_s\":5e8,\"sync_sleeps\":200,\"sync_late_mean_us\":850.5,\"sync_late_over_1ms\":12}\n";
    pub const AGENT: &str = "agent_tid=80\n{\"steps_per_s\":400,\"tail_p50_us\":60,\"tail_p99_us\":900,\"tail_p999_us\":4000,\"tail_max_us\":5000,\"agent_nvcsw\":1,\"agent_nivcsw\":2,\"burst_cpu_p50_us\":210.5,\"tail_over_1ms\":7,\"tail_over_1ms_server\":2,\"tail_over_1ms_server_off_cpu\":1,\"tail_cdf\":[[0.5,60.0],[0.99,900.0],[1,5000.0]]}\n";
    pub const CYC: &str = r#"{"thread":{"0":{"histogram":{"10":50,"20":45,"300":4},"cycles":100,"min":10,"max":9000,"avg":30.5}}}"#;
    pub const STRESS: &str = "metrics:\n    - stressor: cpu\n      bogo-ops: 5855\n      bogo-ops-per-second-real-time: 2927.5\n";
    pub const IPERF: &str = r#"{"start":{},"end":{"sum_sent":{"bits_per_second":2e10},"sum_received":{"bits_per_second":1.8e10}}}"#;
    pub const FIO: &str = "note: both iodepth >= 1 and synchronous I/O engine\n{\"jobs\":[{\"write\":{\"iops\":1234.5}}]}";

    #[test]
    fn decode_numbers() {
        let mut m = BTreeMap::new();
        decode(DECODE, &mut m).unwrap();
        assert_eq!(m["tok_s"], 412.5);
        assert_eq!(m["sched_per_1k"], 20.0);
        assert_eq!(m["helper_iters_s"], 5e8);
        assert_eq!(m["sync_late_mean_us"], 850.5);
        assert_eq!(m["sync_late_over_1ms"], 12.0);
        // A log from before the stand-in counted its syncs' lateness.
        let mut old = BTreeMap::new();
        decode(&DECODE.replace(",\"sync_sleeps\":200", ""), &mut old).unwrap();
        assert!(!old.contains_key("sync_late_mean_us"));
        assert!(decode("launcher_tid=1\n", &mut m).is_err());
    }

    #[test]
    fn agent_numbers_and_cdf() {
        let mut m = BTreeMap::new();
        let cdf = agent(AGENT, &mut m).unwrap();
        assert_eq!(m["tail_p99_us"], 900.0);
        assert_eq!(m["burst_cpu_p50_us"], 210.5);
        assert_eq!(m["tail_over_1ms"], 7.0);
        assert_eq!(m["tail_over_1ms_server"], 2.0);
        assert!(!m.contains_key("server_write_p99_us"));
        assert_eq!(cdf, vec![(0.5, 60.0), (0.99, 900.0), (1.0, 5000.0)]);
    }

    #[test]
    fn agent_exec_cells_are_agent_cells_with_spawn_times() {
        let out = AGENT.replace("\"tail_cdf\"", "\"tool\":\"exec\",\"tool_spawn_p50_us\":2900.5,\"tool_spawn_p99_us\":9000,\"tail_cdf\"");
        let lane1 = "fair_wakeups 5\nclasses.agent.prev 7\nclasses.gpu.prev 100\nlaunch_windows 3";
        let t = cell_text(
            "express",
            "baseline",
            "agent-exec",
            1,
            &[
                ("workload.out", &out),
                ("lane0.txt", "fair_wakeups 1\nlaunch_windows 2"),
                ("lane1.txt", lane1),
            ],
        );
        let m = measure(&split_cell(&t).unwrap());
        assert!(m.errors.is_empty(), "{:?}", m.errors);
        assert_eq!(m.metrics["tail_p99_us"], 900.0);
        // A launch window opened during the cell (machine-wide counter).
        assert_eq!(m.metrics["launch_windows"], 1.0);
        assert_eq!(m.metrics["tool_spawn_p50_us"], 2900.5);
        assert_eq!(m.tail_cdf.len(), 3);
        // Its lane counters are the agent class's.
        assert_eq!(m.metrics["lane_prev"], 7.0);
    }

    #[test]
    fn cyclictest_percentiles_count_overflows_as_max() {
        let mut m = BTreeMap::new();
        cyclictest(CYC, &mut m).unwrap();
        assert_eq!(m["wake_p50_us"], 10.0);
        assert_eq!(m["wake_p99_us"], 300.0);
        assert_eq!(m["wake_max_us"], 9000.0);
        // 99 of 100 samples in the histogram: p99.9 lands on the overflow.
        let two = CYC.replace("\"300\":4", "\"300\":3");
        cyclictest(&two, &mut m).unwrap();
        assert_eq!(m["wake_p99_us"], 9000.0);
    }

    #[test]
    fn noise_numbers() {
        assert_eq!(stress_ng(STRESS).unwrap(), 2927.5);
        assert!(stress_ng("metrics:\n").is_err());
        assert_eq!(iperf3(IPERF).unwrap(), 18.0);
        assert!(iperf3(r#"{"error":"unable to connect"}"#).is_err());
        assert_eq!(fio(FIO).unwrap(), 1234.5);
    }

    #[test]
    fn net_noise_adds_up_its_pairs() {
        let files = |names: &[(&str, &str)]| -> BTreeMap<String, String> {
            names
                .iter()
                .map(|(n, t)| (n.to_string(), t.to_string()))
                .collect()
        };
        let slow = IPERF.replace("1.8e10", "2e9");
        let four = files(&[
            ("iperf-1.json", IPERF),
            ("iperf-2.json", &slow),
            ("iperf-3.json", IPERF),
            ("iperf-10.json", IPERF),
            ("iperf-x.json", "not a pair"),
            ("iperf-server.log", "not a pair"),
        ]);
        assert_eq!(iperf3_pairs(&four).unwrap(), 56.0);
        // A log from before the pairs.
        assert_eq!(
            iperf3_pairs(&files(&[("iperf.json", IPERF)])).unwrap(),
            18.0
        );
        // One pair that failed fails the noise, and says which.
        let bad = files(&[
            ("iperf-1.json", IPERF),
            ("iperf-2.json", "{\"error\":\"busy\"}"),
        ]);
        let e = format!("{:#}", iperf3_pairs(&bad).unwrap_err());
        assert!(e.contains("iperf-2.json") && e.contains("busy"), "{e}");
        assert!(iperf3_pairs(&files(&[("workload.out", "")])).is_err());
    }

    #[test]
    fn lane_counters_are_cell_differences() {
        let before = "fair_wakeups 10\nrescued 1\nclasses.gpu.prev 5\nclasses.gpu.no_tokens 2";
        let after = "fair_wakeups 30\nrescued 1\nclasses.gpu.prev 9\nclasses.gpu.preempt 3\n\
                     classes.gpu.no_tokens 2\nclasses.agent.prev 50";
        let mut m = BTreeMap::new();
        lane(before, after, "gpu", &mut m).unwrap();
        assert_eq!(m["lane_prev"], 4.0);
        assert_eq!(m["lane_preempt"], 3.0);
        assert_eq!(m["lane_wakeups"], 7.0);
        assert_eq!(m["lane_no_tokens"], 0.0);
        assert_eq!(m["fair_wakeups"], 20.0);
        // Another class's counters are not this cell's.
        lane(before, after, "agent", &mut m).unwrap();
        assert_eq!(m["lane_prev"], 50.0);
        assert_eq!(m["lane_wakeups"], 50.0);
        // A scheduler that did not answer.
        let err = lane("error: scx_express is not running", after, "gpu", &mut m);
        assert!(format!("{:#}", err.unwrap_err()).contains("not running"));
    }

    #[test]
    fn ps_class_by_tid() {
        let ps = "  TID   PID COMM     CLASS SOURCE\n   77    70 launcher gpu   cuda\n";
        assert_eq!(ps_class(ps, "77").as_deref(), Some("gpu"));
        assert_eq!(ps_class(ps, "70"), None);
        let two = "HDR\n 77 70 launcher normal cuda\nHDR\n 77 70 launcher gpu cuda\n";
        assert_eq!(ps_class(two, "77").as_deref(), Some("gpu"));
    }

    /// The files of a scale cell: launchers with tok/s `tok`, agents with
    /// tail p99 `p99`, `scale.txt` saying how many ran.
    pub fn scale_files(tok: &[f64], p99: &[f64]) -> Vec<(String, String)> {
        let mut v = vec![(
            "scale.txt".to_string(),
            format!("launchers={}\nagents={}\n", tok.len(), p99.len()),
        )];
        for (i, t) in tok.iter().enumerate() {
            let out = DECODE.replace("412.5", &t.to_string());
            v.push((format!("launcher-{}.out", i + 1), out));
            v.push((format!("launcher-{}.tid", i + 1), format!("{}", 100 + i)));
        }
        for (j, p) in p99.iter().enumerate() {
            let out = AGENT.replace("\"tail_p99_us\":900", &format!("\"tail_p99_us\":{p}"));
            v.push((format!("agent-{}.out", j + 1), out));
            v.push((format!("agent-{}.tid", j + 1), format!("{}", 200 + j)));
        }
        v
    }

    #[test]
    fn scale_launchers_and_agents() {
        let files: BTreeMap<String, String> =
            scale_files(&[300.0, 100.0, 200.0, 400.0], &[900.0, 1500.0])
                .into_iter()
                .collect();
        let mut m = BTreeMap::new();
        scale(&files, &mut m).unwrap();
        assert_eq!(m["launchers"], 4.0);
        assert_eq!(m["launcher_2_tok_s"], 100.0);
        assert_eq!(m["launchers_tok_s_min"], 100.0);
        assert_eq!(m["launchers_tok_s_median"], 250.0);
        assert_eq!(m["agent_2_tail_p99_us"], 1500.0);
        assert_eq!(m["agents_tail_p99_max_us"], 1500.0);
        assert_eq!(m["agents_tail_p50_max_us"], 60.0);
        // A launcher that left no report is an error, not a smaller cell.
        let mut short = files.clone();
        short.remove("launcher-3.out");
        let e = scale(&short, &mut m).unwrap_err();
        assert!(format!("{e:#}").contains("3 of 4 launcher"), "{e:#}");
        short.insert("launcher-3.out".into(), "launcher_tid=1\n".into());
        assert!(format!("{:#}", scale(&short, &mut m).unwrap_err()).contains("launcher 3"));
        let mut none = files.clone();
        none.remove("scale.txt");
        assert!(scale(&none, &mut m).is_err());
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn scale_classification_counts_every_launcher() {
        let mut files = scale_files(&[300.0, 200.0], &[900.0, 900.0]);
        let ps = "TID PID COMM CLASS\n100 1 launcher gpu\n101 2 launcher normal\n\
                  200 3 agent-loop agent\n201 4 agent-loop agent\n";
        files.push(("ps.txt".into(), ps.into()));
        let refs: Vec<(&str, &str)> = files
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        let c = split_cell(&cell_text("express", "baseline", "scale", 1, &refs)).unwrap();
        let m = measure(&c);
        assert!(m.errors.is_empty(), "{:?}", m.errors);
        assert_eq!(m.metrics["launchers_gpu"], 1.0);
        assert_eq!(m.metrics["agents_marked"], 2.0);
        assert_eq!(m.class.as_deref(), Some("normal"));
        let all = ps.replace("101 2 launcher normal", "101 2 launcher gpu");
        let refs: Vec<(&str, &str)> = refs
            .into_iter()
            .map(|(a, b)| {
                if a == "ps.txt" {
                    (a, all.as_str())
                } else {
                    (a, b)
                }
            })
            .collect();
        let m = measure(&split_cell(&cell_text("express", "baseline", "scale", 1, &refs)).unwrap());
        assert_eq!(m.class.as_deref(), Some("gpu"));
    }

    pub fn cell_text(
        sched: &str,
        scen: &str,
        wl: &str,
        rep: u32,
        files: &[(&str, &str)],
    ) -> String {
        let mut s = format!(
            "@@bench sched={sched} scenario={scen} workload={wl} repeat={rep}\n\
             @@meta rc=0 wall_cs=400 sched_ticks=4 state=enabled disk=nvme duration_s=2\n"
        );
        for (n, t) in files {
            s += &format!("@@file {n}\n{t}\n");
        }
        s + "@@end\n"
    }

    #[test]
    fn split_and_measure_a_cell() {
        let t = cell_text(
            "express",
            "heavy",
            "decode",
            2,
            &[
                ("workload.out", DECODE),
                ("stress.yaml", STRESS),
                ("iperf-1.json", IPERF),
                ("fio.json", FIO),
                ("tid", "77"),
                ("ps.txt", "77 70 launcher gpu cuda"),
            ],
        );
        let c = split_cell(&t).unwrap();
        assert_eq!(c.header["repeat"], "2");
        assert_eq!(c.files.len(), 6);
        let m = measure(&c);
        assert!(m.errors.is_empty(), "{:?}", m.errors);
        assert_eq!(m.metrics["disk_iops"], 1234.5);
        assert_eq!(m.metrics["net_gbit_s"], 18.0);
        assert_eq!(m.metrics["cpu_bogo_ops_s"], 2927.5);
        assert_eq!(m.metrics["sched_cpu_pct"], 1.0);
        assert_eq!(m.class.as_deref(), Some("gpu"));
        // A noise file missing is an error; a truncated file is rejected.
        let t = cell_text("eevdf", "net", "decode", 1, &[("workload.out", DECODE)]);
        assert!(!measure(&split_cell(&t).unwrap()).errors.is_empty());
        assert!(split_cell(&t.replace("@@end\n", "")).is_err());
    }
}
