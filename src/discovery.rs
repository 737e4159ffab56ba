//! Discovery of libraries and processes: one thread ("express-scan") reads
//! /proc every `scan_interval_ms` for the CUDA and marker libraries that
//! processes map, the new processes of a library already probed, and the
//! marks recorded in marker libraries' registries. It tells the owner of
//! the probes through [`Discovery`] messages on a channel, and applies the
//! config rules on the same pass, so reading /proc never delays the
//! scheduler's loop.
//!
//! The walk: the scheduler (or `trace`) calls [`start_discovery`]; the
//! scanner thread runs [`LibraryScanner::scan`], which asks probes.rs for a
//! library's probe points (ELF symbols); each [`Discovery`] goes to the
//! probe thread (probes.rs, `ProbeThread`), which attaches. Rules, marks
//! and the task-class map they write are classify.rs's.
//!
//! Imports go one way: this module uses probes.rs and classify.rs, and
//! neither uses it (probes.rs serves a [`ProbeRequest`], which
//! [`Discovery`] is).

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use libbpf_rs::MapHandle;
use log::{debug, warn};

use crate::classify::{effective_class, monotonic_ns, threads_of, RuleEngine, Source, TaskMap};
use crate::config::ClassName;
use crate::probes::{
    elf_function_offsets, elf_registry_offset, library_matches, Attacher, FoundLibrary, ProbeKind,
    ProbeManager, ProbeRequest, ProbeSpec,
};

/// What discovery sends to the owner of the probes.
#[derive(Debug)]
pub enum Discovery {
    /// A library to probe, seen for the first time.
    Library(FoundLibrary),
    /// A process that started after its CUDA library was already probed.
    NewProcess(u32),
    /// Whether some process that maps a probed CUDA library, past its
    /// grace (`NewProcessGate`), has no gpu thread now (sent when it
    /// changes): periodic launch windows back off only while every one
    /// has (`ProbeManager::set_unserved`).
    Unserved(bool),
    /// Nothing: wakes the probe thread (`ProbeRequest::wake`).
    Wake,
}

/// The probe thread's side of a message: a library gets its probes, a new
/// process a launch window soon.
impl ProbeRequest for Discovery {
    fn wake() -> Self {
        Discovery::Wake
    }
    fn serve<A>(self, manager: &mut ProbeManager<A::Link>, attacher: &mut A)
    where
        A: Attacher,
        A::Link: Send + 'static,
    {
        match self {
            Discovery::Library(lib) => manager.add_library(attacher, lib),
            Discovery::NewProcess(pid) => {
                debug!("new CUDA process {pid}: launch window soon");
                manager.request_window(Instant::now());
            }
            Discovery::Unserved(unserved) => manager.set_unserved(unserved),
            Discovery::Wake => {}
        }
    }
}

/// Starts library discovery and rules for a task-class map, as configured;
/// with `exec_events` (the scheduler's ring of processes that called
/// exec()), new processes are learned from it (LibraryScanner). What it
/// finds is sent on `tx`. The scanner runs until the returned handle is
/// dropped.
pub fn start_discovery(
    cfg: &crate::config::ClassifyConfig,
    task_class: MapHandle,
    exec_events: Option<MapHandle>,
    tx: Sender<Discovery>,
) -> Result<Scanner> {
    spawn_scanner(
        ProbeSpec::from_config(cfg)?,
        RuleEngine::new(&cfg.rules)?,
        TaskMap::new(task_class),
        exec_events,
        Duration::from_millis(cfg.scan_interval_ms),
        tx,
    )
}

/// The scanner thread's handle: dropping it stops the thread at its next
/// pass. The scheduler starts a scanner on every attach (a CPU hotplug
/// event re-attaches); one that ran on would scan /proc for nothing and
/// hold the old BPF object's maps.
pub struct Scanner {
    stop: Arc<AtomicBool>,
}

