//! Userspace side of classification: the pinned task-class map, config
//! rules (cgroup, comm, exe), `scx_express mark` and `scx_express ps`.
//!
//! The running scheduler pins its class maps under [`PIN_DIR`] (root only).
//! Writers address a thread through a pidfd, the key of BPF task storage.
//!
//! The rules run on discovery's scanner thread (discovery.rs), which
//! imports this module; this one imports neither discovery.rs nor
//! probes.rs. The /proc listings here (`threads_of`, `all_threads`) serve
//! the rules, `mark` and `ps` first; discovery and `trace` borrow them,
//! and living here keeps the imports one way.

use std::collections::{HashMap, HashSet};
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle};
use log::{debug, warn};

use crate::bpf_intf::{self, task_class_info, task_ctx};
use crate::config::{ClassName, Rule};

/// Where the running scheduler pins its maps.
pub const PIN_DIR: &str = "/sys/fs/bpf/scx_express";
pub const PIN_TASK_CLASS: &str = "task_class";
pub const PIN_TASK_CTXS: &str = "task_ctxs";
pub const PIN_PROC_CLASS: &str = "proc_class";
pub const PIN_TENANT_NAMES: &str = "tenant_names";

/// Who set a class (mirrors enum class_source).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    None = bpf_intf::class_source_SRC_NONE as isize,
    Probe = bpf_intf::class_source_SRC_PROBE as isize,
    Marker = bpf_intf::class_source_SRC_MARKER as isize,
    Rule = bpf_intf::class_source_SRC_RULE as isize,
    Cli = bpf_intf::class_source_SRC_CLI as isize,
}

impl Source {
    pub fn from_raw(v: u32) -> Source {
        match v {
            bpf_intf::class_source_SRC_PROBE => Source::Probe,
            bpf_intf::class_source_SRC_MARKER => Source::Marker,
            bpf_intf::class_source_SRC_RULE => Source::Rule,
            bpf_intf::class_source_SRC_CLI => Source::Cli,
            _ => Source::None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Source::None => "-",
            Source::Probe => "cuda",
            Source::Marker => "marker",
            Source::Rule => "rule",
            Source::Cli => "cli",
        }
    }
}

pub fn class_raw(c: ClassName) -> u32 {
    match c {
        ClassName::Normal => bpf_intf::task_class_CLASS_NORMAL,
        ClassName::Gpu => bpf_intf::task_class_CLASS_GPU,
        ClassName::Agent => bpf_intf::task_class_CLASS_AGENT,
    }
}

pub fn class_from_raw(v: u32) -> ClassName {
    match v {
        bpf_intf::task_class_CLASS_GPU => ClassName::Gpu,
        bpf_intf::task_class_CLASS_AGENT => ClassName::Agent,
        _ => ClassName::Normal,
    }
}

/// The class an entry grants at `now_ns`, as BPF computes it: a class
/// learned from CUDA calls lapses after the thread stops calling.
pub fn effective_class(ci: &task_class_info, now_ns: u64) -> ClassName {
    if Source::from_raw(ci.source) == Source::Probe && now_ns > ci.demote_at_ns {
        return ClassName::Normal;
    }
    class_from_raw(ci.class)
}

/// CLOCK_MONOTONIC in ns, the clock of bpf_ktime_get_ns().
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A pidfd for one thread (Linux >= 6.9: PIDFD_THREAD).
fn pidfd_of_thread(tid: i32) -> std::io::Result<OwnedFd> {
    const PIDFD_THREAD: libc::c_uint = libc::O_EXCL as libc::c_uint;
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, tid, PIDFD_THREAD) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// A class entry with nothing set (the struct is plain old data).
pub fn empty_class_info() -> task_class_info {
    // SAFETY: every field is an integer; all zeroes is a valid value.
    unsafe { std::mem::zeroed() }
}

