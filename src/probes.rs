//! CUDA and marker uprobes: resolve the configured symbols in a library's
//! ELF file into probe points, and own the probes from attach to detach
//! (the BPF programs of classify.bpf.c, permanent probes, launch windows,
//! the probe thread). Which libraries to probe, and when a new process
//! wants a launch window, is found by discovery.rs, which imports this
//! module; this one never names discovery's types (see [`ProbeRequest`]).
//!
//! Cost model: a uprobe traps on every call (about 1 µs on the GPU host).
//! Sync and device-to-host copy entry points are called a few dozen times
//! per decode step and stay probed. Launch entry points are called hundreds
//! of times per step, so their probes are attached only in short windows
//! (`launch_window_ms`): for a new CUDA process that its syncs did not
//! classify, and every `launch_period_ms` (32 times less often while every
//! CUDA process has a gpu thread): enough to classify a launcher that never
//! syncs, at a small duty cycle.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use log::{debug, info, warn};
use object::read::ReadCache;
use object::{Object, ObjectSegment, ObjectSymbol};

use crate::config::{ClassName, ClassifyConfig};

/// Which BPF program a probe runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProbeKind {
    Launch,
    Sync,
    Mark(ClassName),
}

/// One probe to attach: a file offset in a library, and what it means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbePoint {
    pub symbol: String,
    pub offset: u64,
    pub kind: ProbeKind,
}

/// A newly seen library (by device and inode) and its probe points.
#[derive(Debug, Clone)]
pub struct FoundLibrary {
    pub dev: u64,
    pub ino: u64,
    /// The library, held open so later attaches (launch windows) work after
    /// the process that mapped it has exited; attach through `open_path`,
    /// /proc/self/fd/N, which resolves to the same inode.
    pub file: std::sync::Arc<File>,
    pub open_path: PathBuf,
    /// The path as the mapping process sees it.
    pub mapped_path: String,
    pub points: Vec<ProbePoint>,
}

/// Exported, defined function symbols of an ELF file, with the file offset
/// a uprobe needs. Reads only the parts of the file it needs.
pub fn elf_function_offsets(path: &Path) -> Result<HashMap<String, u64>> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let cache = ReadCache::new(file);
    let obj =
        object::File::parse(&cache).with_context(|| format!("parsing ELF {}", path.display()))?;
    let segments: Vec<(u64, u64, u64)> = obj
        .segments()
        .map(|s| {
            let (off, _) = s.file_range();
            (s.address(), s.size(), off)
        })
        .collect();
    let mut out = HashMap::new();
    for sym in obj.dynamic_symbols() {
        if sym.kind() != object::SymbolKind::Text || sym.is_undefined() || !sym.is_global() {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        // Versioned names may carry "@VERSION"; the uprobe wants the bare name.
        let name = name.split('@').next().unwrap_or(name);
        let addr = sym.address();
        let Some(offset) = segments
            .iter()
            .find(|(va, size, _)| addr >= *va && addr < va + size)
            .map(|(va, _, off)| addr - va + off)
        else {
            continue;
        };
        out.entry(name.to_string()).or_insert(offset);
    }
    Ok(out)
}

fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Matches a library pattern against a mapped path: patterns with a '/'
/// match the whole path, others the file name.
pub fn library_matches(pattern: &glob::Pattern, path: &str) -> bool {
    if pattern.as_str().contains('/') {
        pattern.matches(path)
    } else {
        pattern.matches(basename(path))
    }
}

/// What the scanner looks for, compiled from the config.
#[derive(Debug, Clone)]
pub struct ProbeSpec {
    pub cuda_libraries: Vec<glob::Pattern>,
    pub launch_symbols: Vec<String>,
    pub sync_symbols: Vec<String>,
    /// (library or binary pattern, symbol, class)
    pub markers: Vec<(glob::Pattern, String, ClassName)>,
}

impl ProbeSpec {
    pub fn from_config(c: &ClassifyConfig) -> Result<Self> {
        let pat = |p: &str| glob::Pattern::new(p).with_context(|| format!("bad pattern {p:?}"));
        Ok(Self {
            cuda_libraries: c.libraries.iter().map(|p| pat(p)).collect::<Result<_>>()?,
            launch_symbols: c.launch_symbols.clone(),
            sync_symbols: c.sync_symbols.clone(),
            markers: c
                .markers
                .iter()
                .map(|m| Ok((pat(&m.library)?, m.symbol.clone(), m.class)))
                .collect::<Result<_>>()?,
        })
    }

