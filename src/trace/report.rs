//! The pure half of `scx_express trace`: events in, per-thread statistics,
//! launch-pair analysis, simulated detection latency, CSV rows and the
//! report out. No BPF here, so all of it is unit-tested.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::bpf_intf;
use crate::probes::ProbeKind;

/// What a probe point is: where a `--csv` row's `detail` and the per-symbol
/// counts come from. Indexed by the uprobe's attach cookie.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PointInfo {
    pub symbol: String,
    pub library: String,
    pub kind: ProbeKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Launch,
    Sync,
    Mark,
    Switch,
    Irq,
    Softirq,
}

/// One event from the BPF side (struct express_event), in Rust terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    pub ts_ns: u64,
    pub kind: EventKind,
    pub flags: u32,
    /// tgid and thread of the task (switch: of prev).
    pub pid: i32,
    pub tid: i32,
    pub cpu: i32,
    /// CUDA/marker hits: the thread's class after the hit.
    pub class: u32,
    /// CUDA/marker hits: attach cookie; IRQs: number or vector.
    pub arg: u64,
    /// Switch: prev_state; IRQs: duration in ns.
    pub value: u64,
    pub next_pid: i32,
    pub next_tid: i32,
    pub comm: [u8; 16],
    /// Switch: next's comm; hard IRQ: handler name.
    pub other: [u8; 16],
}

fn to_comm(raw: &[std::os::raw::c_char]) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (o, c) in out.iter_mut().zip(raw) {
        *o = *c as u8;
    }
    out
}

/// A NUL-padded kernel string as text.
pub fn comm_str(c: &[u8; 16]) -> String {
    let end = c.iter().position(|&b| b == 0).unwrap_or(c.len());
    String::from_utf8_lossy(&c[..end]).into_owned()
}

impl Event {
    pub fn from_raw(e: &bpf_intf::express_event) -> Option<Self> {
        let kind = match e.type_ {
            bpf_intf::trace_event_type_TRACE_EV_LAUNCH => EventKind::Launch,
            bpf_intf::trace_event_type_TRACE_EV_SYNC => EventKind::Sync,
            bpf_intf::trace_event_type_TRACE_EV_MARK => EventKind::Mark,
            bpf_intf::trace_event_type_TRACE_EV_SWITCH => EventKind::Switch,
            bpf_intf::trace_event_type_TRACE_EV_IRQ => EventKind::Irq,
            bpf_intf::trace_event_type_TRACE_EV_SOFTIRQ => EventKind::Softirq,
            _ => return None,
        };
        Some(Self {
            ts_ns: e.ts_ns,
            kind,
            flags: e.flags,
            pid: e.pid,
            tid: e.tid,
            cpu: e.cpu,
            class: e.class,
            arg: e.arg,
            value: e.value,
            next_pid: e.next_pid,
            next_tid: e.next_tid,
            comm: to_comm(&e.comm),
            other: to_comm(&e.other),
        })
    }

    fn has(&self, flag: u32) -> bool {
        self.flags & flag != 0
    }

    pub fn nested(&self) -> bool {
        self.has(bpf_intf::trace_event_flags_TRACE_F_NESTED)
    }

    pub fn classified(&self) -> bool {
        self.has(bpf_intf::trace_event_flags_TRACE_F_CLASSIFIED)
    }

    /// Switch: prev was traced, so this is its switch_out.
    pub fn prev_traced(&self) -> bool {
        self.has(bpf_intf::trace_event_flags_TRACE_F_PREV)
    }

    /// Switch: next was traced, so this is its switch_in.
    pub fn next_traced(&self) -> bool {
        self.has(bpf_intf::trace_event_flags_TRACE_F_NEXT)
    }

    /// Switch: prev lost the CPU while still runnable (preempted, or it
    /// yielded), as opposed to going to sleep.
    pub fn involuntary(&self) -> bool {
        self.has(bpf_intf::trace_event_flags_TRACE_F_PREEMPT) || self.value == 0
    }
}

/// Kernel task state as `ps` letters: R (runnable; R+ when preempted),
/// S, D, I (idle wait), T, t, X, Z, P.
pub fn task_state(prev_state: u64, preempt: bool) -> String {
    if preempt {
        return "R+".into();
    }
    const TASK_NOLOAD: u64 = 0x400;
    const LETTERS: [(u64, &str); 7] = [
        (0x1, "S"),
        (0x2, "D"),
        (0x4, "T"),
        (0x8, "t"),
        (0x10, "X"),
        (0x20, "Z"),
        (0x40, "P"),
    ];
    if prev_state == 0 {
        return "R".into();
    }
    if prev_state & 0x2 != 0 && prev_state & TASK_NOLOAD != 0 {
        return "I".into();
    }
    LETTERS
        .iter()
        .find(|(bit, _)| prev_state & bit != 0)
        .map(|(_, l)| l.to_string())
        .unwrap_or_else(|| format!("{prev_state:#x}"))
}

/// Softirq vector names (include/linux/interrupt.h).
pub fn softirq_name(vec: u64) -> String {
    const NAMES: [&str; 10] = [
        "HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER",
        "RCU",
    ];
    NAMES
        .get(vec as usize)
        .map(|s| s.to_string())
        .unwrap_or_else(|| format!("VEC{vec}"))
}

pub fn class_name(class: u32) -> &'static str {
    crate::classify::class_from_raw(class).as_str()
}