pub fn read_pod<T: Copy>(bytes: &[u8]) -> Option<T> {
    (bytes.len() >= size_of::<T>())
        .then(|| unsafe { std::ptr::read_unaligned(bytes.as_ptr() as *const T) })
}

fn pod_bytes<T: Copy>(v: &T) -> &[u8] {
    unsafe { std::slice::from_raw_parts(v as *const T as *const u8, size_of::<T>()) }
}

/// A task-storage map addressed by thread id.
pub struct TaskMap {
    map: MapHandle,
}

impl TaskMap {
    pub fn new(map: MapHandle) -> Self {
        Self { map }
    }

    /// Opens a map pinned by the running scheduler.
    pub fn open_pinned(name: &str) -> Result<Self> {
        let path = Path::new(PIN_DIR).join(name);
        if !Path::new(PIN_DIR).exists() {
            bail!("scx_express is not running ({PIN_DIR} does not exist)");
        }
        let map = MapHandle::from_pinned_path(&path)
            .with_context(|| format!("opening {} (needs root)", path.display()))?;
        Ok(Self { map })
    }

    fn get<T: Copy>(&self, tid: i32) -> Result<Option<T>> {
        let fd = match pidfd_of_thread(tid) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("pidfd_open({tid})")),
        };
        let key = fd.as_raw_fd().to_ne_bytes();
        Ok(self
            .map
            .lookup(&key, MapFlags::ANY)?
            .and_then(|v| read_pod::<T>(&v)))
    }

    fn put<T: Copy>(&self, tid: i32, v: &T) -> Result<()> {
        let fd = pidfd_of_thread(tid).with_context(|| format!("thread {tid} not found"))?;
        let key = fd.as_raw_fd().to_ne_bytes();
        self.map
            .update(&key, pod_bytes(v), MapFlags::ANY)
            .with_context(|| format!("writing the class of thread {tid}"))
    }

    pub fn class_info(&self, tid: i32) -> Result<Option<task_class_info>> {
        self.get(tid)
    }

    pub fn task_ctx(&self, tid: i32) -> Result<Option<task_ctx>> {
        self.get(tid)
    }

    /// Sets a thread's class from `source`, unless a higher-ranked source
    /// owns it (the CLI always wins). Keeps the probe counters.
    /// Returns whether the class was written.
    pub fn set_class(&self, tid: i32, class: ClassName, source: Source) -> Result<bool> {
        let mut ci = self.class_info(tid)?.unwrap_or_else(empty_class_info);
        if source != Source::Cli && Source::from_raw(ci.source) > source {
            return Ok(false);
        }
        ci.class = class_raw(class);
        ci.source = source as u32;
        self.put(tid, &ci)?;
        Ok(true)
    }

    /// Drops a class set by `source` (back to what probes decide).
    pub fn clear_class(&self, tid: i32, source: Source) -> Result<()> {
        if let Some(mut ci) = self.class_info(tid)? {
            if Source::from_raw(ci.source) == source {
                ci.class = bpf_intf::task_class_CLASS_NORMAL;
                ci.source = Source::None as u32;
                self.put(tid, &ci)?;
            }
        }
        Ok(())
    }
}

/// Thread ids of a process.
pub fn threads_of(proc_root: &Path, pid: i32) -> Result<Vec<i32>> {
    let dir = proc_root.join(pid.to_string()).join("task");
    let mut tids: Vec<i32> = std::fs::read_dir(&dir)
        .with_context(|| format!("process {pid} not found"))?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    Ok(tids)
}

/// Every process id under `proc_root` (empty if it cannot be read).
fn pids(proc_root: &Path) -> Vec<i32> {
    let Ok(procs) = std::fs::read_dir(proc_root) else {
        return Vec::new();
    };
    procs
        .flatten()
        .filter_map(|p| p.file_name().to_str()?.parse().ok())
        .collect()
}

/// Every (pid, tid) on the system.
pub fn all_threads(proc_root: &Path) -> Vec<(i32, i32)> {
    let mut out = Vec::new();
    for pid in pids(proc_root) {
        if let Ok(tids) = threads_of(proc_root, pid) {
            out.extend(tids.into_iter().map(|t| (pid, t)));
        }
    }
    out
}