    /// Whether a mapped library or binary is one to probe (CUDA or marker).
    pub fn wanted(&self, path: &str) -> bool {
        self.cuda_libraries.iter().any(|p| library_matches(p, path))
            || self
                .markers
                .iter()
                .any(|(p, _, _)| library_matches(p, path))
    }

    /// The probe points of one library, from its exported functions.
    pub fn points_for(&self, mapped_path: &str, exports: &HashMap<String, u64>) -> Vec<ProbePoint> {
        let mut points = Vec::new();
        if self
            .cuda_libraries
            .iter()
            .any(|p| library_matches(p, mapped_path))
        {
            let groups = [
                (&self.launch_symbols, ProbeKind::Launch),
                (&self.sync_symbols, ProbeKind::Sync),
            ];
            for (symbols, kind) in groups {
                for s in symbols {
                    if let Some(&offset) = exports.get(s) {
                        points.push(ProbePoint {
                            symbol: s.clone(),
                            offset,
                            kind,
                        });
                    }
                }
            }
        }
        for (pattern, symbol, class) in &self.markers {
            if library_matches(pattern, mapped_path) {
                if let Some(&offset) = exports.get(symbol) {
                    points.push(ProbePoint {
                        symbol: symbol.clone(),
                        offset,
                        kind: ProbeKind::Mark(*class),
                    });
                }
            }
        }
        points
    }
}

/// Name of the registry in libexpress_mark.so
/// (workloads/marker/express_mark.c), where marks made before our uprobes
/// were attached are kept; discovery.rs reads it (`read_mark_registry`).
pub const MARK_REGISTRY_SYMBOL: &str = "express_mark_registry";

/// Where the mark registry lives relative to the library's load address.
pub fn elf_registry_offset(path: &Path) -> Result<Option<u64>> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let cache = ReadCache::new(file);
    let obj =
        object::File::parse(&cache).with_context(|| format!("parsing ELF {}", path.display()))?;
    let base = obj.segments().map(|s| s.address()).min().unwrap_or(0);
    Ok(obj
        .dynamic_symbols()
        .find(|s| s.name().is_ok_and(|n| n == MARK_REGISTRY_SYMBOL) && !s.is_undefined())
        .map(|s| s.address() - base))
}

/// Attaches one probe point; the link detaches it when dropped.
pub trait Attacher {
    type Link;
    fn attach(&mut self, path: &Path, point: &ProbePoint) -> Result<Self::Link>;
}

/// Counters for stats and tests.
#[derive(Debug, Default, Clone, Copy)]
pub struct ProbeCounts {
    pub libraries: u64,
    pub permanent: u64,
    pub window_open: bool,
    pub windows: u64,
}

/// Detaches uprobes all at once, each on a thread of its own. Removing a
/// uprobe waits for an RCU grace period: about 100 ms each on the GPU host
/// and on 6.18 here, one after another when done in a loop, so closing a
/// 14-probe launch window that way left probes attached for up to 1.4 s
/// more (at the full probe cost) and blocked the caller as long.
fn detach_all<L: Send>(links: Vec<L>) {
    if links.len() <= 1 {
        return;
    }
    std::thread::scope(|s| {
        for l in links {
            // If no thread can be made, the closure (and the link) is
            // dropped here, in turn.
            let _ = std::thread::Builder::new()
                .name("express-unprobe".into())
                .spawn_scoped(s, move || drop(l));
        }
    });
}

/// Shortest pause between a launch window and one opened early for a new
/// process (`ProbeManager::request_window`).
pub const EXTRA_WINDOW_GAP: Duration = Duration::from_secs(1);

/// While every process that maps a probed CUDA library has a gpu thread
/// (discovery.rs says so: `set_unserved`), periodic launch windows come
/// this many times less often (every 320 s instead of 10 s by default).
/// Launchers that sync are classified by their syncs; the windows are for
/// those that never do, and such a launcher's process has no gpu thread
/// (until a window finds it, and again `idle_demote_ms` after). The one
/// left to the long period: a second launcher that never syncs, in a
/// process whose first one does.
pub const SERVED_PERIOD_FACTOR: u32 = 32;

