//! CUDA and marker uprobes: find the libraries processes map, resolve the
//! configured symbols in their ELF files, and attach the BPF programs of
//! classify.bpf.c to them.
//!
//! Cost model: a uprobe traps on every call (about 1 µs on the GPU host).
//! Sync and device-to-host copy entry points are called a few dozen times
//! per decode step and stay probed. Launch entry points are called hundreds
//! of times per step, so their probes are attached only in short windows
//! (`launch_window_ms` every `launch_period_ms`): enough to classify a
//! launcher that never syncs, at a small duty cycle.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
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

    fn wanted(&self, path: &str) -> bool {
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

/// One file-backed mapping of /proc/PID/maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping<'a> {
    pub start: u64,
    pub offset: u64,
    pub path: &'a str,
}

/// File-backed mappings in /proc/PID/maps text.
pub fn mappings(maps: &str) -> impl Iterator<Item = Mapping<'_>> {
    maps.lines().filter_map(|line| {
        // address perms offset dev inode path
        let mut f = line.splitn(6, char::is_whitespace);
        let range = f.next()?;
        let offset = u64::from_str_radix(f.nth(1)?, 16).ok()?;
        let path = f.nth(2)?.trim_start();
        let start = u64::from_str_radix(range.split('-').next()?, 16).ok()?;
        (path.starts_with('/') && !path.ends_with(" (deleted)")).then_some(Mapping {
            start,
            offset,
            path,
        })
    })
}

/// Name and layout of the registry in libexpress_mark.so
/// (workloads/marker/express_mark.c): marks made before our uprobes were
/// attached are read from there.
pub const MARK_REGISTRY_SYMBOL: &str = "express_mark_registry";
const MARK_MAGIC: u64 = 0x4b52414d58505845;
const MARK_SLOTS: usize = 1024;

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

/// Reads the mark registry of process `pid` at `addr`: (tid, class) pairs.
pub fn read_mark_registry(pid: u32, addr: u64) -> Result<Vec<(i32, ClassName)>> {
    let mut buf = vec![0u8; 16 + 8 * MARK_SLOTS];
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let n = unsafe { libc::process_vm_readv(pid as i32, &local, 1, &remote, 1, 0) };
    if n != buf.len() as isize {
        anyhow::bail!(
            "process_vm_readv({pid}): {}",
            std::io::Error::last_os_error()
        );
    }
    parse_mark_registry(&buf)
}

fn parse_mark_registry(buf: &[u8]) -> Result<Vec<(i32, ClassName)>> {
    let u64_at = |o: usize| u64::from_ne_bytes(buf[o..o + 8].try_into().unwrap());
    let i32_at = |o: usize| i32::from_ne_bytes(buf[o..o + 4].try_into().unwrap());
    if u64_at(0) != MARK_MAGIC {
        anyhow::bail!("mark registry has a bad magic number");
    }
    let count = (i32_at(8) as u32 as usize).min(MARK_SLOTS);
    Ok((0..count)
        .filter_map(|i| {
            let tid = i32_at(16 + 8 * i);
            let class = match i32_at(20 + 8 * i) {
                1 => ClassName::Gpu,
                2 => ClassName::Agent,
                _ => ClassName::Normal,
            };
            (tid > 0).then_some((tid, class))
        })
        .collect())
}

/// What one scan found.
#[derive(Debug, Default)]
pub struct ScanResult {
    pub libraries: Vec<FoundLibrary>,
    /// New processes that map a library already probed for launches: their
    /// launcher may never call a sync entry point early, so a launch window
    /// should open soon (`ProbeManager::request_window`).
    pub new_processes: Vec<u32>,
    /// Marks recorded in processes' mark registries: (tid, class).
    pub marks: Vec<(i32, ClassName)>,
}

/// What discovery sends to the owner of the probes.
#[derive(Debug)]
pub enum Discovery {
    /// A library to probe, seen for the first time.
    Library(FoundLibrary),
    /// A process that started after its CUDA library was already probed.
    NewProcess(u32),
}