fn read_trimmed(path: PathBuf) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim_end().to_string())
}

/// What rules look at, for one thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadFacts {
    pub comm: String,
    pub exe: String,
    pub cgroup: String,
}

/// The cgroup v2 path in a `/proc/.../cgroup` file: its line "0::/path".
fn cgroup_v2_path(file: &str) -> String {
    file.lines()
        .find_map(|l| l.strip_prefix("0::").map(str::to_string))
        .unwrap_or_default()
}

/// A rule ready to match.
pub struct CompiledRule {
    pub class: ClassName,
    cgroup_prefix: Option<String>,
    comm: Option<glob::Pattern>,
    exe: Option<glob::Pattern>,
}

impl CompiledRule {
    pub fn new(r: &Rule) -> Result<Self> {
        let pat = |g: &Option<String>| {
            g.as_ref()
                .map(|g| glob::Pattern::new(g).with_context(|| format!("bad glob {g:?}")))
                .transpose()
        };
        Ok(Self {
            class: r.class,
            cgroup_prefix: r
                .cgroup_prefix
                .as_ref()
                .map(|p| p.trim_end_matches('/').to_string()),
            comm: pat(&r.comm)?,
            exe: pat(&r.exe)?,
        })
    }

    pub fn matches(&self, t: &ThreadFacts) -> bool {
        let cgroup_ok = self.cgroup_prefix.as_ref().is_none_or(|p| {
            t.cgroup == *p
                || (t.cgroup.starts_with(p.as_str()) && t.cgroup[p.len()..].starts_with('/'))
                || p.is_empty()
        });
        cgroup_ok
            && self.comm.as_ref().is_none_or(|g| g.matches(&t.comm))
            && self.exe.as_ref().is_none_or(|g| g.matches(&t.exe))
    }
}

/// The class the first matching rule gives a thread.
pub fn rule_class(rules: &[CompiledRule], t: &ThreadFacts) -> Option<ClassName> {
    rules.iter().find(|r| r.matches(t)).map(|r| r.class)
}

/// Which facts the rules look at. The others are not read: each is a file
/// read per thread per pass, every `scan_interval_ms`, and a GPU host runs
/// 10^3-10^4 threads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Needs {
    comm: bool,
    exe: bool,
    cgroup: bool,
}

/// Applies rules to every thread, writing only what changed.
pub struct RuleEngine {
    rules: Vec<CompiledRule>,
    needs: Needs,
    applied: HashMap<i32, ClassName>,
    /// Kernel threads seen, not looked at again until the next reset (a
    /// pid can be reused, so it is forgotten every KERNEL_RECHECK passes).
    kernel: HashSet<i32>,
    passes: u32,
}

/// Passes between two looks at the kernel threads' pids (about 2 s at the
/// default scan interval); a readlink per kernel thread per pass was most
/// of a pass's cost.
const KERNEL_RECHECK: u32 = 8;

impl RuleEngine {
    pub fn new(rules: &[Rule]) -> Result<Self> {
        let needs = Needs {
            comm: rules.iter().any(|r| r.comm.is_some()),
            exe: rules.iter().any(|r| r.exe.is_some()),
            cgroup: rules.iter().any(|r| r.cgroup_prefix.is_some()),
        };
        Ok(Self {
            rules: rules.iter().map(CompiledRule::new).collect::<Result<_>>()?,
            needs,
            applied: HashMap::new(),
            kernel: HashSet::new(),
            passes: 0,
        })
    }