/// Owns the uprobe links: permanent ones (sync, markers) and the launch
/// probes of the current window.
pub struct ProbeManager<L: Send + 'static> {
    /// Libraries held open: their /proc/self/fd paths must stay valid.
    files: Vec<std::sync::Arc<File>>,
    launch_points: Vec<(PathBuf, ProbePoint)>,
    permanent: Vec<L>,
    window: Vec<L>,
    window_len: Duration,
    /// `launch_period_ms`.
    period: Duration,
    /// Some process that maps a probed CUDA library has no gpu thread past
    /// its grace (or discovery has not said otherwise yet): periodic
    /// windows come every `period`, as it may hold a launcher that never
    /// syncs, or one that has not launched yet (a JIT compiling its
    /// kernels); otherwise `SERVED_PERIOD_FACTOR` times less often.
    unserved: bool,
    /// The periodic schedule counts from here: the first library with
    /// launch points, then each window's opening.
    periodic_from: Instant,
    /// A window asked for a new process (`request_window`), not before.
    requested: Option<Instant>,
    window_end: Option<Instant>,
    last_window_end: Option<Instant>,
    /// Launch probes stay attached, like the others (`scx_express trace
    /// --probe-policy full`): exact counts at the full probe cost.
    launch_always: bool,
    /// Closed windows go to a thread that detaches them (`detach_all`), so
    /// the caller (the scheduler's loop) never waits on it.
    reaper: Option<(std::sync::mpsc::Sender<Vec<L>>, std::thread::JoinHandle<()>)>,
    counts: ProbeCounts,
}

impl<L: Send + 'static> Drop for ProbeManager<L> {
    fn drop(&mut self) {
        let mut all = std::mem::take(&mut self.permanent);
        all.append(&mut self.window);
        detach_all(all);
        if let Some((tx, thread)) = self.reaper.take() {
            drop(tx);
            let _ = thread.join();
        }
    }
}