impl Drop for Scanner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Runs library discovery and rules on one thread, so reading /proc never
/// delays scheduling decisions. New libraries are sent on `tx`; the thread
/// ends when the handle is dropped or the receiver is gone.
pub fn spawn_scanner(
    spec: ProbeSpec,
    mut rules: RuleEngine,
    class_map: TaskMap,
    exec_events: Option<MapHandle>,
    interval: Duration,
    tx: Sender<Discovery>,
) -> Result<Scanner> {
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    std::thread::Builder::new()
        .name("express-scan".into())
        .spawn(move || {
            // A full rescan (for dlopen and marks) about every 2 s.
            let full_every = (2000 / interval.as_millis().max(1) as u64).max(1);
            let mut scanner = LibraryScanner::new(spec, full_every);
            if let Some(map) = exec_events {
                match ExecRing::new(&map) {
                    Ok(ring) => scanner = scanner.with_exec_events(Box::new(ring)),
                    // Listing /proc every pass finds the same processes.
                    Err(e) => warn!("exec events unavailable, listing /proc every pass: {e:#}"),
                }
            }
            let mut marks_applied: HashMap<i32, ClassName> = HashMap::new();
            let proc_root = Path::new("/proc");
            let mut gate = NewProcessGate::default();
            let mut unserved = None;
            for pass in 0u64.. {
                if stopped.load(Ordering::Relaxed) {
                    return;
                }
                let found = scanner.scan(proc_root);
                let now = Instant::now();
                for pid in found.new_processes {
                    gate.add(pid, now);
                }
                // About every 2 s: does a CUDA process lack a gpu thread?
                // Not one in its grace: it has not had the time to sync,
                // and counting it would open an overdue periodic window
                // at once, the window its grace holds back.
                if pass.is_multiple_of(full_every) {
                    let u = scanner.launch_processes().any(|pid| {
                        !gate.in_grace(pid)
                            && process_has_gpu_thread(&class_map, proc_root, pid) == Some(false)
                    });
                    if unserved.replace(u) != Some(u) && tx.send(Discovery::Unserved(u)).is_err() {
                        return;
                    }
                }
                let news = gate
                    .due(now, |pid| {
                        process_has_gpu_thread(&class_map, proc_root, pid)
                    })
                    .into_iter()
                    .map(Discovery::NewProcess);
                for msg in found
                    .libraries
                    .into_iter()
                    .map(Discovery::Library)
                    .chain(news)
                {
                    if tx.send(msg).is_err() {
                        return;
                    }
                }
                for (tid, class) in found.marks {
                    if marks_applied.insert(tid, class) != Some(class) {
                        match class_map.set_class(tid, class, Source::Marker) {
                            Ok(_) => debug!("marker registry: {tid} -> {}", class.as_str()),
                            Err(e) => debug!("marker registry: {tid}: {e:#}"),
                        }
                    }
                }
                rules.apply(&class_map, proc_root);
                std::thread::sleep(interval);
            }
        })
        .context("spawning the scanner thread")?;
    Ok(Scanner { stop })
}

/// How long a new CUDA process has to get a gpu thread through the sync
/// probes (always attached) before it is given a launch window.
pub const NEW_PROCESS_GRACE: Duration = Duration::from_secs(1);

/// Holds back the launch window asked for a new CUDA process. Most
/// launchers sync within a token, and a sync probe hit classifies them; a
/// window would only add launch-probe cost to the process's first second.
/// Processes with no gpu thread when their grace ends get the window (a
/// launcher that never syncs itself); the periodic windows catch the rest.
#[derive(Debug, Default)]
pub struct NewProcessGate {
    pending: Vec<(u32, Instant)>,
}

impl NewProcessGate {
    pub fn add(&mut self, pid: u32, now: Instant) {
        if !self.pending.iter().any(|&(p, _)| p == pid) {
            self.pending.push((pid, now + NEW_PROCESS_GRACE));
        }
    }

    /// Whether `pid` is still in its grace.
    pub fn in_grace(&self, pid: u32) -> bool {
        self.pending.iter().any(|&(p, _)| p == pid)
    }

    /// Processes whose grace has ended without a gpu thread.
    /// `has_gpu_thread(pid)` is None for a process that is gone.
    pub fn due(
        &mut self,
        now: Instant,
        mut has_gpu_thread: impl FnMut(u32) -> Option<bool>,
    ) -> Vec<u32> {
        let mut due = Vec::new();
        self.pending.retain(|&(pid, at)| {
            if now < at {
                return true;
            }
            match has_gpu_thread(pid) {
                Some(false) => due.push(pid),
                Some(true) => debug!("new CUDA process {pid}: classified by its syncs, no window"),
                None => {}
            }
            false
        });
        due
    }
}

/// Whether a thread of `pid` is gpu now; None if the process is gone.
fn process_has_gpu_thread(map: &TaskMap, proc_root: &Path, pid: u32) -> Option<bool> {
    let tids = threads_of(proc_root, pid as i32).ok()?;
    let now = monotonic_ns();
    Some(tids.iter().any(|&tid| {
        map.class_info(tid)
            .ok()
            .flatten()
            .is_some_and(|ci| effective_class(&ci, now) == ClassName::Gpu)
    }))
}

/// Where the scanner learns which processes called exec() since its last
/// pass (the scheduler's `exec_events` ring buffer).
pub trait ExecEvents {
    fn take(&mut self) -> HashSet<u32>;
}

/// The scheduler's `exec_events` ring buffer (classify.bpf.c), drained by
/// the scanner on each pass.
struct ExecRing {
    ring: libbpf_rs::RingBuffer<'static>,
    pids: std::rc::Rc<std::cell::RefCell<HashSet<u32>>>,
}