/// The scheduler's launch-probe windows, replayed: when a CUDA library
/// with launch points is found, a window opens one grace period later
/// (discovery.rs, `NEW_PROCESS_GRACE`: the scheduler opens it only if the
/// process's syncs have not classified it by then, and a thread they did
/// classify needs no window), and every `period_ns` after the library was
/// found, each for `window_ns` (src/probes.rs, ProbeManager). The
/// periodic windows' backoff is not replayed: on a host where the windows
/// have backed off, a launcher that never syncs waits longer.
#[derive(Debug, Clone)]
pub struct WindowSim {
    window_ns: u64,
    period_ns: u64,
    /// When libraries with launch points were found, ascending.
    found: Vec<u64>,
}

impl WindowSim {
    pub fn new(window_ns: u64, period_ns: u64) -> Self {
        Self {
            window_ns,
            period_ns: period_ns.max(1),
            found: Vec::new(),
        }
    }

    pub fn library_found(&mut self, ts_ns: u64) {
        let at = self.found.partition_point(|&t| t <= ts_ns);
        self.found.insert(at, ts_ns);
    }

    /// Would the scheduler's launch probes have been attached at `ts_ns`?
    pub fn in_window(&self, ts_ns: u64) -> bool {
        let at = self.found.partition_point(|&t| t <= ts_ns);
        if at == 0 {
            return false;
        }
        let since = ts_ns - self.found[at - 1];
        let grace = crate::discovery::NEW_PROCESS_GRACE.as_nanos() as u64;
        (since >= grace && since - grace < self.window_ns)
            || (since >= self.period_ns && since % self.period_ns < self.window_ns)
    }
}

/// A uniform reservoir of `cap` slots, at its `seen`-th value (counted
/// from 1, past the first `cap`): the slot it replaces, chosen with
/// probability cap/seen, or None to drop it. `rng` is the xorshift64*
/// state, seeded on first use.
pub fn reservoir_slot(rng: &mut u64, seen: u64, cap: usize) -> Option<usize> {
    if *rng == 0 {
        *rng = 0x9e37_79b9_7f4a_7c15;
    }
    *rng ^= *rng >> 12;
    *rng ^= *rng << 25;
    *rng ^= *rng >> 27;
    let r = rng.wrapping_mul(0x2545_f491_4f6c_dd1d) % seen.max(1);
    ((r as usize) < cap).then_some(r as usize)
}

/// Up to `CAP` samples of a distribution; past that, a uniform reservoir
/// (memory stays bounded on long traces; the median stays unbiased).
#[derive(Debug, Clone, Default)]
pub struct Samples {
    v: Vec<u32>,
    seen: u64,
    rng: u64,
}

impl Samples {
    const CAP: usize = 1 << 20;

    /// Adds a value in ns (saturated at u32::MAX, about 4.3 s).
    pub fn push(&mut self, ns: u64) {
        let x = ns.min(u32::MAX as u64) as u32;
        self.seen += 1;
        if self.v.len() < Self::CAP {
            self.v.push(x);
            return;
        }
        if let Some(i) = reservoir_slot(&mut self.rng, self.seen, Self::CAP) {
            self.v[i] = x;
        }
    }

    pub fn count(&self) -> u64 {
        self.seen
    }

    /// The median in ns (the mean of the middle two for an even count).
    pub fn median(&self) -> Option<f64> {
        median(&self.v)
    }
}

pub fn median(v: &[u32]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_unstable();
    let n = s.len();
    Some(if n % 2 == 1 {
        s[n / 2] as f64
    } else {
        (s[n / 2 - 1] as f64 + s[n / 2] as f64) / 2.0
    })
}

/// What happened to a thread since its last launch.
#[derive(Debug, Clone, Copy, Default)]
struct Since {
    switched: bool,
    involuntary: bool,
    synced: bool,
}

/// Intervals between consecutive launches of one thread.
#[derive(Debug, Clone, Default)]
pub struct LaunchPairs {
    /// No context switch of the thread between the two launches.
    pub no_switch: Samples,
    /// At least one context switch between them.
    pub switched: Samples,
    /// At least one involuntary one (a subset of `switched`).
    pub involuntary: Samples,
    /// Pairs with a sync call between them, left out above: their gap is
    /// GPU wait, not CPU delay.
    pub spanning_sync: u64,
}

#[derive(Debug, Clone, Default)]
pub struct ThreadStats {
    pub pid: i32,
    pub tid: i32,
    pub comm: [u8; 16],
    pub launch_hits: u64,
    pub launches: u64,
    pub sync_hits: u64,
    pub syncs: u64,
    pub marks: u64,
    pub switches_out: u64,
    pub involuntary: u64,
    pub voluntary: u64,
    pub offcpu_ns: u64,
    last_out_ns: Option<u64>,
    pub irqs: u64,
    pub irq_ns: u64,
    pub softirqs: u64,
    pub softirq_ns: u64,
    pub first_hit_ns: Option<u64>,
    pub last_hit_ns: Option<u64>,
    /// When a probe hit (actually) made the thread gpu/agent.
    pub classified_ns: Option<u64>,
    /// With every launch probed: when the scheduler's probe policy would
    /// have classified it (first sync, or first launch in a window).
    pub sim_classified_ns: Option<u64>,
    /// The class after the last probe hit.
    pub last_class: u32,
    last_launch_ns: Option<u64>,
    since: Since,
    pub pairs: LaunchPairs,
}