impl<L: Send + 'static> ProbeManager<L> {
    pub fn new(window_len: Duration, period: Duration) -> Self {
        Self {
            files: Vec::new(),
            launch_points: Vec::new(),
            permanent: Vec::new(),
            window: Vec::new(),
            window_len,
            period,
            unserved: true,
            periodic_from: Instant::now(),
            requested: None,
            window_end: None,
            last_window_end: None,
            launch_always: false,
            reaper: None,
            counts: ProbeCounts::default(),
        }
    }

    /// Discovery's word on whether a CUDA process lacks a gpu thread.
    pub fn set_unserved(&mut self, unserved: bool) {
        self.unserved = unserved;
    }

    /// The period between periodic launch windows now.
    pub fn period(&self) -> Duration {
        if self.unserved {
            self.period
        } else {
            self.period * SERVED_PERIOD_FACTOR
        }
    }

    /// When the next window opens, if none is open.
    fn next_open(&self) -> Instant {
        let periodic = self.periodic_from + self.period();
        self.requested.map_or(periodic, |r| r.min(periodic))
    }

    /// A manager that keeps launch probes attached all the time.
    pub fn always_on() -> Self {
        let mut m = Self::new(Duration::ZERO, Duration::ZERO);
        m.launch_always = true;
        m
    }

    pub fn counts(&self) -> ProbeCounts {
        self.counts
    }

    /// Attaches the permanent probes of a new library. The process that
    /// mapped it gets a launch window only if its syncs have not classified
    /// it within a grace period (discovery.rs, `NewProcessGate`), like any
    /// later process of the library: most launchers sync within a token.
    pub fn add_library<A: Attacher<Link = L>>(&mut self, a: &mut A, lib: FoundLibrary) {
        self.counts.libraries += 1;
        self.files.push(lib.file.clone());
        let had_no_launch_points = self.launch_points.is_empty();
        let mut attached = 0;
        for point in &lib.points {
            if point.kind == ProbeKind::Launch && !self.launch_always {
                self.launch_points
                    .push((lib.open_path.clone(), point.clone()));
                continue;
            }
            match a.attach(&lib.open_path, point) {
                Ok(link) => {
                    self.permanent.push(link);
                    attached += 1;
                }
                Err(e) => warn!("uprobe {}:{}: {e:#}", lib.mapped_path, point.symbol),
            }
        }
        self.counts.permanent += attached;
        info!(
            "probing {} (dev {} ino {}): {} permanent, {} launch probes",
            lib.mapped_path,
            lib.dev,
            lib.ino,
            attached,
            if self.launch_always {
                0
            } else {
                lib.points
                    .iter()
                    .filter(|p| p.kind == ProbeKind::Launch)
                    .count()
            }
        );
        if had_no_launch_points && !self.launch_points.is_empty() {
            // The first periodic window comes a period after the first
            // library, not at once.
            self.periodic_from = Instant::now();
        }
    }

    fn close_window(&mut self, now: Instant) {
        if self.window_end.is_some() {
            self.last_window_end = Some(now);
        }
        let links = std::mem::take(&mut self.window);
        if !links.is_empty() {
            debug!("launch window closed: detaching {} probes", links.len());
            if self.reaper.is_none() {
                let (tx, rx) = std::sync::mpsc::channel::<Vec<L>>();
                let spawned = std::thread::Builder::new()
                    .name("express-unprobe".into())
                    .spawn(move || {
                        while let Ok(links) = rx.recv() {
                            detach_all(links);
                        }
                    });
                if let Ok(thread) = spawned {
                    self.reaper = Some((tx, thread));
                }
            }
            match &self.reaper {
                Some((tx, _)) => {
                    if let Err(e) = tx.send(links) {
                        detach_all(e.0);
                    }
                }
                None => detach_all(links),
            }
        }
        self.window_end = None;
        self.counts.window_open = false;
    }

    /// When `tick` next has something to do (a window to open or close).
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.launch_always || self.launch_points.is_empty() {
            return None;
        }
        Some(self.window_end.unwrap_or_else(|| self.next_open()))
    }

    /// Opens a launch window soon for a process that started after its
    /// CUDA library was probed. Windows opened this way start at least
    /// `EXTRA_WINDOW_GAP` after the previous one ended, so processes that
    /// start all the time cost at most window / (window + gap) of the
    /// launch-probe overhead.
    pub fn request_window(&mut self, now: Instant) {
        if self.launch_always || self.launch_points.is_empty() || self.window_end.is_some() {
            return;
        }
        let earliest = self
            .last_window_end
            .map_or(now, |end| (end + EXTRA_WINDOW_GAP).max(now));
        self.requested = Some(self.requested.map_or(earliest, |r| r.min(earliest)));
    }

    /// How long a caller polling for events may sleep, at most `max`, and
    /// still call `tick` in time for the next window to open or close.
    pub fn poll_timeout(&self, max: Duration) -> Duration {
        self.next_deadline().map_or(max, |t| {
            t.saturating_duration_since(Instant::now()).min(max)
        })
    }

    /// Opens or closes the launch window as time passes.
    pub fn tick<A: Attacher<Link = L>>(&mut self, a: &mut A, now: Instant) {
        if let Some(end) = self.window_end {
            if now >= end {
                self.close_window(now);
            }
            return;
        }
        if self.launch_points.is_empty() || now < self.next_open() {
            return;
        }
        for (path, point) in &self.launch_points {
            match a.attach(path, point) {
                Ok(link) => self.window.push(link),
                Err(e) => debug!("launch uprobe {}:{}: {e:#}", path.display(), point.symbol),
            }
        }
        self.window_end = Some(now + self.window_len);
        self.periodic_from = now;
        self.requested = None;
        self.counts.window_open = true;
        self.counts.windows += 1;
        debug!(
            "launch window open: {} probes attached in {:?}",
            self.window.len(),
            now.elapsed()
        );
    }
}

/// A message to the probe thread, and what serving it does to the manager.
/// Discovery's messages (discovery.rs, `Discovery`) are the ones in use;
/// naming them here through this trait, not by type, keeps the imports
/// between the two modules one way.
pub trait ProbeRequest: Send + 'static {
    /// A message that serves nothing: dropping the `ProbeThread` sends one,
    /// so the thread sees its stop flag at once rather than at its next
    /// deadline.
    fn wake() -> Self;
    fn serve<A>(self, manager: &mut ProbeManager<A::Link>, attacher: &mut A)
    where
        A: Attacher,
        A::Link: Send + 'static;
}