/// Scans /proc for libraries to probe; each (device, inode) is reported once.
///
/// Every pass reads the maps of processes it has not seen yet, so a new CUDA
/// process is found within one interval. Every `full_every` passes it reads
/// again those whose mapped size (/proc/PID/statm) changed since, which a
/// library loaded later with dlopen() does, and those that map a marker
/// library (their registry of marks). Reading maps takes the process's
/// mmap lock and costs tens of microseconds each under emulation; a size
/// costs a fraction of that and no lock, so a host with hundreds of
/// processes is not scanned in full every few seconds. With exec events
/// (the scheduler's `exec_events` ring), the passes between full ones read
/// only the processes that called exec() since the last pass, without
/// listing /proc, and a process that appeared without exec() is not read:
/// a fork maps what its parent did. Fork-heavy loads then cost the scanner
/// a size read per new process every full pass, and nothing in between.
pub struct LibraryScanner {
    spec: ProbeSpec,
    seen: HashSet<(u64, u64)>,
    /// Libraries among `seen` that have launch entry points.
    launch_libs: HashSet<(u64, u64)>,
    /// Processes seen mapping one of `launch_libs`.
    launch_pids: HashSet<u32>,
    /// Files that failed to parse, so they are not re-read every scan.
    bad: HashSet<(u64, u64)>,
    /// Marker libraries: where their registry is, if they have one.
    registries: HashMap<(u64, u64), Option<u64>>,
    known_pids: HashSet<u32>,
    /// Processes without mappings (kernel threads): never worth a rescan.
    no_maps: HashSet<u32>,
    /// Mapped size (pages) of each process when its maps were last read.
    sizes: HashMap<u32, u64>,
    /// Processes mapping a marker library: re-read on every full pass.
    marker_pids: HashSet<u32>,
    /// Processes that called exec() since the last pass. None: list /proc
    /// on every pass and read every new process.
    exec_events: Option<Box<dyn ExecEvents>>,
    pass: u64,
    full_every: u64,
}

impl LibraryScanner {
    pub fn new(spec: ProbeSpec, full_every: u64) -> Self {
        Self {
            spec,
            seen: HashSet::new(),
            launch_libs: HashSet::new(),
            launch_pids: HashSet::new(),
            bad: HashSet::new(),
            registries: HashMap::new(),
            known_pids: HashSet::new(),
            no_maps: HashSet::new(),
            sizes: HashMap::new(),
            marker_pids: HashSet::new(),
            exec_events: None,
            pass: 0,
            full_every: full_every.max(1),
        }
    }

    /// Learns new processes from exec events instead of listing /proc.
    pub fn with_exec_events(mut self, events: Box<dyn ExecEvents>) -> Self {
        self.exec_events = Some(events);
        self
    }

