//! `scx_express trace`: the scheduler's CUDA probes, with sched_switch and
//! IRQ tracepoints, loaded WITHOUT a scheduler (src/bpf/trace.bpf.c is an
//! object of its own with no sched_ext in it). Shows which threads the
//! scheduler would classify, how often they launch and sync, and what the
//! CPU does to them: context switches, off-CPU time, IRQs, the cost of a
//! preemption between two launches, and how long detection takes.
//!
//! Discovery and attachment are the scheduler's own (src/discovery.rs,
//! src/probes.rs); the analysis is pure and lives in report.rs.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::mem::{size_of, MaybeUninit};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, RingBufferBuilder, UprobeOpts};
use log::{info, warn};

use crate::bpf_intf;
use crate::classify::{self, Source, TaskMap};
use crate::config::{ClassName, Config, Scope};
use crate::discovery::{self, Discovery};
use crate::probes::{Attacher, ProbeCounts, ProbeKind, ProbeManager, ProbePoint};
use report::{Analyzer, Event, IrqRow, PointInfo, PointRow, Report, ThreadRow, WindowSim};
use skel::{TraceProgs, TraceSkel, TraceSkelBuilder};

pub mod report;
mod skel;
pub mod steps;

const MS: u64 = 1_000_000;
/// Longest wait for events; the ring buffer is read at least this often.
const POLL: Duration = Duration::from_millis(100);

/// Which launch probes `trace` attaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProbePolicy {
    /// Every launch entry point, all the time: exact counts, full probe cost.
    Full,
    /// Exactly what the scheduler attaches: sync, copy and marker probes all
    /// the time, launch probes in [classify] launch windows.
    Scheduler,
}

impl ProbePolicy {
    fn as_str(self) -> &'static str {
        match self {
            ProbePolicy::Full => "full",
            ProbePolicy::Scheduler => "scheduler",
        }
    }
}

#[derive(Debug, Clone, clap::Args)]
pub struct TraceArgs {
    /// Stop after S seconds (default: at Ctrl-C or SIGTERM).
    #[arg(long, value_name = "S")]
    pub duration: Option<f64>,
    /// Write every event to FILE as CSV, one row each. Columns: timestamp_ns
    /// (CLOCK_MONOTONIC), event_type (launch, sync, mark, switch_out,
    /// switch_in, irq, softirq), pid, tid, comm, cpu, detail (symbol, switch
    /// kind, IRQ name), nested, class, state, other_tid, other_comm, irq,
    /// duration_ns (IRQ time; off-CPU time for switch_in). Agent steps
    /// are not rows: they are summed up in the report.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Also write the report as JSON to FILE ("-": stdout, instead of the table).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Trace only this process (its threads all get switch and IRQ events).
    #[arg(long, value_name = "PID")]
    pub pid: Option<i32>,
    /// Which launch probes to attach.
    #[arg(long, value_enum, default_value = "full", value_name = "POLICY")]
    pub probe_policy: ProbePolicy,
    /// Attach the probes and nothing else: no events, no tracepoints, so
    /// the probes cost exactly what the scheduler's cost. Per-thread counts
    /// are read at the end from live threads.
    #[arg(long, conflicts_with = "csv")]
    pub no_events: bool,
}

/// Attaches uprobes with trace.bpf.c's programs, each with a cookie naming
/// its probe point (library and symbol).
struct TraceAttacher<'s, 'o> {
    progs: &'s TraceProgs<'o>,
    cookies: HashMap<(PathBuf, u64), u64>,
    points: Rc<RefCell<Vec<PointInfo>>>,
    /// Library paths as processes map them, by the path we attach through.
    names: HashMap<PathBuf, String>,
}

impl Attacher for TraceAttacher<'_, '_> {
    type Link = libbpf_rs::Link;