    /// The class each user thread under `proc_root` gets from the rules.
    /// Kernel threads (no `exe`) are skipped: rules never class them, and
    /// they are most of the threads of a small machine (a 2-vCPU VM: about
    /// 100 of 150), so reading them made a pass with a comm rule cost the
    /// daemon over 10% of a CPU there.
    pub fn matches_in(&mut self, proc_root: &Path) -> Vec<(i32, ClassName)> {
        let mut out = Vec::new();
        if self.rules.is_empty() {
            return out;
        }
        self.passes = self.passes.wrapping_add(1);
        if self.passes.is_multiple_of(KERNEL_RECHECK) {
            self.kernel.clear();
        }
        for pid in pids(proc_root) {
            if self.kernel.contains(&pid) {
                continue;
            }
            let pdir = proc_root.join(pid.to_string());
            let Ok(exe) = std::fs::read_link(pdir.join("exe")) else {
                // A kernel thread, a zombie, or gone: none has a class to get.
                self.kernel.insert(pid);
                continue;
            };
            let exe = if self.needs.exe {
                exe.to_string_lossy().into_owned()
            } else {
                String::new()
            };
            let Ok(tids) = threads_of(proc_root, pid) else {
                continue;
            };
            for tid in tids {
                let tdir = pdir.join("task").join(tid.to_string());
                let field = |need: bool, name: &str| {
                    if need {
                        read_trimmed(tdir.join(name))
                    } else {
                        Some(String::new())
                    }
                };
                let (Some(comm), Some(cgroup)) = (
                    field(self.needs.comm, "comm"),
                    field(self.needs.cgroup, "cgroup"),
                ) else {
                    continue; // exited meanwhile
                };
                let facts = ThreadFacts {
                    comm,
                    exe: exe.clone(),
                    cgroup: cgroup_v2_path(&cgroup),
                };
                if let Some(class) = rule_class(&self.rules, &facts) {
                    out.push((tid, class));
                }
            }
        }
        out
    }

    pub fn apply(&mut self, map: &TaskMap, proc_root: &Path) {
        let now_applied: HashMap<i32, ClassName> = self.matches_in(proc_root).into_iter().collect();
        for (&tid, &class) in &now_applied {
            if self.applied.get(&tid) != Some(&class) {
                match map.set_class(tid, class, Source::Rule) {
                    Ok(_) => debug!("rule: {tid} -> {}", class.as_str()),
                    Err(e) => debug!("rule: {tid}: {e:#}"),
                }
            }
        }
        // It left the cgroup, changed name, or exited: undo our class.
        for tid in self.applied.keys() {
            if !now_applied.contains_key(tid) {
                let _ = map.clear_class(*tid, Source::Rule);
            }
        }
        self.applied = now_applied;
    }
}

/// `scx_express mark`: sets (or clears) the class of threads.
pub fn mark(
    pid: Option<i32>,
    tid: Option<i32>,
    class: Option<ClassName>,
    clear: bool,
) -> Result<()> {
    crate::preflight::require_root(
        "scx_express mark",
        "task classes live in a root-only BPF map",
    )?;
    crate::preflight::require_express_running()?;
    let map = TaskMap::open_pinned(PIN_TASK_CLASS)?;
    let proc_root = Path::new("/proc");
    let tids = match (pid, tid) {
        (Some(p), None) => threads_of(proc_root, p)?,
        (None, Some(t)) => {
            if !proc_root.join(t.to_string()).exists() {
                bail!("thread {t} not found");
            }
            vec![t]
        }
        _ => bail!("give exactly one of --pid or --tid"),
    };
    for t in &tids {
        if clear {
            map.clear_class(*t, Source::Cli)?;
        } else {
            let class = class.context("give --class gpu|agent|normal, or --clear")?;
            map.set_class(*t, class, Source::Cli)?;
        }
    }
    match (clear, class) {
        (true, _) => println!("cleared {} thread(s)", tids.len()),
        (false, Some(c)) => println!("marked {} thread(s) {}", tids.len(), c.as_str()),
        _ => {}
    }
    Ok(())
}