impl ThreadStats {
    fn new(pid: i32, tid: i32, comm: [u8; 16]) -> Self {
        Self {
            pid,
            tid,
            comm,
            ..Default::default()
        }
    }

    /// A thread known only by the probe-hit counters of its class entry
    /// (`--no-events`): every hit counts as a call.
    pub fn from_hits(pid: i32, tid: i32, comm: &str, launch_hits: u64, sync_hits: u64) -> Self {
        let mut c = [0u8; 16];
        for (o, b) in c.iter_mut().zip(comm.bytes()) {
            *o = b;
        }
        Self {
            launch_hits,
            launches: launch_hits,
            sync_hits,
            syncs: sync_hits,
            ..Self::new(pid, tid, c)
        }
    }
}

/// Per probe point: raw hits, and hits that were new calls (not nested).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PointCounts {
    pub hits: u64,
    pub calls: u64,
}

/// Streams events into per-thread statistics.
#[derive(Debug, Clone, Default)]
pub struct Analyzer {
    pub threads: HashMap<i32, ThreadStats>,
    pub points: HashMap<u64, PointCounts>,
    pub events: u64,
    /// Agent threads' steps (TRACE_EV_STEP records).
    pub steps: super::steps::StepLog,
    sim: Option<WindowSim>,
}

impl Analyzer {
    /// `sim`: replay the scheduler's launch windows (with every launch probed).
    pub fn new(sim: Option<WindowSim>) -> Self {
        Self {
            sim,
            ..Default::default()
        }
    }

    pub fn library_found(&mut self, ts_ns: u64) {
        if let Some(s) = &mut self.sim {
            s.library_found(ts_ns);
        }
    }

    fn thread(&mut self, pid: i32, tid: i32, comm: [u8; 16]) -> &mut ThreadStats {
        let t = self
            .threads
            .entry(tid)
            .or_insert_with(|| ThreadStats::new(pid, tid, comm));
        t.comm = comm;
        t
    }

    /// Takes one event; returns the off-CPU time it ends (a switch_in of a
    /// thread whose switch_out was seen), for the CSV.
    pub fn on_event(&mut self, e: &Event) -> Option<u64> {
        self.events += 1;
        match e.kind {
            EventKind::Launch | EventKind::Sync | EventKind::Mark => {
                self.on_probe(e);
                None
            }
            EventKind::Switch => self.on_switch(e),
            EventKind::Irq | EventKind::Softirq => {
                let t = self.thread(e.pid, e.tid, e.comm);
                if e.kind == EventKind::Irq {
                    t.irqs += 1;
                    t.irq_ns += e.value;
                } else {
                    t.softirqs += 1;
                    t.softirq_ns += e.value;
                }
                None
            }
        }
    }

    fn on_probe(&mut self, e: &Event) {
        let nested = e.nested();
        let p = self.points.entry(e.arg).or_default();
        p.hits += 1;
        if !nested {
            p.calls += 1;
        }
        let in_window =
            e.kind == EventKind::Launch && self.sim.as_ref().is_some_and(|s| s.in_window(e.ts_ns));
        let simulating = self.sim.is_some();
        let t = self.thread(e.pid, e.tid, e.comm);
        t.first_hit_ns.get_or_insert(e.ts_ns);
        t.last_hit_ns = Some(e.ts_ns);
        t.last_class = e.class;
        if e.classified() && t.classified_ns.is_none() {
            t.classified_ns = Some(e.ts_ns);
        }
        match e.kind {
            EventKind::Launch => {
                t.launch_hits += 1;
                if simulating && in_window {
                    t.sim_classified_ns.get_or_insert(e.ts_ns);
                }
                if nested {
                    return;
                }
                t.launches += 1;
                if let Some(last) = t.last_launch_ns {
                    let gap = e.ts_ns.saturating_sub(last);
                    let s = t.since;
                    if s.synced {
                        t.pairs.spanning_sync += 1;
                    } else if s.switched {
                        t.pairs.switched.push(gap);
                        if s.involuntary {
                            t.pairs.involuntary.push(gap);
                        }
                    } else {
                        t.pairs.no_switch.push(gap);
                    }
                }
                t.last_launch_ns = Some(e.ts_ns);
                t.since = Since::default();
            }
            EventKind::Sync => {
                t.sync_hits += 1;
                if simulating {
                    t.sim_classified_ns.get_or_insert(e.ts_ns);
                }
                if !nested {
                    t.syncs += 1;
                }
                t.since.synced = true;
            }
            _ => t.marks += 1,
        }
    }

    fn on_switch(&mut self, e: &Event) -> Option<u64> {
        if e.prev_traced() {
            let invol = e.involuntary();
            let t = self.thread(e.pid, e.tid, e.comm);
            t.switches_out += 1;
            if invol {
                t.involuntary += 1;
                t.since.involuntary = true;
            } else {
                t.voluntary += 1;
            }
            t.since.switched = true;
            t.last_out_ns = Some(e.ts_ns);
        }
        if e.next_traced() {
            let t = self.thread(e.next_pid, e.next_tid, e.other);
            if let Some(out) = t.last_out_ns.take() {
                let off = e.ts_ns.saturating_sub(out);
                t.offcpu_ns += off;
                return Some(off);
            }
        }
        None
    }
}

// ---- CSV -----------------------------------------------------------------