    fn attach(&mut self, path: &Path, point: &ProbePoint) -> Result<libbpf_rs::Link> {
        let key = (path.to_path_buf(), point.offset);
        let cookie = match self.cookies.get(&key) {
            Some(&c) => c,
            None => {
                let mut points = self.points.borrow_mut();
                let c = points.len() as u64;
                if c >= bpf_intf::trace_consts_TRACE_MAX_POINTS as u64 {
                    bail!("too many probe points");
                }
                points.push(PointInfo {
                    symbol: point.symbol.clone(),
                    library: self
                        .names
                        .get(path)
                        .cloned()
                        .unwrap_or_else(|| path.display().to_string()),
                    kind: point.kind,
                });
                self.cookies.insert(key, c);
                c
            }
        };
        let prog = match point.kind {
            ProbeKind::Launch => &self.progs.trace_launch,
            ProbeKind::Sync => &self.progs.trace_sync,
            ProbeKind::Mark(ClassName::Agent) => &self.progs.trace_mark_agent,
            ProbeKind::Mark(ClassName::Gpu) => &self.progs.trace_mark_gpu,
            ProbeKind::Mark(ClassName::Normal) => &self.progs.trace_mark_normal,
        };
        // pid -1: a pid-filtered uprobe would follow one thread's perf
        // event; the BPF side filters on the whole process (target_tgid).
        let opts = UprobeOpts {
            cookie,
            ..Default::default()
        };
        Ok(prog.attach_uprobe_with_opts(-1, path, point.offset as usize, opts)?)
    }
}

/// Where events go: the analysis, and the CSV file if asked for.
struct Sink {
    analyzer: Analyzer,
    csv: Option<BufWriter<File>>,
    csv_error: Option<std::io::Error>,
    line: String,
    points: Rc<RefCell<Vec<PointInfo>>>,
}

impl Sink {
    fn take(&mut self, data: &[u8]) {
        // Both records have `type` at offset 8; steps are not CSV rows.
        let ty = data
            .get(8..12)
            .map(|b| u32::from_ne_bytes(b.try_into().unwrap()));
        if ty == Some(bpf_intf::trace_event_type_TRACE_EV_STEP) {
            if data.len() >= size_of::<bpf_intf::express_step>() {
                // SAFETY: the BPF side writes a struct express_step.
                let raw = unsafe {
                    std::ptr::read_unaligned(data.as_ptr() as *const bpf_intf::express_step)
                };
                let (step, comm) = steps::Step::from_raw(&raw);
                self.analyzer.steps.push(step, comm);
            }
            return;
        }
        if data.len() < size_of::<bpf_intf::express_event>() {
            return;
        }
        // SAFETY: the BPF side writes a struct express_event.
        let raw =
            unsafe { std::ptr::read_unaligned(data.as_ptr() as *const bpf_intf::express_event) };
        let Some(e) = Event::from_raw(&raw) else {
            return;
        };
        let offcpu = self.analyzer.on_event(&e);
        if let Some(w) = &mut self.csv {
            self.line.clear();
            report::csv_rows(&mut self.line, &e, &self.points.borrow(), offcpu);
            if let Err(err) = w.write_all(self.line.as_bytes()) {
                self.csv_error.get_or_insert(err);
            }
        }
    }
}

/// The class the scheduler would give a thread now, and its source.
fn live_class(
    classes: &TaskMap,
    procs: &libbpf_rs::MapHandle,
    pid: i32,
    tid: i32,
    now: u64,
) -> Option<(ClassName, String, u64, u64)> {
    let ci = classes.class_info(tid).ok().flatten()?;
    if ci.source != 0 {
        return Some((
            classify::effective_class(&ci, now),
            Source::from_raw(ci.source).as_str().into(),
            ci.launches,
            ci.syncs,
        ));
    }
    let key = (pid as u32).to_ne_bytes();
    let pci = procs
        .lookup(&key, MapFlags::ANY)
        .ok()
        .flatten()
        .and_then(|v| classify::read_pod::<bpf_intf::task_class_info>(&v));
    Some(match pci {
        Some(p) => (
            classify::effective_class(&p, now),
            "process".into(),
            ci.launches,
            ci.syncs,
        ),
        None => (ClassName::Normal, "-".into(), ci.launches, ci.syncs),
    })
}

fn sum_percpu_totals(map: &dyn MapCore, key: u32) -> (u64, u64) {
    let Ok(Some(vals)) = map.lookup_percpu(&key.to_ne_bytes(), MapFlags::ANY) else {
        return (0, 0);
    };
    vals.iter()
        .filter_map(|v| classify::read_pod::<bpf_intf::express_irq_total>(v))
        .fold((0, 0), |(c, n), t| (c + t.count, n + t.ns))
}