    /// One pass over the maps of new processes (or of all, periodically).
    pub fn scan(&mut self, proc_root: &Path) -> ScanResult {
        let mut out = ScanResult::default();
        let full = self.pass.is_multiple_of(self.full_every);
        let first = self.pass == 0;
        self.pass += 1;
        let execed: Option<HashSet<u32>> = self.exec_events.as_mut().map(|e| e.take());
        if let (false, Some(execed)) = (full, &execed) {
            for &pid in execed {
                if self.known_pids.insert(pid) {
                    self.read_process(proc_root, pid, &mut out);
                }
            }
            return out;
        }
        let Ok(entries) = std::fs::read_dir(proc_root) else {
            return out;
        };
        let mut alive = HashSet::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            alive.insert(pid);
            let known = self.known_pids.contains(&pid);
            if self.no_maps.contains(&pid) || (!full && known) {
                continue;
            }
            if !first && !known && execed.as_ref().is_some_and(|e| !e.contains(&pid)) {
                // A fork: its parent's libraries. A dlopen() later grows
                // its size, and the next full pass reads it then.
                if let Some(size) = mapped_size(&entry.path()) {
                    self.sizes.insert(pid, size);
                }
                continue;
            }
            self.read_process(proc_root, pid, &mut out);
        }
        self.no_maps.retain(|p| alive.contains(p));
        self.launch_pids.retain(|p| alive.contains(p));
        self.sizes.retain(|p, _| alive.contains(p));
        self.marker_pids.retain(|p| alive.contains(p));
        self.known_pids = alive;
        out
    }

    /// Reads the maps of @pid, unless its mapped size is the same as when
    /// they were last read (and it has no marks to re-read).
    fn read_process(&mut self, proc_root: &Path, pid: u32, out: &mut ScanResult) {
        let dir = proc_root.join(pid.to_string());
        let size = mapped_size(&dir);
        if size.is_some()
            && self.sizes.get(&pid) == size.as_ref()
            && !self.marker_pids.contains(&pid)
        {
            return;
        }
        let Ok(maps) = std::fs::read_to_string(dir.join("maps")) else {
            return;
        };
        if let Some(size) = size {
            self.sizes.insert(pid, size);
        }
        if maps.is_empty() {
            self.no_maps.insert(pid);
            return;
        }
        {
            let mut this_pid = HashSet::new();
            for m in mappings(&maps) {
                if m.offset != 0 || !this_pid.insert(m.path) || !self.spec.wanted(m.path) {
                    continue;
                }
                let open_path = proc_root
                    .join(pid.to_string())
                    .join("root")
                    .join(&m.path[1..]);
                let Ok(meta) = std::fs::metadata(&open_path) else {
                    continue;
                };
                let key = (meta.dev(), meta.ino());
                // First seen mapping a library probed in an earlier pass
                // (a process scanned before its loader mapped the library
                // counts when a later pass sees the mapping).
                if self.launch_libs.contains(&key) && self.launch_pids.insert(pid) {
                    out.new_processes.push(pid);
                }
                if !self.seen.contains(&key) && !self.bad.contains(&key) {
                    self.inspect(key, &open_path, m.path, pid, &mut out.libraries);
                }
                self.read_marks(key, &open_path, m, pid, &mut out.marks);
            }
        }
    }

    fn inspect(
        &mut self,
        key: (u64, u64),
        open_path: &Path,
        path: &str,
        pid: u32,
        found: &mut Vec<FoundLibrary>,
    ) {
        let opened = File::open(open_path)
            .map_err(anyhow::Error::from)
            .and_then(|f| Ok((f, elf_function_offsets(open_path)?)));
        match opened {
            Ok((file, exports)) => {
                self.seen.insert(key);
                let points = self.spec.points_for(path, &exports);
                if points.iter().any(|p| p.kind == ProbeKind::Launch) {
                    self.launch_libs.insert(key);
                    self.launch_pids.insert(pid);
                }
                let open_path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
                found.push(FoundLibrary {
                    dev: key.0,
                    ino: key.1,
                    file: std::sync::Arc::new(file),
                    open_path,
                    mapped_path: path.to_string(),
                    points,
                });
            }
            Err(e) => {
                warn!("cannot read symbols of {path} (pid {pid}): {e:#}");
                self.bad.insert(key);
            }
        }
    }

    fn read_marks(
        &mut self,
        key: (u64, u64),
        open_path: &Path,
        m: Mapping,
        pid: u32,
        marks: &mut Vec<(i32, ClassName)>,
    ) {
        if !self
            .spec
            .markers
            .iter()
            .any(|(p, _, _)| library_matches(p, m.path))
        {
            return;
        }
        self.marker_pids.insert(pid);
        let rel = *self
            .registries
            .entry(key)
            .or_insert_with(|| elf_registry_offset(open_path).ok().flatten());
        let Some(rel) = rel else { return };
        match read_mark_registry(pid, m.start + rel) {
            Ok(found) => marks.extend(found),
            Err(e) => debug!("mark registry of pid {pid}: {e:#}"),
        }
    }
}

/// Where the scanner learns which processes called exec() since its last
/// pass (the scheduler's `exec_events` ring buffer).
pub trait ExecEvents {
    fn take(&mut self) -> HashSet<u32>;
}