pub const CSV_HEADER: &str = "timestamp_ns,event_type,pid,tid,comm,cpu,detail,nested,class,\
                              state,other_tid,other_comm,irq,duration_ns";

/// Quotes a CSV field when it needs it (RFC 4180).
pub fn csv_field(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\"")).into()
    } else {
        s.into()
    }
}

#[allow(clippy::too_many_arguments)]
fn csv_row(
    out: &mut String,
    e: &Event,
    kind: &str,
    (pid, tid, comm): (i32, i32, &[u8; 16]),
    detail: &str,
    nested: &str,
    class: &str,
    state: &str,
    other: Option<(i32, &[u8; 16])>,
    irq: Option<u64>,
    duration: Option<u64>,
) {
    let (otid, ocomm) = match other {
        Some((t, c)) => (t.to_string(), comm_str(c)),
        None => (String::new(), String::new()),
    };
    let _ = writeln!(
        out,
        "{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
        e.ts_ns,
        kind,
        pid,
        tid,
        csv_field(&comm_str(comm)),
        e.cpu,
        csv_field(detail),
        nested,
        class,
        state,
        otid,
        csv_field(&ocomm),
        irq.map(|v| v.to_string()).unwrap_or_default(),
        duration.map(|v| v.to_string()).unwrap_or_default(),
    );
}

/// A context switch's rows: `switch_out` if the task leaving is traced,
/// `switch_in` if the one arriving is.
fn csv_switch_rows(out: &mut String, e: &Event, offcpu_ns: Option<u64>) {
    let me = (e.pid, e.tid, &e.comm);
    let preempt = e.has(bpf_intf::trace_event_flags_TRACE_F_PREEMPT);
    let state = task_state(e.value, preempt);
    let next = (e.next_pid, e.next_tid, &e.other);
    if e.prev_traced() {
        let detail = if e.involuntary() {
            "involuntary"
        } else {
            "voluntary"
        };
        csv_row(
            out,
            e,
            "switch_out",
            me,
            detail,
            "",
            "",
            &state,
            Some((e.next_tid, &e.other)),
            None,
            None,
        );
    }
    if e.next_traced() {
        csv_row(
            out,
            e,
            "switch_in",
            next,
            "",
            "",
            "",
            &state,
            Some((e.tid, &e.comm)),
            None,
            offcpu_ns,
        );
    }
}

/// Appends the CSV rows of one event: one row, or for a context switch a
/// `switch_out` row (prev traced) and/or a `switch_in` row (next traced).
/// `offcpu_ns`: what `Analyzer::on_event` returned for it.
pub fn csv_rows(out: &mut String, e: &Event, points: &[PointInfo], offcpu_ns: Option<u64>) {
    let me = (e.pid, e.tid, &e.comm);
    match e.kind {
        EventKind::Launch | EventKind::Sync | EventKind::Mark => {
            let kind = match e.kind {
                EventKind::Launch => "launch",
                EventKind::Sync => "sync",
                _ => "mark",
            };
            let symbol = points
                .get(e.arg as usize)
                .map(|p| p.symbol.as_str())
                .unwrap_or("?");
            let nested = if e.nested() { "1" } else { "0" };
            let class = class_name(e.class);
            csv_row(
                out, e, kind, me, symbol, nested, class, "", None, None, None,
            );
        }
        EventKind::Switch => csv_switch_rows(out, e, offcpu_ns),
        EventKind::Irq => csv_row(
            out,
            e,
            "irq",
            me,
            &comm_str(&e.other),
            "",
            "",
            "",
            None,
            Some(e.arg),
            Some(e.value),
        ),
        EventKind::Softirq => csv_row(
            out,
            e,
            "softirq",
            me,
            &softirq_name(e.arg),
            "",
            "",
            "",
            None,
            Some(e.arg),
            Some(e.value),
        ),
    }
}

// ---- Report ----------------------------------------------------------------

/// One thread's line of the report.
#[derive(Debug, Clone, Serialize)]
pub struct ThreadRow {
    pub tid: i32,
    pub pid: i32,
    pub comm: String,
    /// The class the scheduler would give it now.
    pub class: String,
    /// Where that class comes from (cuda, marker, rule, -), or "exited".
    pub source: String,
    pub launches: u64,
    pub launch_hits: u64,
    pub syncs: u64,
    pub sync_hits: u64,
    pub switches: u64,
    pub voluntary: u64,
    pub involuntary: u64,
    pub offcpu_ms: f64,
    /// Context switches per 1,000 launches.
    pub sched_per_1k: Option<f64>,
    /// IRQs (hard + soft) that hit the thread per 1,000 launches.
    pub irq_per_1k: Option<f64>,
    pub irqs: u64,
    pub softirqs: u64,
    pub irq_ms: f64,
    pub first_hit_ns: Option<u64>,
    pub classified_ns: Option<u64>,
    pub sim_classified_ns: Option<u64>,
    /// Full policy: first CUDA call -> classified under the scheduler's
    /// probe policy (replayed windows).
    pub detect_ms: Option<f64>,
    pub pairs: PairRow,
}

#[derive(Debug, Clone, Serialize, Default, PartialEq)]
pub struct PairRow {
    pub no_switch: u64,
    pub no_switch_median_us: Option<f64>,
    pub switched: u64,
    pub switched_median_us: Option<f64>,
    pub involuntary: u64,
    pub involuntary_median_us: Option<f64>,
    pub spanning_sync: u64,
    /// switched median − no-switch median.
    pub penalty_us: Option<f64>,
}