/// Records when a launch window opened or closed (CLOCK_MONOTONIC ns).
fn note_window(windows: &mut Vec<[u64; 2]>, was_open: bool, open: bool) {
    match (was_open, open) {
        (false, true) => windows.push([classify::monotonic_ns(), 0]),
        (true, false) => {
            if let Some(w) = windows.last_mut() {
                w[1] = classify::monotonic_ns();
            }
        }
        _ => {}
    }
}

/// Runs `scx_express trace` until `--duration` or `shutdown`: load the
/// probes-only object, trace, then build the report from the events and
/// the maps.
pub fn run(args: &TraceArgs, cfg: &Config, shutdown: &AtomicBool, verbose: bool) -> Result<()> {
    crate::preflight::require_root("scx_express trace", "it loads BPF programs")?;
    let duration = check_args(args)?;
    let mut open_object = MaybeUninit::uninit();
    let skel = load(args, cfg, verbose, &mut open_object)?;
    let tp_links = attach_tracepoints(&skel, args)?;
    let points: Rc<RefCell<Vec<PointInfo>>> = Rc::default();
    let sink = Rc::new(RefCell::new(open_sink(args, cfg, &points)?));
    let traced = trace(
        args, cfg, &skel, &sink, &points, tp_links, duration, shutdown,
    )?;

    let mut sink = Rc::try_unwrap(sink)
        .map_err(|_| anyhow::anyhow!("event sink still shared"))?
        .into_inner();
    if let Some(mut w) = sink.csv.take() {
        w.flush()?;
    }
    if let Some(e) = sink.csv_error {
        return Err(e).context("writing the CSV file");
    }
    let lost = skel
        .maps
        .bss_data
        .as_ref()
        .map(|b| unsafe { std::ptr::read_volatile(&b.dropped_events) })
        .unwrap_or(0);
    if lost > 0 {
        warn!("{lost} events did not fit in the ring buffer and were lost");
    }

    let analyzer = &sink.analyzer;
    let r = Report {
        duration_s: (traced.end_ns - traced.start_ns) as f64 / 1e9,
        probe_policy: args.probe_policy.as_str().into(),
        events: !args.no_events,
        pid_filter: args.pid,
        start_ns: traced.start_ns,
        end_ns: traced.end_ns,
        probes_attached_ns: traced.attached_ns,
        libraries: traced.counts.libraries,
        probe_points: points.borrow().len() as u64,
        launch_windows: traced.counts.windows,
        launch_windows_ns: traced.windows,
        lost_events: lost,
        threads: thread_rows(args, cfg, &skel, analyzer, traced.end_ns)?,
        points: point_rows(args, &points.borrow(), analyzer),
        irqs: if args.no_events {
            Vec::new()
        } else {
            irq_rows(&skel)
        },
        agent_steps: steps::step_report(&analyzer.steps),
    };
    emit(args, &r)
}

/// Checks `--pid` and returns `--duration`.
fn check_args(args: &TraceArgs) -> Result<Option<Duration>> {
    if let Some(p) = args.pid {
        if p <= 0 || !Path::new("/proc").join(p.to_string()).exists() {
            bail!("--pid {p}: no such process");
        }
    }
    args.duration
        .map(|s| {
            Duration::try_from_secs_f64(s)
                .ok()
                .filter(|d| !d.is_zero())
                .with_context(|| format!("--duration takes a positive number of seconds, got {s}"))
        })
        .transpose()
}