/// A process's mapped size in pages (the first field of /proc/PID/statm).
fn mapped_size(proc_dir: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(proc_dir.join("statm")).ok()?;
    text.split_whitespace().next()?.parse().ok()
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

/// Owns the uprobe links: permanent ones (sync, markers) and the launch
/// probes of the current window.
pub struct ProbeManager<L: Send + 'static> {
    /// Libraries held open: their /proc/self/fd paths must stay valid.
    files: Vec<std::sync::Arc<File>>,
    launch_points: Vec<(PathBuf, ProbePoint)>,
    permanent: Vec<L>,
    window: Vec<L>,
    window_len: Duration,
    period: Duration,
    next_window: Instant,
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
            next_window: Instant::now(),
            window_end: None,
            last_window_end: None,
            launch_always: false,
            reaper: None,
            counts: ProbeCounts::default(),
        }
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

    /// Attaches the permanent probes of a new library and opens a launch
    /// window at once, so a fresh CUDA process is classified quickly.
    pub fn add_library<A: Attacher<Link = L>>(&mut self, a: &mut A, lib: FoundLibrary) {
        self.counts.libraries += 1;
        self.files.push(lib.file.clone());
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
        if !self.launch_always && lib.points.iter().any(|p| p.kind == ProbeKind::Launch) {
            let now = Instant::now();
            self.close_window(now);
            self.next_window = now;
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
        Some(self.window_end.unwrap_or(self.next_window))
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
        if earliest < self.next_window {
            self.next_window = earliest;
        }
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
        if now < self.next_window || self.launch_points.is_empty() {
            return;
        }
        for (path, point) in &self.launch_points {
            match a.attach(path, point) {
                Ok(link) => self.window.push(link),
                Err(e) => debug!("launch uprobe {}:{}: {e:#}", path.display(), point.symbol),
            }
        }
        self.window_end = Some(now + self.window_len);
        self.next_window = now + self.period;
        self.counts.window_open = true;
        self.counts.windows += 1;
        debug!(
            "launch window open: {} probes attached in {:?}",
            self.window.len(),
            now.elapsed()
        );
    }
}