pub fn pair_row(p: &LaunchPairs) -> PairRow {
    let us = |s: &Samples| s.median().map(|v| v / 1e3);
    let (a, b) = (us(&p.no_switch), us(&p.switched));
    PairRow {
        no_switch: p.no_switch.count(),
        no_switch_median_us: a,
        switched: p.switched.count(),
        switched_median_us: b,
        involuntary: p.involuntary.count(),
        involuntary_median_us: us(&p.involuntary),
        spanning_sync: p.spanning_sync,
        penalty_us: a.zip(b).map(|(a, b)| b - a),
    }
}

fn per_1k(n: u64, launches: u64) -> Option<f64> {
    (launches > 0).then(|| n as f64 * 1000.0 / launches as f64)
}

/// The report line of a thread; `class`/`source` come from the caller (the
/// live class map, or the last hit for a thread that exited).
pub fn thread_row(t: &ThreadStats, class: String, source: String) -> ThreadRow {
    ThreadRow {
        tid: t.tid,
        pid: t.pid,
        comm: comm_str(&t.comm),
        class,
        source,
        launches: t.launches,
        launch_hits: t.launch_hits,
        syncs: t.syncs,
        sync_hits: t.sync_hits,
        switches: t.switches_out,
        voluntary: t.voluntary,
        involuntary: t.involuntary,
        offcpu_ms: t.offcpu_ns as f64 / 1e6,
        sched_per_1k: per_1k(t.switches_out, t.launches),
        irq_per_1k: per_1k(t.irqs + t.softirqs, t.launches),
        irqs: t.irqs,
        softirqs: t.softirqs,
        irq_ms: (t.irq_ns + t.softirq_ns) as f64 / 1e6,
        first_hit_ns: t.first_hit_ns,
        classified_ns: t.classified_ns,
        sim_classified_ns: t.sim_classified_ns,
        detect_ms: t
            .sim_classified_ns
            .zip(t.first_hit_ns)
            .map(|(c, f)| c.saturating_sub(f) as f64 / 1e6),
        pairs: pair_row(&t.pairs),
    }
}

/// Per probe point: symbol, library and counts.
#[derive(Debug, Clone, Serialize)]
pub struct PointRow {
    pub symbol: String,
    pub library: String,
    pub kind: String,
    pub hits: u64,
    pub calls: u64,
}

/// IRQ totals of one kind and number.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct IrqRow {
    pub kind: String,
    pub number: u64,
    pub name: String,
    pub count: u64,
    pub ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub duration_s: f64,
    pub probe_policy: String,
    pub events: bool,
    pub pid_filter: Option<i32>,
    pub start_ns: u64,
    pub end_ns: u64,
    /// When the first probe was attached (CLOCK_MONOTONIC ns).
    pub probes_attached_ns: Option<u64>,
    pub libraries: u64,
    pub probe_points: u64,
    pub launch_windows: u64,
    /// Each launch window: [opened, closed] (CLOCK_MONOTONIC ns).
    pub launch_windows_ns: Vec<[u64; 2]>,
    pub lost_events: u64,
    pub threads: Vec<ThreadRow>,
    pub points: Vec<PointRow>,
    pub irqs: Vec<IrqRow>,
    /// Agent-class threads' steps and their breakdown (None: no steps).
    pub agent_steps: Option<super::steps::StepReport>,
}

fn opt(v: Option<f64>, prec: usize) -> String {
    v.map(|v| format!("{v:.prec$}"))
        .unwrap_or_else(|| "-".into())
}

/// The human-readable report.
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    render_header(&mut s, r);
    render_threads(&mut s, r);
    render_pairs(&mut s, r);
    render_points(&mut s, r);
    render_irqs(&mut s, r);
    if let Some(st) = &r.agent_steps {
        super::steps::render(&mut s, st);
    }
    s
}

/// The summary line and the caveats of the run's mode.
fn render_header(s: &mut String, r: &Report) {
    let _ = writeln!(
        s,
        "scx_express trace: {:.1} s, probe policy {}{}, {} libraries, {} probe points, \
         {} launch windows, {} events lost",
        r.duration_s,
        r.probe_policy,
        if r.events { "" } else { " (--no-events)" },
        r.libraries,
        r.probe_points,
        r.launch_windows,
        r.lost_events
    );
    if !r.events {
        s.push_str("note: --no-events: counts are raw probe hits of live threads\n");
    }
    if r.probe_policy == "scheduler" {
        s.push_str(
            "note: launch probes were attached in windows only, so launch counts \
             and launch pairs cover those windows\n",
        );
    }
}