/// Opens, configures and loads the trace BPF object.
fn load<'o>(
    args: &TraceArgs,
    cfg: &Config,
    verbose: bool,
    open_object: &'o mut MaybeUninit<libbpf_rs::OpenObject>,
) -> Result<TraceSkel<'o>> {
    let mut builder = TraceSkelBuilder::default();
    builder.obj_builder.debug(verbose);
    let mut open = builder
        .open(open_object)
        .context("opening the trace BPF object")?;
    let rodata = open
        .maps
        .rodata_data
        .as_mut()
        .context("trace BPF object has no rodata")?;
    rodata.target_tgid = args.pid.unwrap_or(0) as u32;
    rodata.emit_events = !args.no_events;
    rodata.idle_demote_ns = cfg.classify.idle_demote_ms * MS;
    rodata.class_scope_process[bpf_intf::task_class_CLASS_GPU as usize] =
        cfg.classes.gpu.scope == Scope::Process;
    rodata.class_scope_process[bpf_intf::task_class_CLASS_AGENT as usize] =
        cfg.classes.agent.scope == Scope::Process;
    if args.no_events {
        // No events: keep the ring buffer small.
        open.maps.events.set_max_entries(4096)?;
    }
    open.load().map_err(|e| {
        anyhow::Error::from(e).context(format!(
            "loading the trace BPF object (needs BTF and uprobes){}",
            crate::preflight::load_failure_hints()
                .iter()
                .map(|h| format!("\n  - {h}"))
                .collect::<String>()
        ))
    })
}

/// Tracepoints: context switches and IRQs (none with `--no-events`).
fn attach_tracepoints(skel: &TraceSkel<'_>, args: &TraceArgs) -> Result<Vec<libbpf_rs::Link>> {
    let mut tp_links = Vec::new();
    if args.no_events {
        return Ok(tp_links);
    }
    for (name, prog) in [
        ("sched_switch", &skel.progs.trace_sched_switch),
        ("sched_wakeup", &skel.progs.trace_sched_wakeup),
        ("handle_mm_fault entry", &skel.progs.trace_fault_entry),
        ("handle_mm_fault exit", &skel.progs.trace_fault_exit),
        ("irq_handler_entry", &skel.progs.trace_irq_entry),
        ("irq_handler_exit", &skel.progs.trace_irq_exit),
        ("softirq_entry", &skel.progs.trace_softirq_entry),
        ("softirq_exit", &skel.progs.trace_softirq_exit),
    ] {
        match prog.attach() {
            Ok(l) => tp_links.push(l),
            Err(e) if name == "sched_switch" => {
                return Err(e).context("attaching the sched_switch tracepoint")
            }
            Err(e) if name == "sched_wakeup" => warn!("tracepoint {name}: {e} (no agent steps)"),
            Err(e) if name.starts_with("handle_mm_fault") => {
                warn!("{name}: {e} (agent steps show no page faults)")
            }
            Err(e) => warn!("tracepoint {name}: {e} (no IRQ statistics)"),
        }
    }
    Ok(tp_links)
}

/// The analysis, with the scheduler's window replay when every launch is
/// probed, and the CSV file if asked for.
fn open_sink(args: &TraceArgs, cfg: &Config, points: &Rc<RefCell<Vec<PointInfo>>>) -> Result<Sink> {
    // With every launch probed, replay the scheduler's windows to tell how
    // long its probe policy would take to classify each thread.
    let sim = (args.probe_policy == ProbePolicy::Full).then(|| {
        WindowSim::new(
            cfg.classify.launch_window_ms * MS,
            cfg.classify.launch_period_ms * MS,
        )
    });
    let csv = match &args.csv {
        Some(p) => {
            let mut w = BufWriter::with_capacity(
                1 << 20,
                File::create(p).with_context(|| format!("creating {}", p.display()))?,
            );
            writeln!(w, "{}", report::CSV_HEADER)?;
            Some(w)
        }
        None => None,
    };
    Ok(Sink {
        analyzer: Analyzer::new(sim),
        csv,
        csv_error: None,
        line: String::new(),
        points: points.clone(),
    })
}

/// What the tracing phase leaves for the report.
struct Traced {
    start_ns: u64,
    end_ns: u64,
    /// When the first probe was attached.
    attached_ns: Option<u64>,
    /// Launch windows, [open, close] (CLOCK_MONOTONIC ns).
    windows: Vec<[u64; 2]>,
    counts: ProbeCounts,
}