/// A `ProbeManager` on a thread of its own. Attaching a uprobe waits in
/// the kernel (about 56 ms for a launch window under TCG, longer with many
/// processes mapping the library); on the scheduler's loop that wait
/// delayed every fair-path decision past BPF's rescue timeout.
pub struct ProbeThread {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    counts: std::sync::Arc<std::sync::Mutex<ProbeCounts>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// How long the probe thread waits for discovery before it checks for stop.
const PROBE_THREAD_POLL: Duration = Duration::from_millis(100);

impl ProbeThread {
    /// Serves `discovery` with `manager` and `attacher` until dropped (or
    /// until discovery hangs up). Dropping it detaches every probe.
    pub fn spawn<A>(
        mut attacher: A,
        mut manager: ProbeManager<A::Link>,
        discovery: std::sync::mpsc::Receiver<Discovery>,
    ) -> Result<Self>
    where
        A: Attacher + Send + 'static,
        A::Link: Send + 'static,
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
                    match discovery.recv_timeout(manager.poll_timeout(PROBE_THREAD_POLL)) {
                        Ok(Discovery::Library(lib)) => manager.add_library(&mut attacher, lib),
                        Ok(Discovery::NewProcess(pid)) => {
                            debug!("new CUDA process {pid}: launch window soon");
                            manager.request_window(Instant::now());
                        }
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
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_give_file_paths() {
        let maps = "\
7f00-7f10 r-xp 00000000 08:01 1234 /usr/lib/x86_64-linux-gnu/libcuda.so.580.1
7f10-7f20 rw-p 00000000 00:00 0 [heap]
7f20-7f30 r-xp 00000000 08:01 99 /opt/my lib/libx.so (deleted)
7f30-7f40 r-xp 00000000 08:01 98    /opt/with space/libcudart.so.13
7f40-7f50 rw-p 00000000 00:00 0
";
        let paths: Vec<_> = mappings(maps).map(|m| m.path).collect();
        assert_eq!(
            paths,
            vec![
                "/usr/lib/x86_64-linux-gnu/libcuda.so.580.1",
                "/opt/with space/libcudart.so.13"
            ]
        );
    }

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
    fn host_libc() -> &'static Path {
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

    #[test]
    fn maps_lines_give_start_and_offset() {
        let m: Vec<_> = mappings("7f00-7f10 r--p 00001000 08:01 1 /l.so\n").collect();
        assert_eq!(m[0].start, 0x7f00);
        assert_eq!(m[0].offset, 0x1000);
    }

    #[test]
    fn mark_registry_parses_entries() {
        let mut buf = vec![0u8; 16 + 8 * MARK_SLOTS];
        buf[0..8].copy_from_slice(&MARK_MAGIC.to_ne_bytes());
        buf[8..12].copy_from_slice(&3u32.to_ne_bytes());
        for (i, (tid, class)) in [(10i32, 2i32), (11, 1), (12, 0)].iter().enumerate() {
            buf[16 + 8 * i..20 + 8 * i].copy_from_slice(&tid.to_ne_bytes());
            buf[20 + 8 * i..24 + 8 * i].copy_from_slice(&class.to_ne_bytes());
        }
        let marks = parse_mark_registry(&buf).unwrap();
        assert_eq!(
            marks,
            vec![
                (10, ClassName::Agent),
                (11, ClassName::Gpu),
                (12, ClassName::Normal)
            ]
        );
        buf[0] ^= 1;
        assert!(parse_mark_registry(&buf).is_err());
    }

    /// Exec events the test hands out, once each.
    struct FakeExecs(std::rc::Rc<std::cell::RefCell<HashSet<u32>>>);
    impl ExecEvents for FakeExecs {
        fn take(&mut self) -> HashSet<u32> {
            std::mem::take(&mut *self.0.borrow_mut())
        }
    }

    struct FakeAttacher(Vec<String>);
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
    fn launch_and_sync_library() -> FoundLibrary {
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

    /// libc stands in for libcuda: `malloc` is its "launch" entry point.
    fn libc_as_cuda() -> ProbeSpec {
        let cfg = crate::config::ClassifyConfig {
            libraries: vec!["libc.so*".into()],
            launch_symbols: vec!["malloc".into()],
            sync_symbols: vec![],
            markers: vec![],
            ..Default::default()
        };
        ProbeSpec::from_config(&cfg).unwrap()
    }

    /// A fake /proc/PID under `root` that maps the host's libc as `maps`
    /// says, with a mapped size of `pages` (no statm file if None).
    fn fake_process(root: &Path, pid: u32, maps: &str, pages: Option<u64>) -> PathBuf {
        let dir = root.join(pid.to_string());
        std::fs::create_dir_all(dir.join("root/lib")).unwrap();
        let link = dir.join("root/lib/libc.so.6");
        if !link.exists() {
            std::os::unix::fs::symlink(host_libc(), link).unwrap();
        }
        std::fs::write(dir.join("maps"), maps).unwrap();
        if let Some(pages) = pages {
            std::fs::write(dir.join("statm"), format!("{pages} 10 5 1 0 20 0\n")).unwrap();
        }
        dir
    }

    const LIBC_MAP: &str = "7f00-7f10 r-xp 00000000 08:01 1 /lib/libc.so.6\n";
    const SH_MAP: &str = "7f00-7f10 r-xp 00000000 08:01 1 /bin/sh\n";

    #[test]
    fn scanner_reports_new_processes_of_a_probed_library() {
        let root = std::env::temp_dir().join(format!("express-scan-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let add_process = |pid: u32| {
            fake_process(&root, pid, LIBC_MAP, None);
        };
        let mut scanner = LibraryScanner::new(libc_as_cuda(), 100);

        add_process(100);
        let first = scanner.scan(&root);
        assert_eq!(first.libraries.len(), 1, "the library, once");
        assert!(
            first.new_processes.is_empty(),
            "its window opens with the library"
        );

        add_process(101);
        let second = scanner.scan(&root);
        assert!(second.libraries.is_empty());
        assert_eq!(second.new_processes, vec![101]);

        let third = scanner.scan(&root);
        assert!(third.new_processes.is_empty(), "each process once");

        // Seen before its loader mapped the library (no maps yet), then
        // with the mapping on a later pass: still reported.
        let early = fake_process(&root, 102, SH_MAP, None);
        assert!(scanner.scan(&root).new_processes.is_empty());
        std::fs::remove_dir_all(&early).unwrap();
        add_process(102);
        let mut full = LibraryScanner { pass: 0, ..scanner };
        assert_eq!(full.scan(&root).new_processes, vec![102]);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn full_passes_reread_only_processes_whose_size_changed() {
        let root = std::env::temp_dir().join(format!("express-size-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        fake_process(&root, 200, SH_MAP, Some(100));
        // full_every 1: every pass is a full one.
        let mut scanner = LibraryScanner::new(libc_as_cuda(), 1);
        assert!(scanner.scan(&root).libraries.is_empty());

        // The library appears, but the size stays: not read again.
        fake_process(&root, 200, LIBC_MAP, Some(100));
        assert!(scanner.scan(&root).libraries.is_empty());

        // A dlopen() grows the mapping: the next full pass finds it.
        fake_process(&root, 200, LIBC_MAP, Some(140));
        assert_eq!(scanner.scan(&root).libraries.len(), 1);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn new_processes_are_read_only_after_exec() {
        let root = std::env::temp_dir().join(format!("express-exec-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let add_process = |pid: u32| {
            fake_process(&root, pid, LIBC_MAP, Some(100));
        };
        let execs = std::rc::Rc::new(std::cell::RefCell::new(HashSet::new()));
        // full_every 2: passes 0, 2, 4 list /proc; 1 and 3 read exec events.
        let mut scanner = LibraryScanner::new(libc_as_cuda(), 2)
            .with_exec_events(Box::new(FakeExecs(execs.clone())));
        // The first pass reads what ran before the scheduler, exec or not.
        add_process(300);
        assert_eq!(scanner.scan(&root).libraries.len(), 1);
        // Between full passes, only what called exec() is read; a fork
        // (301) is not, not even on the full pass after.
        add_process(301);
        add_process(302);
        execs.borrow_mut().insert(302);
        assert_eq!(scanner.scan(&root).new_processes, vec![302]);
        assert!(scanner.scan(&root).new_processes.is_empty());
        // An exec seen only by a full pass is read there.
        add_process(303);
        execs.borrow_mut().insert(303);
        assert_eq!(scanner.scan(&root).new_processes, vec![303]);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn launch_probes_are_duty_cycled() {
        let mut a = FakeAttacher(vec![]);
        let mut m = ProbeManager::new(Duration::from_millis(100), Duration::from_secs(1));
        let lib = launch_and_sync_library();
        m.add_library(&mut a, lib);
        assert_eq!(a.0, vec!["sync"], "only the permanent probe at once");
        let t0 = Instant::now();
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

    #[test]
    fn the_probe_thread_attaches_without_blocking_its_owner() {
        use std::sync::atomic::Ordering::SeqCst;
        let gate = std::sync::Arc::new(Gate::default());
        let (tx, rx) = std::sync::mpsc::channel();
        let manager = ProbeManager::new(Duration::from_secs(60), Duration::from_secs(60));
        let thread = ProbeThread::spawn(SlowAttacher(gate.clone()), manager, rx).unwrap();
        tx.send(Discovery::Library(launch_and_sync_library()))
            .unwrap();

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
        // The sync probe, then a launch window opened at once.
        assert!(
            wait_for(&|| thread.counts().windows == 1),
            "no window opened"
        );
        let c = thread.counts();
        assert_eq!((c.libraries, c.permanent), (1, 1));
        assert!(c.window_open);
        assert_eq!(gate.begun.load(SeqCst), 2);

        // Dropping the thread detaches both probes before it returns.
        drop(thread);
        assert_eq!(gate.done.load(SeqCst), 2);
    }
}