/// One line per thread.
fn render_threads(s: &mut String, r: &Report) {
    let _ = writeln!(s, "\nthreads (CUDA/marker callers{}):", {
        if r.pid_filter.is_some() {
            ", and every thread of --pid"
        } else {
            ""
        }
    });
    let _ = writeln!(
        s,
        "{:>8} {:>8} {:<16} {:<7} {:<7} {:>9} {:>8} {:>9} {:>13} {:>10} {:>8} {:>7} {:>9}",
        "TID",
        "PID",
        "COMM",
        "CLASS",
        "SOURCE",
        "LAUNCHES",
        "SYNCS",
        "HITS",
        "CSW(VOL/INV)",
        "OFFCPU_MS",
        "SCHED/1K",
        "IRQ/1K",
        "DETECT_MS"
    );
    for t in &r.threads {
        let _ = writeln!(
            s,
            "{:>8} {:>8} {:<16} {:<7} {:<7} {:>9} {:>8} {:>9} {:>13} {:>10.1} {:>8} {:>7} {:>9}",
            t.tid,
            t.pid,
            t.comm,
            t.class,
            t.source,
            t.launches,
            t.syncs,
            t.launch_hits + t.sync_hits,
            format!("{}/{}", t.voluntary, t.involuntary),
            t.offcpu_ms,
            opt(t.sched_per_1k, 1),
            opt(t.irq_per_1k, 1),
            opt(t.detect_ms, 1),
        );
    }
}

/// Launch pairs of the threads that launched more than once.
fn render_pairs(s: &mut String, r: &Report) {
    let launchers: Vec<_> = r
        .threads
        .iter()
        .filter(|t| r.events && t.launches > 1)
        .collect();
    if !launchers.is_empty() {
        let _ = writeln!(
            s,
            "\nlaunch pairs (consecutive launches of one thread; pairs spanning a sync \
             left out): median gap in µs"
        );
        let _ = writeln!(
            s,
            "{:>8} {:>9} {:>10} {:>9} {:>10} {:>9} {:>10} {:>11} {:>8}",
            "TID", "NO_CSW", "MED_US", "CSW", "MED_US", "INVOL", "MED_US", "PENALTY_US", "SYNC"
        );
        for t in launchers {
            let p = &t.pairs;
            let _ = writeln!(
                s,
                "{:>8} {:>9} {:>10} {:>9} {:>10} {:>9} {:>10} {:>11} {:>8}",
                t.tid,
                p.no_switch,
                opt(p.no_switch_median_us, 1),
                p.switched,
                opt(p.switched_median_us, 1),
                p.involuntary,
                opt(p.involuntary_median_us, 1),
                opt(p.penalty_us, 1),
                p.spanning_sync
            );
        }
    }
}

/// Hits per probe point.
fn render_points(s: &mut String, r: &Report) {
    if !r.points.is_empty() {
        let _ = writeln!(
            s,
            "\nprobe hits by entry point (CALLS: hits not nested in another CUDA call)"
        );
        let _ = writeln!(
            s,
            "{:<28} {:<7} {:>10} {:>10}  LIBRARY",
            "SYMBOL", "KIND", "HITS", "CALLS"
        );
        for p in &r.points {
            let _ = writeln!(
                s,
                "{:<28} {:<7} {:>10} {:>10}  {}",
                p.symbol, p.kind, p.hits, p.calls, p.library
            );
        }
    }
}