/// Discovers and probes libraries as the scheduler does and feeds events
/// to `sink` until `--duration` or `shutdown`; then detaches everything
/// (`tp_links` too) and drains the ring buffer.
#[allow(clippy::too_many_arguments)] // the phases' shared state, passed once
fn trace(
    args: &TraceArgs,
    cfg: &Config,
    skel: &TraceSkel<'_>,
    sink: &Rc<RefCell<Sink>>,
    points: &Rc<RefCell<Vec<PointInfo>>>,
    tp_links: Vec<libbpf_rs::Link>,
    duration: Option<Duration>,
    shutdown: &AtomicBool,
) -> Result<Traced> {
    // No exec filter: the tracer has no exec tracepoint; it reads every new process.
    let (found_tx, new_libraries) = std::sync::mpsc::channel();
    let _scanner = discovery::start_discovery(
        &cfg.classify,
        libbpf_rs::MapHandle::try_from(&skel.maps.task_class)?,
        None,
        found_tx,
    )?;
    let mut probes = match args.probe_policy {
        ProbePolicy::Full => ProbeManager::always_on(),
        ProbePolicy::Scheduler => ProbeManager::new(
            Duration::from_millis(cfg.classify.launch_window_ms),
            Duration::from_millis(cfg.classify.launch_period_ms),
        ),
    };
    let mut attacher = TraceAttacher {
        progs: &skel.progs,
        cookies: HashMap::new(),
        points: points.clone(),
        names: HashMap::new(),
    };
    let ring = event_ring(skel, sink)?;
    let mut marks = MarkSync::new(skel)?;

    let start_ns = classify::monotonic_ns();
    let started = Instant::now();
    log_start(args, duration);
    let mut attached_ns = None;
    let mut windows: Vec<[u64; 2]> = Vec::new();
    while !shutdown.load(Ordering::Relaxed) && duration.is_none_or(|d| started.elapsed() < d) {
        // Wake up in time to open or close a launch window on schedule.
        if let Err(e) = ring.poll(probes.poll_timeout(POLL)) {
            if e.kind() != libbpf_rs::ErrorKind::Interrupted {
                return Err(e).context("polling the trace ring buffer");
            }
        }
        // Events come without wakeups (see trace.bpf.c): read them now.
        ring.consume()?;
        while let Ok(msg) = new_libraries.try_recv() {
            let was_open = probes.counts().window_open;
            on_discovery(msg, &mut probes, &mut attacher, sink);
            note_window(&mut windows, was_open, probes.counts().window_open);
            if attached_ns.is_none() && probes.counts().permanent > 0 {
                attached_ns = Some(classify::monotonic_ns());
            }
        }
        marks.tick();
        let was_open = probes.counts().window_open;
        probes.tick(&mut attacher, Instant::now());
        note_window(&mut windows, was_open, probes.counts().window_open);
    }
    let end_ns = classify::monotonic_ns();
    if let Some(w) = windows.last_mut().filter(|w| w[1] == 0) {
        w[1] = end_ns;
    }
    let counts = probes.counts();
    // Detach, then drain what is left.
    drop(probes);
    drop(tp_links);
    ring.consume()?;
    Ok(Traced {
        start_ns,
        end_ns,
        attached_ns,
        windows,
        counts,
    })
}

/// Copies the classes `scx_express mark` set in the running scheduler's
/// task-class map (pinned) into the tracer's, once a second, so a thread
/// marked agent there gets agent steps here; a mark cleared there is
/// cleared here. Nothing while no scheduler runs. Costs a /proc walk and
/// two map lookups per thread per second.
struct MarkSync {
    ours: TaskMap,
    last: Option<Instant>,
}

impl MarkSync {
    const EVERY: Duration = Duration::from_secs(1);

    fn new(skel: &TraceSkel<'_>) -> Result<Self> {
        Ok(Self {
            ours: TaskMap::new(libbpf_rs::MapHandle::try_from(&skel.maps.task_class)?),
            last: None,
        })
    }