/// A `ProbeManager` on a thread of its own. Attaching a uprobe waits in
/// the kernel (about 56 ms for a launch window under TCG, longer with many
/// processes mapping the library); on the scheduler's loop that wait
/// delayed every fair-path decision past BPF's rescue timeout.
pub struct ProbeThread {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Sends the thread `ProbeRequest::wake()`.
    wake: Box<dyn Fn() + Send>,
    counts: std::sync::Arc<std::sync::Mutex<ProbeCounts>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The longest the probe thread sleeps with no deadline (no launch window
/// to open or close) and no message. It used to wake every 100 ms to look
/// for stop; under emulation those wakes cost about 0.3% of a CPU.
const PROBE_THREAD_IDLE: Duration = Duration::from_secs(10);

impl ProbeThread {
    /// Serves `discovery` with `manager` and `attacher` until dropped (or
    /// until discovery hangs up). `waker` is a sender of the same channel.
    /// Dropping it detaches every probe.
    pub fn spawn<A, R>(
        mut attacher: A,
        mut manager: ProbeManager<A::Link>,
        discovery: std::sync::mpsc::Receiver<R>,
        waker: std::sync::mpsc::Sender<R>,
    ) -> Result<Self>
    where
        A: Attacher + Send + 'static,
        A::Link: Send + 'static,
        R: ProbeRequest,
    {
        use std::sync::atomic::Ordering;
        use std::sync::mpsc::RecvTimeoutError;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let counts = std::sync::Arc::new(std::sync::Mutex::new(manager.counts()));
        let (stop2, counts2) = (stop.clone(), counts.clone());
        let thread = std::thread::Builder::new()
            .name("express-probes".into())
            .spawn(move || {
                while !stop2.load(Ordering::Relaxed) {
                    match discovery.recv_timeout(manager.poll_timeout(PROBE_THREAD_IDLE)) {
                        Ok(request) => request.serve(&mut manager, &mut attacher),
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                    manager.tick(&mut attacher, Instant::now());
                    *counts2.lock().unwrap_or_else(|e| e.into_inner()) = manager.counts();
                }
                // Dropping the manager detaches its probes, here.
            })
            .context("spawning the probe thread")?;
        Ok(Self {
            stop,
            wake: Box::new(move || {
                let _ = waker.send(R::wake());
            }),
            counts,
            thread: Some(thread),
        })
    }

    /// The manager's counters, as of its last turn.
    pub fn counts(&self) -> ProbeCounts {
        *self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for ProbeThread {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        (self.wake)();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn library_patterns_match_names_or_paths() {
        let p = glob::Pattern::new("libcuda.so*").unwrap();
        assert!(library_matches(
            &p,
            "/usr/local/nvidia/lib64/libcuda.so.580.159.04"
        ));
        assert!(!library_matches(&p, "/usr/lib/libcudart.so.13"));
        let p = glob::Pattern::new("*/site-packages/nvidia/*/libcudart.so*").unwrap();
        assert!(library_matches(
            &p,
            "/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcudart.so.13"
        ));
    }

    /// The host's libc: a real ELF library that is always there.
    pub(crate) fn host_libc() -> &'static Path {
        [
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/usr/lib64/libc.so.6",
            "/lib64/libc.so.6",
        ]
        .iter()
        .map(Path::new)
        .find(|p| p.exists())
        .expect("libc")
    }

    #[test]
    fn elf_offsets_of_libc_are_inside_the_file() {
        // Any dynamic library of the host does: libc is always there.
        let libc = host_libc();
        let syms = elf_function_offsets(libc).unwrap();
        let len = std::fs::metadata(libc).unwrap().len();
        let off = syms["malloc"];
        assert!(off > 0 && off < len);
        assert!(
            !syms.contains_key("environ"),
            "data symbols are not functions"
        );
    }

    #[test]
    fn points_only_for_exported_symbols() {
        let spec = ProbeSpec {
            cuda_libraries: vec![glob::Pattern::new("libcuda.so*").unwrap()],
            launch_symbols: vec!["cuLaunchKernel".into(), "cuLaunchKernel_ptsz".into()],
            sync_symbols: vec!["cuStreamSynchronize".into()],
            markers: vec![(
                glob::Pattern::new("libexpress_mark.so*").unwrap(),
                "express_mark_agent".into(),
                ClassName::Agent,
            )],
        };
        let exports: HashMap<String, u64> = [
            ("cuLaunchKernel".to_string(), 0x100),
            ("cuStreamSynchronize".to_string(), 0x200),
        ]
        .into();
        let pts = spec.points_for("/x/libcuda.so.1", &exports);
        assert_eq!(pts.len(), 2);
        assert_eq!(pts[0].kind, ProbeKind::Launch);
        assert_eq!(pts[1].kind, ProbeKind::Sync);
        assert!(spec.points_for("/x/libfoo.so", &exports).is_empty());
    }

    /// Records the symbols it attaches; its links are their names.
    pub(crate) struct FakeAttacher(pub(crate) Vec<String>);
    impl Attacher for FakeAttacher {
        type Link = String;
        fn attach(&mut self, _: &Path, p: &ProbePoint) -> Result<String> {
            self.0.push(p.symbol.clone());
            Ok(p.symbol.clone())
        }
    }

    fn point(symbol: &str, offset: u64, kind: ProbeKind) -> ProbePoint {
        ProbePoint {
            symbol: symbol.into(),
            offset,
            kind,
        }
    }

    /// A stand-in library (any open file will do) with these probe points.
    fn fake_library(points: Vec<ProbePoint>) -> FoundLibrary {
        FoundLibrary {
            dev: 1,
            ino: 2,
            file: std::sync::Arc::new(File::open("/proc/self/stat").unwrap()),
            open_path: "/l".into(),
            mapped_path: "/l".into(),
            points,
        }
    }

    /// A library with one launch and one sync probe point.
    pub(crate) fn launch_and_sync_library() -> FoundLibrary {
        fake_library(vec![
            point("launch", 1, ProbeKind::Launch),
            point("sync", 2, ProbeKind::Sync),
        ])
    }

    #[test]
    fn a_new_process_gets_a_window_soon_but_not_back_to_back() {
        let mut a = FakeAttacher(vec![]);
        let mut m = ProbeManager::new(Duration::from_millis(100), Duration::from_secs(60));
        m.add_library(&mut a, launch_and_sync_library());
        let t0 = Instant::now();
        m.tick(&mut a, t0);
        assert!(!m.counts().window_open, "a library alone opens no window");
        m.request_window(t0);
        m.tick(&mut a, t0);
        assert!(m.counts().window_open);
        // Asked while a window is open: nothing more.
        m.request_window(t0);
        m.tick(&mut a, t0 + Duration::from_millis(150));
        assert!(!m.counts().window_open);
        let closed = m.last_window_end.expect("window end recorded");
        assert_eq!(closed, t0 + Duration::from_millis(150));
        assert!(m.next_deadline().unwrap() >= t0 + Duration::from_secs(60));

        // A new process right after: the next window waits out the gap...
        let asked = closed + Duration::from_millis(10);
        m.request_window(asked);
        assert_eq!(m.next_deadline(), Some(closed + EXTRA_WINDOW_GAP));
        m.tick(&mut a, asked);
        assert!(!m.counts().window_open, "opened back to back");
        // ...then opens, long before the periodic one.
        m.tick(&mut a, closed + EXTRA_WINDOW_GAP);
        assert!(m.counts().window_open);
        assert_eq!(m.counts().windows, 2);
    }

    #[test]
    fn launch_probes_are_duty_cycled() {
        let mut a = FakeAttacher(vec![]);
        let mut m = ProbeManager::new(Duration::from_millis(100), Duration::from_secs(1));
        let lib = launch_and_sync_library();
        m.add_library(&mut a, lib);
        assert_eq!(a.0, vec!["sync"], "only the permanent probe at once");
        let t0 = Instant::now();
        m.request_window(t0);
        m.tick(&mut a, t0);
        assert!(m.counts().window_open);
        assert_eq!(m.window.len(), 1);
        m.tick(&mut a, t0 + Duration::from_millis(150));
        assert!(!m.counts().window_open, "window closes after its length");
        assert!(m.window.is_empty());
        m.tick(&mut a, t0 + Duration::from_millis(500));
        assert!(!m.counts().window_open, "no new window before the period");
        m.tick(&mut a, t0 + Duration::from_millis(1001));
        assert!(m.counts().window_open);
        assert_eq!(m.counts().windows, 2);
    }

    #[test]
    fn periodic_windows_are_rare_while_every_cuda_process_has_a_gpu_thread() {
        let mut a = FakeAttacher(vec![]);
        let base = Duration::from_secs(10);
        let mut m = ProbeManager::new(Duration::from_millis(100), base);
        m.add_library(&mut a, launch_and_sync_library());
        let t0 = Instant::now();
        // Discovery has not spoken yet: the short period.
        assert_eq!(m.period(), base);
        m.set_unserved(false);
        assert_eq!(m.period(), base * SERVED_PERIOD_FACTOR);
        m.tick(&mut a, t0 + base + Duration::from_millis(1));
        assert!(!m.counts().window_open, "no window at the short period");
        // A process with no gpu thread: the short period again, counted
        // from the same start, so the window is due at once.
        m.set_unserved(true);
        m.tick(&mut a, t0 + base + Duration::from_millis(2));
        assert!(m.counts().window_open);
        m.tick(&mut a, t0 + base + Duration::from_millis(200));
        assert!(!m.counts().window_open);
        // Served again: the next one a long period after this one opened.
        m.set_unserved(false);
        let opened = t0 + base + Duration::from_millis(2);
        assert_eq!(
            m.next_deadline(),
            Some(opened + base * SERVED_PERIOD_FACTOR)
        );
        // A new process's request still comes soon.
        m.request_window(opened + Duration::from_secs(5));
        assert_eq!(m.next_deadline(), Some(opened + Duration::from_secs(5)));
    }

    #[test]
    fn always_on_attaches_launch_probes_permanently() {
        let mut a = FakeAttacher(vec![]);
        let mut m = ProbeManager::always_on();
        let lib = launch_and_sync_library();
        m.add_library(&mut a, lib);
        assert_eq!(a.0, vec!["launch", "sync"]);
        assert_eq!(m.counts().permanent, 2);
        m.tick(&mut a, Instant::now() + Duration::from_secs(100));
        assert_eq!(a.0.len(), 2, "no windows");
        assert_eq!(m.counts().windows, 0);
    }

    /// A link whose detach blocks until the test opens the gate, like a
    /// real uprobe's (an RCU grace period). It counts detaches begun and done.
    #[derive(Default)]
    struct Gate {
        open: std::sync::Mutex<bool>,
        opened: std::sync::Condvar,
        begun: std::sync::atomic::AtomicUsize,
        done: std::sync::atomic::AtomicUsize,
    }
    struct GatedLink(std::sync::Arc<Gate>);
    impl Drop for GatedLink {
        fn drop(&mut self) {
            use std::sync::atomic::Ordering::SeqCst;
            let g = &self.0;
            g.begun.fetch_add(1, SeqCst);
            // The timeout only keeps a broken build from hanging forever.
            let open = g.open.lock().unwrap();
            let _ = g
                .opened
                .wait_timeout_while(open, Duration::from_secs(30), |o| !*o)
                .unwrap();
            g.done.fetch_add(1, SeqCst);
        }
    }
    struct GatedAttacher(std::sync::Arc<Gate>);
    impl Attacher for GatedAttacher {
        type Link = GatedLink;
        fn attach(&mut self, _: &Path, _: &ProbePoint) -> Result<GatedLink> {
            Ok(GatedLink(self.0.clone()))
        }
    }

    #[test]
    fn windows_close_without_waiting_and_detach_in_parallel() {
        use std::sync::atomic::Ordering::SeqCst;
        let gate = std::sync::Arc::new(Gate::default());
        let mut a = GatedAttacher(gate.clone());
        let mut m = ProbeManager::new(Duration::from_millis(10), Duration::from_secs(60));
        let points = (0..10)
            .map(|i| point(&format!("launch{i}"), i, ProbeKind::Launch))
            .collect();
        m.add_library(&mut a, fake_library(points));
        let t0 = Instant::now();
        m.request_window(t0);
        m.tick(&mut a, t0);
        assert_eq!(m.window.len(), 10);
        assert_eq!(m.next_deadline(), Some(t0 + Duration::from_millis(10)));

        // Closing returns while every detach is still blocked.
        m.tick(&mut a, t0 + Duration::from_millis(20));
        assert!(m.window.is_empty());
        assert_eq!(gate.done.load(SeqCst), 0, "close waited for a detach");
        assert_eq!(m.next_deadline(), Some(t0 + Duration::from_secs(60)));

        // All ten detaches are under way at once, not one after another.
        let deadline = Instant::now() + Duration::from_secs(20);
        while gate.begun.load(SeqCst) < 10 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(gate.begun.load(SeqCst), 10, "detaches ran one at a time");
        assert_eq!(gate.done.load(SeqCst), 0);

        *gate.open.lock().unwrap() = true;
        gate.opened.notify_all();
        drop(m);
        assert_eq!(
            gate.done.load(SeqCst),
            10,
            "all detached when the manager goes"
        );
    }

    /// Attaches only once the gate opens, like a uprobe registration
    /// waiting in the kernel; its links count their detaches.
    struct SlowAttacher(std::sync::Arc<Gate>);
    struct CountedLink(std::sync::Arc<Gate>);
    impl Drop for CountedLink {
        fn drop(&mut self) {
            self.0
                .done
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
    impl Attacher for SlowAttacher {
        type Link = CountedLink;
        fn attach(&mut self, _: &Path, _: &ProbePoint) -> Result<CountedLink> {
            let g = &self.0;
            g.begun.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let open = g.open.lock().unwrap();
            let _ = g
                .opened
                .wait_timeout_while(open, Duration::from_secs(30), |o| !*o)
                .unwrap();
            Ok(CountedLink(g.clone()))
        }
    }

    /// The probe thread's tests send bare libraries (None: a wake): this
    /// module cannot name discovery's messages (discovery.rs tests those).
    impl ProbeRequest for Option<FoundLibrary> {
        fn wake() -> Self {
            None
        }
        fn serve<A>(self, manager: &mut ProbeManager<A::Link>, attacher: &mut A)
        where
            A: Attacher,
            A::Link: Send + 'static,
        {
            if let Some(lib) = self {
                manager.add_library(attacher, lib);
            }
        }
    }

    #[test]
    fn the_probe_thread_attaches_without_blocking_its_owner() {
        use std::sync::atomic::Ordering::SeqCst;
        let gate = std::sync::Arc::new(Gate::default());
        let (tx, rx) = std::sync::mpsc::channel();
        let manager = ProbeManager::new(Duration::from_secs(60), Duration::from_secs(60));
        let thread =
            ProbeThread::spawn(SlowAttacher(gate.clone()), manager, rx, tx.clone()).unwrap();
        tx.send(Some(launch_and_sync_library())).unwrap();

        // The attach is stuck in the "kernel"; the owner carries on.
        let wait_for = |what: &dyn Fn() -> bool| {
            let deadline = Instant::now() + Duration::from_secs(20);
            while !what() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            what()
        };
        assert!(
            wait_for(&|| gate.begun.load(SeqCst) == 1),
            "no attach began"
        );
        assert_eq!(thread.counts().libraries, 0, "counted before attaching");

        *gate.open.lock().unwrap() = true;
        gate.opened.notify_all();
        // The sync probe; a launch window waits for a process that needs
        // one (or for the period).
        assert!(
            wait_for(&|| thread.counts().libraries == 1),
            "library not counted"
        );
        let c = thread.counts();
        assert_eq!((c.libraries, c.permanent, c.windows), (1, 1, 0));
        assert_eq!(gate.begun.load(SeqCst), 1);

        // Dropping the thread wakes it (it has no deadline: it would
        // sleep PROBE_THREAD_IDLE) and detaches the probe before it returns.
        let t0 = Instant::now();
        drop(thread);
        assert_eq!(gate.done.load(SeqCst), 1);
        assert!(
            t0.elapsed() < PROBE_THREAD_IDLE / 2,
            "the drop waited for the idle timeout"
        );
    }
}