/// IRQ counts and time.
fn render_irqs(s: &mut String, r: &Report) {
    if !r.irqs.is_empty() {
        let _ = writeln!(
            s,
            "\nIRQs on all CPUs (device IRQs only: the irq tracepoints miss the local \
             timer and IPIs; softirq time includes hard IRQs nested in it)"
        );
        let _ = writeln!(
            s,
            "{:<8} {:>6} {:<16} {:>10} {:>10}",
            "KIND", "NUMBER", "NAME", "COUNT", "TIME_MS"
        );
        for i in &r.irqs {
            let _ = writeln!(
                s,
                "{:<8} {:>6} {:<16} {:>10} {:>10.2}",
                i.kind, i.number, i.name, i.count, i.ms
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bpf_intf::*;

    fn comm(s: &str) -> [u8; 16] {
        let mut c = [0u8; 16];
        c[..s.len()].copy_from_slice(s.as_bytes());
        c
    }

    fn ev(ts: u64, kind: EventKind, tid: i32) -> Event {
        Event {
            ts_ns: ts,
            kind,
            flags: 0,
            pid: 100,
            tid,
            cpu: 3,
            class: task_class_CLASS_GPU,
            arg: 0,
            value: 0,
            next_pid: 0,
            next_tid: 0,
            comm: comm("launcher"),
            other: [0; 16],
        }
    }

    fn launch(ts: u64) -> Event {
        ev(ts, EventKind::Launch, 7)
    }

    fn switch_out(ts: u64, state: u64) -> Event {
        let mut e = ev(ts, EventKind::Switch, 7);
        e.flags = trace_event_flags_TRACE_F_PREV;
        e.value = state;
        e.next_pid = 1;
        e.next_tid = 1;
        e.other = comm("hog");
        e
    }

    fn switch_in(ts: u64) -> Event {
        let mut e = ev(ts, EventKind::Switch, 1);
        e.pid = 1;
        e.comm = comm("hog");
        e.flags = trace_event_flags_TRACE_F_NEXT | trace_event_flags_TRACE_F_PREEMPT;
        e.next_pid = 100;
        e.next_tid = 7;
        e.other = comm("launcher");
        e
    }

    #[test]
    fn medians_of_odd_even_and_empty() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[5]), Some(5.0));
        assert_eq!(median(&[9, 1, 5]), Some(5.0));
        assert_eq!(median(&[4, 1, 3, 2]), Some(2.5));
    }

    #[test]
    fn samples_stay_bounded_and_keep_the_median() {
        let mut s = Samples::default();
        for i in 0..(Samples::CAP as u64 * 3) {
            s.push(if i % 2 == 0 { 100 } else { 300 });
        }
        assert_eq!(s.count(), Samples::CAP as u64 * 3);
        assert_eq!(s.v.len(), Samples::CAP);
        let m = s.median().unwrap();
        assert!((100.0..=300.0).contains(&m));
        let mut big = Samples::default();
        big.push(u64::MAX);
        assert_eq!(big.median(), Some(u32::MAX as f64), "saturates");
    }

    #[test]
    fn launch_pairs_split_by_context_switch_and_sync() {
        let mut a = Analyzer::new(None);
        // Gaps of 10 µs with no switch.
        for i in 0..5 {
            a.on_event(&launch(i * 10_000));
        }
        // A preemption between two launches: a 500 µs gap.
        a.on_event(&switch_out(45_000, 0));
        a.on_event(&switch_in(400_000));
        a.on_event(&launch(540_000));
        // A voluntary sleep: 200 µs.
        a.on_event(&switch_out(545_000, 1));
        a.on_event(&switch_in(700_000));
        a.on_event(&launch(740_000));
        // A sync between two launches: left out.
        a.on_event(&ev(745_000, EventKind::Sync, 7));
        a.on_event(&launch(900_000));
        let t = &a.threads[&7];
        assert_eq!(t.launches, 8);
        assert_eq!(t.pairs.no_switch.count(), 4);
        assert_eq!(t.pairs.switched.count(), 2);
        assert_eq!(t.pairs.involuntary.count(), 1);
        assert_eq!(t.pairs.spanning_sync, 1);
        let row = pair_row(&t.pairs);
        assert_eq!(row.no_switch_median_us, Some(10.0));
        assert_eq!(row.switched_median_us, Some(350.0));
        assert_eq!(row.involuntary_median_us, Some(500.0));
        assert_eq!(row.penalty_us, Some(340.0));
        assert_eq!((t.switches_out, t.involuntary, t.voluntary), (2, 1, 1));
        // Off-CPU time: 355 + 155 µs.
        assert_eq!(t.offcpu_ns, 510_000);
    }

    #[test]
    fn nested_hits_count_as_hits_not_launches() {
        let mut a = Analyzer::new(None);
        let mut inner = launch(1_500);
        inner.flags = trace_event_flags_TRACE_F_NESTED;
        inner.arg = 1;
        a.on_event(&launch(1_000));
        a.on_event(&inner);
        a.on_event(&launch(11_000));
        let t = &a.threads[&7];
        assert_eq!((t.launches, t.launch_hits), (2, 3));
        assert_eq!(t.pairs.no_switch.count(), 1);
        assert_eq!(t.pairs.no_switch.median(), Some(10_000.0));
        assert_eq!(a.points[&0], PointCounts { hits: 2, calls: 2 });
        assert_eq!(a.points[&1], PointCounts { hits: 1, calls: 0 });
    }

    #[test]
    fn windows_follow_the_probe_manager() {
        let ms = 1_000_000;
        let mut w = WindowSim::new(200 * ms, 10_000 * ms);
        assert!(!w.in_window(5 * ms), "nothing found yet");
        w.library_found(1_000 * ms);
        assert!(
            !w.in_window(1_000 * ms),
            "not at once: the syncs' grace first"
        );
        assert!(w.in_window(2_000 * ms));
        assert!(w.in_window(2_199 * ms));
        assert!(!w.in_window(2_200 * ms));
        assert!(w.in_window(11_100 * ms), "the next period");
        // A new library restarts the schedule.
        w.library_found(5_000 * ms);
        assert!(w.in_window(6_100 * ms));
        assert!(!w.in_window(11_100 * ms));
        assert!(w.in_window(15_100 * ms));
        assert!(w.in_window(2_100 * ms), "earlier windows stay");
    }

    #[test]
    fn detection_is_replayed_from_syncs_and_windowed_launches() {
        let ms = 1_000_000;
        let mut sim = WindowSim::new(200 * ms, 10_000 * ms);
        sim.library_found(0);
        let mut a = Analyzer::new(Some(sim));
        // Launches outside the first window, then a sync at 3 s.
        a.on_event(&launch(500 * ms));
        a.on_event(&launch(600 * ms));
        a.on_event(&ev(3_000 * ms, EventKind::Sync, 7));
        let row = thread_row(&a.threads[&7], "gpu".into(), "cuda".into());
        assert_eq!(row.first_hit_ns, Some(500 * ms));
        assert_eq!(row.sim_classified_ns, Some(3_000 * ms));
        assert_eq!(row.detect_ms, Some(2_500.0));
        // A launcher that never syncs waits for the next window.
        let mut a = Analyzer::new(Some({
            let mut s = WindowSim::new(200 * ms, 10_000 * ms);
            s.library_found(0);
            s
        }));
        let mut e = launch(700 * ms);
        e.tid = 8;
        a.on_event(&e);
        e.ts_ns = 10_050 * ms;
        a.on_event(&e);
        assert_eq!(a.threads[&8].sim_classified_ns, Some(10_050 * ms));
    }

    #[test]
    fn classified_flag_records_detection() {
        let mut a = Analyzer::new(None);
        let mut e = launch(10);
        a.on_event(&e);
        assert_eq!(a.threads[&7].classified_ns, None);
        e.ts_ns = 20;
        e.flags = trace_event_flags_TRACE_F_CLASSIFIED;
        a.on_event(&e);
        e.ts_ns = 30;
        a.on_event(&e);
        assert_eq!(a.threads[&7].classified_ns, Some(20));
    }

    #[test]
    fn per_1k_rates() {
        let mut a = Analyzer::new(None);
        for i in 0..2000 {
            a.on_event(&launch(i * 1000));
        }
        a.on_event(&switch_out(5, 0));
        let mut irq = ev(6, EventKind::Irq, 7);
        irq.value = 1500;
        a.on_event(&irq);
        a.on_event(&ev(7, EventKind::Softirq, 7));
        let row = thread_row(&a.threads[&7], "gpu".into(), "cuda".into());
        assert_eq!(row.sched_per_1k, Some(0.5));
        assert_eq!(row.irq_per_1k, Some(1.0));
        assert_eq!(row.irq_ms, 0.0015);
    }

    #[test]
    fn csv_fields_are_quoted_when_needed() {
        assert_eq!(csv_field("python3"), "python3");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
    }

    #[test]
    fn csv_rows_have_the_header_columns() {
        let points = vec![PointInfo {
            symbol: "cuLaunchKernel".into(),
            library: "/x/libcuda.so.1".into(),
            kind: ProbeKind::Launch,
        }];
        let ncols = CSV_HEADER.split(',').count();
        assert!(CSV_HEADER.starts_with("timestamp_ns,event_type,pid,tid,comm,cpu,"));
        let mut out = String::new();
        let mut l = launch(123);
        l.comm = comm("a,b");
        csv_rows(&mut out, &l, &points, None);
        assert_eq!(
            out,
            "123,launch,100,7,\"a,b\",3,cuLaunchKernel,0,gpu,,,,,\n"
        );
        out.clear();
        let mut sw = switch_out(200, 0);
        sw.flags |= trace_event_flags_TRACE_F_NEXT;
        csv_rows(&mut out, &sw, &points, Some(42));
        let rows: Vec<_> = out.lines().collect();
        assert_eq!(rows.len(), 2);
        assert_eq!(
            rows[0],
            "200,switch_out,100,7,launcher,3,involuntary,,,R,1,hog,,"
        );
        assert_eq!(rows[1], "200,switch_in,1,1,hog,3,,,,R,7,launcher,,42");
        out.clear();
        let mut irq = ev(300, EventKind::Irq, 7);
        irq.arg = 24;
        irq.value = 900;
        irq.other = comm("nvme0q1");
        csv_rows(&mut out, &irq, &points, None);
        let mut soft = ev(301, EventKind::Softirq, 7);
        soft.arg = 3;
        soft.value = 50;
        csv_rows(&mut out, &soft, &points, None);
        let rows: Vec<_> = out.lines().collect();
        assert_eq!(rows[0], "300,irq,100,7,launcher,3,nvme0q1,,,,,,24,900");
        assert_eq!(rows[1], "301,softirq,100,7,launcher,3,NET_RX,,,,,,3,50");
        for r in rows {
            assert_eq!(r.split(',').count(), ncols, "{r}");
        }
    }

    #[test]
    fn task_states_read_like_ps() {
        assert_eq!(task_state(0, false), "R");
        assert_eq!(task_state(1, true), "R+");
        assert_eq!(task_state(1, false), "S");
        assert_eq!(task_state(2, false), "D");
        assert_eq!(task_state(0x402, false), "I");
        assert_eq!(task_state(0x80, false), "0x80");
    }

    #[test]
    fn softirq_names_match_the_kernel() {
        assert_eq!(softirq_name(1), "TIMER");
        assert_eq!(softirq_name(3), "NET_RX");
        assert_eq!(softirq_name(9), "RCU");
        assert_eq!(softirq_name(12), "VEC12");
    }

    #[test]
    fn raw_events_convert() {
        // SAFETY: plain old data; all zeroes is valid.
        let mut raw: express_event = unsafe { std::mem::zeroed() };
        raw.type_ = trace_event_type_TRACE_EV_SYNC;
        raw.ts_ns = 5;
        raw.tid = 9;
        raw.comm[0] = b'p' as _;
        let e = Event::from_raw(&raw).unwrap();
        assert_eq!(e.kind, EventKind::Sync);
        assert_eq!(comm_str(&e.comm), "p");
        raw.type_ = 99;
        assert!(Event::from_raw(&raw).is_none());
    }

    #[test]
    fn render_mentions_what_matters() {
        let mut a = Analyzer::new(None);
        for i in 0..3 {
            a.on_event(&launch(i * 1000));
        }
        let r = Report {
            duration_s: 1.0,
            probe_policy: "full".into(),
            events: true,
            pid_filter: None,
            start_ns: 0,
            end_ns: 1,
            probes_attached_ns: None,
            libraries: 1,
            probe_points: 2,
            launch_windows: 0,
            launch_windows_ns: vec![],
            lost_events: 0,
            threads: vec![thread_row(&a.threads[&7], "gpu".into(), "cuda".into())],
            points: vec![],
            irqs: vec![IrqRow {
                kind: "softirq".into(),
                number: 1,
                name: "TIMER".into(),
                count: 10,
                ms: 0.5,
            }],
            agent_steps: None,
        };
        let text = render(&r);
        assert!(text.contains("launcher"), "{text}");
        assert!(text.contains("launch pairs"), "{text}");
        assert!(text.contains("TIMER"), "{text}");
        assert!(text.contains("device IRQs only"), "{text}");
    }
}