    fn tick(&mut self) {
        if self.last.is_some_and(|l| l.elapsed() < Self::EVERY) {
            return;
        }
        self.last = Some(Instant::now());
        let Ok(sched) = TaskMap::open_pinned(classify::PIN_TASK_CLASS) else {
            return;
        };
        for (_, tid) in classify::all_threads(Path::new("/proc")) {
            let cli = sched
                .class_info(tid)
                .ok()
                .flatten()
                .filter(|c| c.source == Source::Cli as u32);
            let class = match cli.map(|c| c.class) {
                None => {
                    let _ = self.ours.clear_class(tid, Source::Cli);
                    continue;
                }
                Some(bpf_intf::task_class_CLASS_AGENT) => ClassName::Agent,
                Some(bpf_intf::task_class_CLASS_GPU) => ClassName::Gpu,
                Some(_) => ClassName::Normal,
            };
            // A thread that exited meanwhile is no error.
            let _ = self.ours.set_class(tid, class, Source::Cli);
        }
    }
}

/// Says what is traced, how and for how long.
fn log_start(args: &TraceArgs, duration: Option<Duration>) {
    info!(
        "tracing{} with the {} probe policy{}; Ctrl-C stops",
        args.pid.map(|p| format!(" pid {p}")).unwrap_or_default(),
        args.probe_policy.as_str(),
        duration
            .map(|d| format!(" for {:.1} s", d.as_secs_f64()))
            .unwrap_or_default()
    );
}

/// The events ring buffer, read into `sink`.
fn event_ring(
    skel: &TraceSkel<'_>,
    sink: &Rc<RefCell<Sink>>,
) -> Result<libbpf_rs::RingBuffer<'static>> {
    let mut rb = RingBufferBuilder::new();
    let s2 = sink.clone();
    rb.add(&skel.maps.events, move |data: &[u8]| {
        s2.borrow_mut().take(data);
        0
    })?;
    Ok(rb.build()?)
}

/// A library or process found by discovery: probe the library; a new
/// process opens a launch window, as in the scheduler.
fn on_discovery(
    msg: Discovery,
    probes: &mut ProbeManager<libbpf_rs::Link>,
    attacher: &mut TraceAttacher<'_, '_>,
    sink: &RefCell<Sink>,
) {
    let lib = match msg {
        Discovery::Library(lib) => lib,
        Discovery::NewProcess(_) => {
            // The window shows in `windows`.
            probes.request_window(Instant::now());
            return;
        }
        Discovery::Unserved(unserved) => {
            probes.set_unserved(unserved);
            return;
        }
        // Only the scheduler's probe thread is sent these.
        Discovery::Wake => return,
    };
    if lib.points.iter().any(|p| p.kind == ProbeKind::Launch) {
        sink.borrow_mut()
            .analyzer
            .library_found(classify::monotonic_ns());
    }
    attacher
        .names
        .insert(lib.open_path.clone(), lib.mapped_path.clone());
    probes.add_library(attacher, lib);
}

/// One row per thread of interest, busiest launcher first.
fn thread_rows(
    args: &TraceArgs,
    cfg: &Config,
    skel: &TraceSkel<'_>,
    analyzer: &Analyzer,
    end_ns: u64,
) -> Result<Vec<ThreadRow>> {
    let classes = TaskMap::new(libbpf_rs::MapHandle::try_from(&skel.maps.task_class)?);
    let procs = libbpf_rs::MapHandle::try_from(&skel.maps.proc_class)?;
    let now = classify::monotonic_ns();
    let mut threads = if args.no_events {
        live_thread_rows(args, &classes, &procs, now)?
    } else {
        let demote_ns = cfg.classify.idle_demote_ms * MS;
        let mut rows = Vec::new();
        for t in analyzer.threads.values() {
            let cuda = t.launch_hits + t.sync_hits + t.marks > 0;
            if !cuda && args.pid.is_none() {
                continue;
            }
            let (class, source) = match live_class(&classes, &procs, t.pid, t.tid, now) {
                Some((c, s, _, _)) => (c.as_str().to_string(), s),
                None => {
                    // Exited: its last class, lapsed as the scheduler would.
                    let lapsed =
                        t.marks == 0 && t.last_hit_ns.is_none_or(|l| l + demote_ns < end_ns);
                    let c = if lapsed {
                        "normal"
                    } else {
                        report::class_name(t.last_class)
                    };
                    (c.to_string(), "exited".to_string())
                }
            };
            rows.push(report::thread_row(t, class, source));
        }
        rows
    };
    threads.sort_by(|a, b| {
        (b.launches + b.launch_hits, b.syncs)
            .cmp(&(a.launches + a.launch_hits, a.syncs))
            .then(a.tid.cmp(&b.tid))
    });
    Ok(threads)
}