impl ExecRing {
    fn new(map: &MapHandle) -> Result<Self> {
        let pids: std::rc::Rc<std::cell::RefCell<HashSet<u32>>> = Default::default();
        let sink = pids.clone();
        let mut rb = libbpf_rs::RingBufferBuilder::new();
        rb.add(map, move |data: &[u8]| {
            if let Some(b) = data.get(..4) {
                sink.borrow_mut()
                    .insert(u32::from_ne_bytes(b.try_into().unwrap()));
            }
            0
        })?;
        Ok(Self {
            ring: rb.build()?,
            pids,
        })
    }
}

impl ExecEvents for ExecRing {
    fn take(&mut self) -> HashSet<u32> {
        if let Err(e) = self.ring.consume() {
            debug!("exec events: {e}");
        }
        std::mem::take(&mut *self.pids.borrow_mut())
    }
}

/// What one scan found.
#[derive(Debug, Default)]
pub struct ScanResult {
    pub libraries: Vec<FoundLibrary>,
    /// New processes of a library probed for launches (the one that
    /// brought it, and later ones): their launcher may never call a sync
    /// entry point early, so a launch window should open soon
    /// (`ProbeManager::request_window`) if their syncs do not classify them.
    pub new_processes: Vec<u32>,
    /// Marks recorded in processes' mark registries: (tid, class).
    pub marks: Vec<(i32, ClassName)>,
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

    /// Processes seen mapping a library probed for launches.
    pub fn launch_processes(&self) -> impl Iterator<Item = u32> + '_ {
        self.launch_pids.iter().copied()
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
                    self.inspect(key, &open_path, m.path, pid, out);
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
        out: &mut ScanResult,
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
                    // The process that brought the library is new to it
                    // too: the same grace for its syncs, then a window if
                    // they did not classify it (`NewProcessGate`).
                    if self.launch_pids.insert(pid) {
                        out.new_processes.push(pid);
                    }
                }
                let open_path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
                out.libraries.push(FoundLibrary {
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

/// A process's mapped size in pages (the first field of /proc/PID/statm).
fn mapped_size(proc_dir: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(proc_dir.join("statm")).ok()?;
    text.split_whitespace().next()?.parse().ok()
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

/// Layout of the registry in libexpress_mark.so (workloads/marker/
/// express_mark.c; its symbol and offset come from probes.rs,
/// `elf_registry_offset`): marks made before our uprobes were attached are
/// read from there.
const MARK_MAGIC: u64 = 0x4b52414d58505845;
const MARK_SLOTS: usize = 1024;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probes::tests::{host_libc, launch_and_sync_library, FakeAttacher};
    use crate::probes::EXTRA_WINDOW_GAP;

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
        assert_eq!(
            first.new_processes,
            vec![100],
            "the process that brought it is gated like any other"
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
    fn a_new_process_gets_a_window_only_if_its_syncs_did_not_classify_it() {
        let t0 = Instant::now();
        let mut gate = NewProcessGate::default();
        gate.add(10, t0); // will sync: a gpu thread by the end of its grace
        gate.add(11, t0); // launches only
        gate.add(12, t0); // exits
        gate.add(11, t0 + Duration::from_millis(500)); // seen twice: once
        let never = |_| -> Option<bool> { panic!("asked before the grace ended") };
        assert!(gate.due(t0 + NEW_PROCESS_GRACE / 2, never).is_empty());
        // In its grace a process does not make CUDA processes unserved.
        assert!(gate.in_grace(10) && gate.in_grace(11) && !gate.in_grace(13));
        let state = |pid| match pid {
            10 => Some(true),
            11 => Some(false),
            _ => None,
        };
        assert_eq!(gate.due(t0 + NEW_PROCESS_GRACE, state), vec![11]);
        assert!(!gate.in_grace(11), "after its grace it counts");
        assert!(
            gate.due(t0 + 4 * NEW_PROCESS_GRACE, state).is_empty(),
            "each process is decided once"
        );
    }

    #[test]
    fn discovery_messages_probe_libraries_and_ask_for_windows() {
        let mut a = FakeAttacher(vec![]);
        let mut m = ProbeManager::new(Duration::from_millis(100), Duration::from_secs(60));
        Discovery::Library(launch_and_sync_library()).serve(&mut m, &mut a);
        assert_eq!(a.0, vec!["sync"], "the permanent probe at once");
        let t0 = Instant::now();
        m.tick(&mut a, t0);
        assert!(!m.counts().window_open, "a new library opens no window");
        Discovery::NewProcess(6).serve(&mut m, &mut a);
        let t1 = Instant::now();
        m.tick(&mut a, t1);
        assert!(m.counts().window_open, "a process that needs one does");
        let closed = t1 + Duration::from_millis(150);
        m.tick(&mut a, closed);
        assert!(!m.counts().window_open);
        // A new process moves the next window up from the period's end.
        Discovery::NewProcess(7).serve(&mut m, &mut a);
        assert_eq!(m.next_deadline(), Some(closed + EXTRA_WINDOW_GAP));
    }
}