/// One row of `scx_express ps`.
#[derive(Debug, Clone)]
pub struct PsRow {
    pub tid: i32,
    pub pid: i32,
    pub comm: String,
    pub class: ClassName,
    pub source: &'static str,
    pub launches: u64,
    pub syncs: u64,
    pub tokens_ms: Option<f64>,
    /// The tenant BPF last resolved for it (at its last wakeup), if any.
    pub tenant: Option<String>,
}

/// Classified threads: those with a class source or CUDA calls seen.
pub fn ps_rows() -> Result<Vec<PsRow>> {
    crate::preflight::require_root("scx_express ps", "task classes live in a root-only BPF map")?;
    crate::preflight::require_express_running()?;
    let classes = TaskMap::open_pinned(PIN_TASK_CLASS)?;
    let ctxs = TaskMap::open_pinned(PIN_TASK_CTXS)?;
    let procs = MapHandle::from_pinned_path(Path::new(PIN_DIR).join(PIN_PROC_CLASS)).ok();
    let tenants = tenant_names();
    let proc_root = Path::new("/proc");
    let now = monotonic_ns();
    let mut rows = Vec::new();
    for (pid, tid) in all_threads(proc_root) {
        let own = classes.class_info(tid).unwrap_or(None);
        let (ci, source) = match own {
            Some(ci) if ci.source != 0 || ci.launches + ci.syncs > 0 => {
                (ci, Source::from_raw(ci.source).as_str())
            }
            _ => {
                let key = (pid as u32).to_ne_bytes();
                let Some(ci) = procs
                    .as_ref()
                    .and_then(|m| m.lookup(&key, MapFlags::ANY).ok().flatten())
                    .and_then(|v| read_pod::<task_class_info>(&v))
                else {
                    continue;
                };
                (ci, "process")
            }
        };
        let comm = read_trimmed(
            proc_root
                .join(pid.to_string())
                .join("task")
                .join(tid.to_string())
                .join("comm"),
        )
        .unwrap_or_default();
        let tctx = ctxs.task_ctx(tid).ok().flatten();
        let tokens_ms = tctx
            .as_ref()
            .filter(|c| c.refill_ns != 0)
            .map(|c| c.tokens_ns as f64 / 1e6);
        let tenant = tctx
            .filter(|c| c.tenant != 0)
            .and_then(|c| tenants.get(c.tenant as usize - 1).cloned())
            .filter(|n| !n.is_empty());
        rows.push(PsRow {
            tid,
            pid,
            comm,
            class: effective_class(&ci, now),
            source,
            launches: ci.launches,
            syncs: ci.syncs,
            tokens_ms,
            tenant,
        });
    }
    Ok(rows)
}

/// The tenants' names by index, from the pinned `tenant_names` map (empty
/// if the running scheduler has none).
fn tenant_names() -> Vec<String> {
    let Ok(map) = MapHandle::from_pinned_path(Path::new(PIN_DIR).join(PIN_TENANT_NAMES)) else {
        return Vec::new();
    };
    (0..crate::bpf_intf::express_consts_MAX_TENANTS as u32)
        .map(|i| {
            let v = map.lookup(&i.to_ne_bytes(), MapFlags::ANY).ok().flatten();
            let v = v.unwrap_or_default();
            let end = v.iter().position(|&b| b == 0).unwrap_or(v.len());
            String::from_utf8_lossy(&v[..end]).into_owned()
        })
        .collect()
}

pub fn print_ps(rows: &[PsRow]) {
    println!(
        "{:>8} {:>8} {:<16} {:<7} {:<8} {:>10} {:>10} {:>10} {:<16}",
        "TID", "PID", "COMM", "CLASS", "SOURCE", "LAUNCHES", "SYNCS", "TOKENS_MS", "TENANT"
    );
    for r in rows {
        println!("{}", ps_line(r));
    }
}