/// `--no-events`: only live threads can be asked, from the class maps.
fn live_thread_rows(
    args: &TraceArgs,
    classes: &TaskMap,
    procs: &libbpf_rs::MapHandle,
    now: u64,
) -> Result<Vec<ThreadRow>> {
    let proc_root = Path::new("/proc");
    let all = match args.pid {
        Some(p) => classify::threads_of(proc_root, p)?
            .into_iter()
            .map(|t| (p, t))
            .collect(),
        None => classify::all_threads(proc_root),
    };
    let mut threads = Vec::new();
    for (pid, tid) in all {
        let Some((class, source, launches, syncs)) = live_class(classes, procs, pid, tid, now)
        else {
            continue;
        };
        if launches + syncs == 0 && source == "-" {
            continue;
        }
        let comm =
            std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")).unwrap_or_default();
        let t = report::ThreadStats::from_hits(pid, tid, comm.trim_end(), launches, syncs);
        let mut row = report::thread_row(&t, class.as_str().into(), source);
        // Without events nothing is known about switches or IRQs.
        row.sched_per_1k = None;
        row.irq_per_1k = None;
        threads.push(row);
    }
    Ok(threads)
}

/// One row per probe point, with its hits.
fn point_rows(args: &TraceArgs, points: &[PointInfo], analyzer: &Analyzer) -> Vec<PointRow> {
    points
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let c = analyzer
                .points
                .get(&(i as u64))
                .copied()
                .unwrap_or_default();
            PointRow {
                symbol: p.symbol.clone(),
                library: p.library.clone(),
                kind: match p.kind {
                    ProbeKind::Launch => "launch".into(),
                    ProbeKind::Sync => "sync".into(),
                    ProbeKind::Mark(c) => format!("mark:{}", c.as_str()),
                },
                hits: c.hits,
                calls: c.calls,
            }
        })
        .filter(|p| p.hits > 0 || !args.no_events)
        .collect()
}

/// One row per hard IRQ line and softirq vector that fired.
fn irq_rows(skel: &TraceSkel<'_>) -> Vec<IrqRow> {
    let mut names = HashMap::new();
    for key in skel.maps.irq_names.keys() {
        if let Ok(Some(v)) = skel.maps.irq_names.lookup(&key, MapFlags::ANY) {
            let n = u32::from_ne_bytes(key[..4].try_into().unwrap());
            let mut c = [0u8; 16];
            c.copy_from_slice(&v[..16]);
            names.insert(n, report::comm_str(&c));
        }
    }
    let hard = (0..bpf_intf::trace_consts_TRACE_MAX_IRQS).map(|n| {
        let name = names.get(&n).cloned().unwrap_or_default();
        ("hardirq", n, name, &skel.maps.hardirq_totals)
    });
    let soft = (0..bpf_intf::trace_consts_TRACE_MAX_SOFTIRQS).map(|v| {
        (
            "softirq",
            v,
            report::softirq_name(v as u64),
            &skel.maps.softirq_totals,
        )
    });
    let mut irqs = Vec::new();
    for (kind, number, name, map) in hard.chain(soft) {
        let (count, ns) = sum_percpu_totals(map, number);
        if count > 0 {
            irqs.push(IrqRow {
                kind: kind.into(),
                number: number as u64,
                name,
                count,
                ms: ns as f64 / 1e6,
            });
        }
    }
    irqs
}

/// Prints the report as a table, and/or writes it as JSON (`--json`).
fn emit(args: &TraceArgs, r: &Report) -> Result<()> {
    match args.json.as_deref() {
        Some(p) if p == Path::new("-") => println!("{}", serde_json::to_string_pretty(r)?),
        Some(p) => {
            std::fs::write(p, serde_json::to_string_pretty(r)? + "\n")
                .with_context(|| format!("writing {}", p.display()))?;
            print!("{}", report::render(r));
        }
        None => print!("{}", report::render(r)),
    }
    Ok(())
}