/// One `ps` row. Every column has a word, `-` where there is no value (a
/// thread that exited while `ps` read it has no comm): scripts split the
/// rows on blanks, and an empty column would shift the others.
fn ps_line(r: &PsRow) -> String {
    format!(
        "{:>8} {:>8} {:<16} {:<7} {:<8} {:>10} {:>10} {:>10} {:<16}",
        r.tid,
        r.pid,
        if r.comm.is_empty() { "-" } else { &r.comm },
        r.class.as_str(),
        r.source,
        r.launches,
        r.syncs,
        r.tokens_ms
            .map(|t| format!("{t:.1}"))
            .unwrap_or_else(|| "-".into()),
        r.tenant.as_deref().unwrap_or("-")
    )
}

/// Pins the class maps for `mark` and `ps`; unpins on drop.
pub struct Pins {
    paths: Vec<PathBuf>,
}

impl Pins {
    pub fn pin(maps: &mut [(&str, &mut libbpf_rs::MapMut)]) -> Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        let dir = Path::new(PIN_DIR);
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating {PIN_DIR} (is bpffs mounted on /sys/fs/bpf?)"))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        let mut paths = Vec::new();
        for (name, map) in maps.iter_mut() {
            let path = dir.join(name);
            if path.exists() {
                warn!("removing stale pin {}", path.display());
                std::fs::remove_file(&path)?;
            }
            map.pin(&path)
                .with_context(|| format!("pinning {}", path.display()))?;
            paths.push(path);
        }
        Ok(Self { paths })
    }
}

impl Drop for Pins {
    fn drop(&mut self) {
        for p in &self.paths {
            let _ = std::fs::remove_file(p);
        }
        let _ = std::fs::remove_dir(PIN_DIR);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(comm: &str, exe: &str, cgroup: &str) -> ThreadFacts {
        ThreadFacts {
            comm: comm.into(),
            exe: exe.into(),
            cgroup: cgroup.into(),
        }
    }

    fn rule(
        class: ClassName,
        cg: Option<&str>,
        comm: Option<&str>,
        exe: Option<&str>,
    ) -> CompiledRule {
        CompiledRule::new(&Rule {
            class,
            cgroup_prefix: cg.map(Into::into),
            comm: comm.map(Into::into),
            exe: exe.map(Into::into),
        })
        .unwrap()
    }

    #[test]
    fn cgroup_prefix_matches_whole_components() {
        let r = rule(ClassName::Agent, Some("/agents"), None, None);
        assert!(r.matches(&facts("a", "/bin/a", "/agents")));
        assert!(r.matches(&facts("a", "/bin/a", "/agents/job1")));
        assert!(!r.matches(&facts("a", "/bin/a", "/agents2")));
        assert!(!r.matches(&facts("a", "/bin/a", "/")));
    }

    #[test]
    fn all_given_fields_must_match() {
        let r = rule(ClassName::Gpu, Some("/inference"), Some("python*"), None);
        assert!(r.matches(&facts("python3", "/usr/bin/python3", "/inference/x")));
        assert!(!r.matches(&facts("bash", "/bin/bash", "/inference/x")));
        assert!(!r.matches(&facts("python3", "/usr/bin/python3", "/batch")));
    }

    #[test]
    fn first_matching_rule_wins() {
        let rules = vec![
            rule(ClassName::Agent, None, Some("agent-*"), None),
            rule(ClassName::Gpu, None, None, Some("/opt/*")),
        ];
        assert_eq!(
            rule_class(&rules, &facts("agent-loop", "/opt/x", "/")),
            Some(ClassName::Agent)
        );
        assert_eq!(
            rule_class(&rules, &facts("worker", "/opt/x", "/")),
            Some(ClassName::Gpu)
        );
        assert_eq!(rule_class(&rules, &facts("worker", "/usr/x", "/")), None);
    }

    #[test]
    fn probe_class_lapses_others_do_not() {
        let mut ci = empty_class_info();
        ci.class = class_raw(ClassName::Gpu);
        ci.source = Source::Probe as u32;
        ci.demote_at_ns = 1000;
        assert_eq!(effective_class(&ci, 999), ClassName::Gpu);
        assert_eq!(effective_class(&ci, 1001), ClassName::Normal);
        ci.source = Source::Cli as u32;
        assert_eq!(effective_class(&ci, 1001), ClassName::Gpu);
    }

    #[test]
    fn sources_rank_cli_highest() {
        assert!(Source::Cli > Source::Rule);
        assert!(Source::Rule > Source::Marker);
        assert!(Source::Marker > Source::Probe);
        assert!(Source::Probe > Source::None);
    }

    #[test]
    fn rules_skip_kernel_threads_and_read_only_what_they_match_on() {
        let root = std::env::temp_dir().join(format!("scx-rules-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let thread = |pid: i32, tid: i32, comm: &str, cgroup: Option<&str>| {
            let t = root.join(format!("{pid}/task/{tid}"));
            std::fs::create_dir_all(&t).unwrap();
            std::fs::write(t.join("comm"), format!("{comm}\n")).unwrap();
            if let Some(cg) = cgroup {
                std::fs::write(t.join("cgroup"), format!("0::{cg}\n")).unwrap();
            }
        };
        thread(2, 2, "launcher", Some("/")); // a kernel thread: no exe
        thread(10, 10, "python3", Some("/jobs/a"));
        thread(10, 11, "launcher", Some("/jobs/a"));
        thread(20, 20, "launcher", None); // no cgroup file: only comm rules read
        std::os::unix::fs::symlink("/usr/bin/python3", root.join("10/exe")).unwrap();
        std::os::unix::fs::symlink("/opt/x", root.join("20/exe")).unwrap();

        let mut comm_only = RuleEngine::new(&[Rule {
            class: ClassName::Gpu,
            cgroup_prefix: None,
            comm: Some("launcher".into()),
            exe: None,
        }])
        .unwrap();
        let mut got = comm_only.matches_in(&root);
        got.sort_unstable_by_key(|&(t, _)| t);
        assert_eq!(got, vec![(11, ClassName::Gpu), (20, ClassName::Gpu)]);

        let mut by_cgroup = RuleEngine::new(&[Rule {
            class: ClassName::Agent,
            cgroup_prefix: Some("/jobs".into()),
            comm: None,
            exe: None,
        }])
        .unwrap();
        let mut got = by_cgroup.matches_in(&root);
        got.sort_unstable_by_key(|&(t, _)| t);
        assert_eq!(got, vec![(10, ClassName::Agent), (11, ClassName::Agent)]);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn this_process_has_threads() {
        let me = std::process::id() as i32;
        let tids = threads_of(Path::new("/proc"), me).unwrap();
        assert!(tids.contains(&me));
        // The rule pass reads this thread's comm and cgroup from the real /proc.
        let mut any = RuleEngine::new(&[Rule {
            class: ClassName::Agent,
            cgroup_prefix: Some(String::new()),
            comm: Some("*".into()),
            exe: None,
        }])
        .unwrap();
        assert!(any
            .matches_in(Path::new("/proc"))
            .contains(&(me, ClassName::Agent)));
    }

    /// A thread that exited mid-`ps` (no comm, no task context) still has
    /// a word in every column: the class stays the fourth word.
    #[test]
    fn ps_line_keeps_every_column() {
        let mut r = PsRow {
            tid: 824,
            pid: 798,
            comm: String::new(),
            class: ClassName::Gpu,
            source: "cuda",
            launches: 0,
            syncs: 1232,
            tokens_ms: None,
            tenant: None,
        };
        let words = |r: &PsRow| {
            ps_line(r)
                .split_whitespace()
                .map(String::from)
                .collect::<Vec<_>>()
        };
        let w = words(&r);
        assert_eq!(w.len(), 9, "{w:?}");
        assert_eq!((w[2].as_str(), w[3].as_str()), ("-", "gpu"));
        r.comm = "launcher".into();
        r.tokens_ms = Some(18.84);
        assert_eq!(words(&r)[2..4], ["launcher", "gpu"]);
        assert_eq!(words(&r)[7], "18.8");
    }
}
