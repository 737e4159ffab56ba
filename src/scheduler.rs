//! The scheduler loop: load and attach the BPF side, then serve the fair
//! path (tasks in from the `queued` ring buffer, decisions out through the
//! `dispatched` user ring buffer) until asked to stop or the kernel ejects
//! the scheduler.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::mem::{size_of, MaybeUninit};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapFlags, OpenObject, RingBufferBuilder, UserRingBuffer};
use log::{debug, error, info, warn};
use scx_utils::{scx_ops_attach, scx_ops_load, scx_ops_open, uei_exited, uei_report, UserExitInfo};

use scx_utils::Topology;

use crate::bpf_intf;
use crate::bpf_skel::{BpfSkel, BpfSkelBuilder};
use crate::classify::{self, Pins};
use crate::config::{Config, ConfigSource, FairMode, Scope};
use crate::discovery;
use crate::fair::{Decision, FairParams, FairPolicy, Runnable};
use crate::preflight;
use crate::probes::{Attacher, ProbeKind, ProbeManager, ProbePoint, ProbeThread};
use crate::signals::Signals;
use crate::stats::{
    self, ClassMetrics, CpuMetrics, Metrics, SharedMetrics, Source, TenantMetrics, CLASS_STATS,
    STATS, TENANT_STATS,
};

const US: u64 = 1_000;
const MS: u64 = 1_000_000;

/// How long one ring-buffer poll may block (userspace mode), so signals
/// are seen promptly.
const POLL_TIMEOUT: Duration = Duration::from_millis(100);
/// How often counters are refreshed and forgotten tasks pruned.
const HOUSEKEEPING: Duration = Duration::from_secs(1);
/// Tasks the fair policy has not seen for this long are forgotten.
const FORGET_AFTER_NS: u64 = 30_000 * MS;

pub fn fair_params(cfg: &Config) -> FairParams {
    FairParams {
        slice_max_ns: cfg.fair.slice_max_us * US,
        slice_min_ns: cfg.fair.slice_min_us * US,
        target_latency_ns: cfg.fair.target_latency_us * US,
    }
}

/// Writes the reloadable knobs (the BPF `.data.knobs` section) from `cfg`.
/// Used before load and on every accepted reload.
pub fn apply_knobs(k: &mut crate::bpf_skel::types::data_knobs, cfg: &Config, topo: &Topology) {
    k.slice_max_ns = cfg.fair.slice_max_us * US;
    k.slice_min_ns = cfg.fair.slice_min_us * US;
    k.target_latency_ns = cfg.fair.target_latency_us * US;
    k.rescue_ns = cfg.fair.rescue_ms * MS;
    k.direct_idle = cfg.fair.direct_idle;
    k.fair_wakeup_preempt = cfg.fair.wakeup_preempt;
    k.fair_requeue_preempted = cfg.fair.requeue_preempted;
    k.express_slice_ns = cfg.express.slice_us * US;
    k.idle_demote_ns = cfg.classify.idle_demote_ms * MS;
    k.irq_window_ns = cfg.express.irq_window_ms * MS;
    k.irq_hot_pct = cfg.express.irq_hot_pct as u32;
    k.express_preempt = cfg.express.preempt;
    k.express_quiet_only = cfg.express.quiet_only;
    k.express_avoid_slow_idle = cfg.express.avoid_slow_idle;
    for &id in topo.all_cpus.keys() {
        if id < k.deep_idle_state.len() {
            k.deep_idle_state[id] = first_deep_idle_state(id, cfg.express.deep_idle_us);
        }
    }
    let nr_cpus = topo.all_cpus.len() as f64;
    // hold.bpf.c: one CPU is never held.
    k.hold_max_cpus = topo.all_cpus.len().saturating_sub(1) as u32;
    let classes = [
        (bpf_intf::task_class_CLASS_GPU, &cfg.classes.gpu),
        (bpf_intf::task_class_CLASS_AGENT, &cfg.classes.agent),
    ];
    for (idx, class) in classes {
        let i = idx as usize;
        k.class_scope_process[i] = class.scope == Scope::Process;
        k.class_enabled[i] = class.enabled;
        k.class_burst_ns[i] = class.burst_ms * MS;
        k.class_rate_ppm[i] = (class.rate * 1e6).round() as u64;
        // The quota's capacity (budget.bpf.c), all CPUs together.
        k.class_quota_ns[i] = quota_ns(class.max_share, nr_cpus);
        k.class_lat_target_ns[i] = class.latency_target_us * US;
        k.class_hold_ns[i] = class.hold_us * US;
        k.class_hold_whole[i] = class.hold_whole;
    }
    apply_tenant_knobs(k, cfg, nr_cpus);
}

/// A quota's capacity (budget.bpf.c) for `share` of `nr_cpus`: lane time
/// per `QUOTA_PERIOD_MS`, which is also its refill.
fn quota_ns(share: f64, nr_cpus: f64) -> u64 {
    let period_ns = (bpf_intf::express_consts_QUOTA_PERIOD_MS as u64 * MS) as f64;
    (share * nr_cpus * period_ns) as u64
}

/// The tenants' knobs: index i is `cfg.tenants[i]`; unused slots have
/// class 0, which matches no task.
fn apply_tenant_knobs(k: &mut crate::bpf_skel::types::data_knobs, cfg: &Config, nr_cpus: f64) {
    k.nr_tenants = cfg.tenants.len().min(k.tenant_class.len()) as u32;
    for i in 0..k.tenant_class.len() {
        let Some(t) = cfg.tenants.get(i) else {
            k.tenant_class[i] = 0;
            continue;
        };
        let b = t.budget(&cfg.classes);
        k.tenant_class[i] = class_idx(t.class);
        k.tenant_burst_ns[i] = b.burst_ms * MS;
        k.tenant_rate_ppm[i] = (b.rate * 1e6).round() as u64;
        k.tenant_quota_ns[i] = quota_ns(b.max_share, nr_cpus);
        k.tenant_lat_target_ns[i] = b.latency_target_us * US;
    }
}

/// A class's index in BPF (enum task_class).
fn class_idx(c: crate::config::ClassName) -> u32 {
    use crate::config::ClassName;
    match c {
        ClassName::Normal => bpf_intf::task_class_CLASS_NORMAL,
        ClassName::Gpu => bpf_intf::task_class_CLASS_GPU,
        ClassName::Agent => bpf_intf::task_class_CLASS_AGENT,
    }
}

/// Pins the maps `mark` and `ps` read, and writes the tenants' cgroups.
fn pin_maps(skel: &mut BpfSkel, cfg: &Config) -> Result<(Pins, crate::tenants::TenantCgroups)> {
    let pins = Pins::pin(&mut [
        (classify::PIN_TASK_CLASS, &mut skel.maps.task_class),
        (classify::PIN_TASK_CTXS, &mut skel.maps.task_ctxs),
        (classify::PIN_PROC_CLASS, &mut skel.maps.proc_class),
        (classify::PIN_TENANT_NAMES, &mut skel.maps.tenant_names),
    ])?;
    let mut tenant_cgroups = crate::tenants::TenantCgroups::default();
    let maps = &skel.maps;
    tenant_cgroups.sync(&maps.tenant_cgroups, &maps.tenant_names, &cfg.tenants)?;
    Ok((pins, tenant_cgroups))
}

/// The latency histogram of `group` (a class, or NR_CLASSES + tenant) in
/// the summed `lat_stats`.
fn lat_hist(lat: &[u64], group: u32) -> Vec<u64> {
    use bpf_intf::*;
    let base = (group * lat_stat_idx_NR_LAT_STATS + lat_stat_idx_LAT_HIST) as usize;
    lat[base..base + express_consts_LAT_BUCKETS as usize].to_vec()
}

/// The IRQ shield's CPUs (placement.bpf.c). Not in apply_knobs: the
/// shield is set up once per start, not on reload.
fn apply_shield_knobs(
    k: &mut crate::bpf_skel::types::data_knobs,
    shielded: &std::collections::BTreeSet<usize>,
) {
    for &cpu in shielded {
        if let Some(slot) = k.cpu_shielded.get_mut(cpu) {
            *slot = 1;
            k.nr_shielded += 1;
        }
    }
}

/// The first cpuidle state of `cpu` whose exit latency exceeds `limit_us`
/// (255 if none, or no cpuidle driver): states are ordered by depth.
pub fn first_deep_idle_state(cpu: usize, limit_us: u64) -> u8 {
    let dir = format!("/sys/devices/system/cpu/cpu{cpu}/cpuidle");
    (0..64u8)
        .map_while(|k| {
            std::fs::read_to_string(format!("{dir}/state{k}/latency"))
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .position(|lat| lat > limit_us)
        .map(|k| k as u8)
        .unwrap_or(u8::MAX)
}

pub struct Scheduler<'a> {
    skel: BpfSkel<'a>,
    struct_ops: Option<libbpf_rs::Link>,
    policy: FairPolicy,
    /// Attaches and detaches the uprobes; stopped before `skel` goes.
    probes: Option<ProbeThread>,
    /// Scans /proc for libraries and applies rules until dropped.
    _scanner: discovery::Scanner,
    cfg: Config,
    topo: Topology,
    irq_window_ns: u64,
    /// Longest enqueue -> read delay of a queued task this second.
    user_lag_max_ns: u64,
    /// Keeps the tenants' cgroup ids in BPF current.
    tenant_cgroups: crate::tenants::TenantCgroups,
    _pins: Pins,
}

impl Drop for Scheduler<'_> {
    fn drop(&mut self) {
        // The probe thread uses the skeleton's programs: stop it first.
        self.probes.take();
    }
}

/// Attaches uprobes with the programs of classify.bpf.c, on the probe
/// thread.
struct SkelAttacher {
    launch: ProgPtr,
    sync: ProgPtr,
    mark_agent: ProgPtr,
    mark_gpu: ProgPtr,
    mark_normal: ProgPtr,
}

/// A loaded BPF program, handed to the probe thread.
struct ProgPtr(std::ptr::NonNull<libbpf_rs::libbpf_sys::bpf_program>);

// SAFETY: libbpf only reads a loaded program to attach it, the scheduler
// thread never touches these programs after load, and the BPF object
// outlives the probe thread (Scheduler::drop stops it first).
unsafe impl Send for ProgPtr {}

impl ProgPtr {
    fn of(prog: &libbpf_rs::ProgramMut<'_>) -> Self {
        use libbpf_rs::AsRawLibbpf;
        Self(prog.as_libbpf_object())
    }
}

impl Attacher for SkelAttacher {
    type Link = libbpf_rs::Link;

    fn attach(&mut self, path: &std::path::Path, point: &ProbePoint) -> Result<libbpf_rs::Link> {
        use crate::config::ClassName;
        let ptr = match point.kind {
            ProbeKind::Launch => &mut self.launch,
            ProbeKind::Sync => &mut self.sync,
            ProbeKind::Mark(ClassName::Agent) => &mut self.mark_agent,
            ProbeKind::Mark(ClassName::Gpu) => &mut self.mark_gpu,
            ProbeKind::Mark(ClassName::Normal) => &mut self.mark_normal,
        };
        // SAFETY: see ProgPtr; the program is valid while the thread runs.
        let prog = libbpf_rs::ProgramMut::new_mut(unsafe { ptr.0.as_mut() });
        Ok(prog.attach_uprobe(false, -1, path, point.offset as usize)?)
    }
}

/// Starts discovery and rules (discovery.rs) and the probe thread that
/// attaches what discovery finds. Both stop when their handles drop.
fn start_classification(
    skel: &BpfSkel<'_>,
    cfg: &Config,
) -> Result<(discovery::Scanner, ProbeThread)> {
    let (found_tx, found) = std::sync::mpsc::channel();
    let scanner = discovery::start_discovery(
        &cfg.classify,
        libbpf_rs::MapHandle::try_from(&skel.maps.task_class)?,
        Some(libbpf_rs::MapHandle::try_from(&skel.maps.exec_events)?),
        found_tx.clone(),
    )?;
    let progs = &skel.progs;
    let attacher = SkelAttacher {
        launch: ProgPtr::of(&progs.cuda_launch),
        sync: ProgPtr::of(&progs.cuda_sync),
        mark_agent: ProgPtr::of(&progs.mark_agent),
        mark_gpu: ProgPtr::of(&progs.mark_gpu),
        mark_normal: ProgPtr::of(&progs.mark_normal),
    };
    let manager = ProbeManager::new(
        Duration::from_millis(cfg.classify.launch_window_ms),
        Duration::from_millis(cfg.classify.launch_period_ms),
    );
    let probes = ProbeThread::spawn(attacher, manager, found, found_tx)?;
    Ok((scanner, probes))
}

impl<'a> Scheduler<'a> {
    /// Opens, configures, loads and attaches the BPF scheduler. `shielded`:
    /// the CPUs the IRQ shield keeps device IRQs off (src/irq_shield.rs).
    pub fn init(
        cfg: &Config,
        open_object: &'a mut MaybeUninit<OpenObject>,
        verbose: bool,
        shielded: &std::collections::BTreeSet<usize>,
    ) -> Result<Self> {
        let mut builder = BpfSkelBuilder::default();
        builder.obj_builder.debug(verbose);
        let mut skel = scx_ops_open!(builder, open_object, express_ops, None)
            .map_err(preflight::explain_load_error)?;

        let topo = Topology::new().context("reading the CPU topology")?;
        let rodata = skel
            .maps
            .rodata_data
            .as_mut()
            .context("BPF object has no rodata")?;
        rodata.usersched_tgid = std::process::id();
        rodata.fair_user_mode = cfg.fair.mode == FairMode::Userspace;
        for (&id, cpu) in &topo.all_cpus {
            if id < rodata.cpu_llc.len() {
                rodata.cpu_llc[id] = cpu.llc_id as u32;
            }
        }
        let knobs = skel
            .maps
            .data_knobs_data
            .as_mut()
            .context("BPF object has no knobs section")?;
        apply_knobs(knobs, cfg, &topo);
        apply_shield_knobs(knobs, shielded);
        if shielded.is_empty() {
            // No shield: the I/O rule's stamps would cost for nothing.
            skel.progs.express_bio_queue.set_autoload(false);
            skel.progs.express_net_queue.set_autoload(false);
        }
        // In range (src/config/ranges.rs), so it fits the kernel's u32.
        skel.struct_ops.express_ops_mut().timeout_ms = cfg.fair.watchdog_ms as u32;

        let mut skel =
            scx_ops_load!(skel, express_ops, uei).map_err(preflight::explain_load_error)?;

        // Classification: pin the class maps for `mark`/`ps`, then scan for
        // CUDA libraries and markers and apply rules on a thread of its own.
        let (pins, tenant_cgroups) = pin_maps(&mut skel, cfg)?;
        let (scanner, probes) = start_classification(&skel, cfg)?;

        let struct_ops =
            Some(scx_ops_attach!(skel, express_ops).map_err(preflight::explain_load_error)?);
        info!(
            "scx_express attached (ops express, fair.mode {}, watchdog {} ms)",
            cfg.fair.mode.as_str(),
            cfg.fair.watchdog_ms
        );

        Ok(Self {
            skel,
            struct_ops,
            policy: FairPolicy::new(fair_params(cfg)),
            probes: Some(probes),
            _scanner: scanner,
            cfg: cfg.clone(),
            topo,
            irq_window_ns: cfg.express.irq_window_ms * MS,
            user_lag_max_ns: 0,
            tenant_cgroups,
            _pins: pins,
        })
    }

    fn bss(&self) -> &crate::bpf_skel::types::bss {
        self.skel.maps.bss_data.as_ref().expect("bss is mapped")
    }

    fn read_bss(&self, field: impl Fn(&crate::bpf_skel::types::bss) -> &u64) -> u64 {
        unsafe { std::ptr::read_volatile(field(self.bss())) }
    }

    fn add_user_submitted(&mut self, n: u64) {
        let bss = self.skel.maps.bss_data.as_mut().expect("bss is mapped");
        unsafe {
            let cur = std::ptr::read_volatile(&bss.user_submitted);
            std::ptr::write_volatile(&mut bss.user_submitted, cur + n);
        }
    }

    /// Counters 0..`n` of a per-CPU u64 array map (`stats`, `lane_stats`),
    /// summed over CPUs.
    fn sum_percpu(map: &impl MapCore, n: usize) -> Result<Vec<u64>> {
        let mut out = vec![0u64; n];
        for (i, slot) in out.iter_mut().enumerate() {
            let key = (i as u32).to_ne_bytes();
            if let Some(per_cpu) = map.lookup_percpu(&key, MapFlags::ANY)? {
                *slot = per_cpu
                    .iter()
                    .map(|v| u64::from_ne_bytes(v[..8].try_into().unwrap()))
                    .sum();
            }
        }
        Ok(out)
    }

    fn metrics(&self) -> Result<Metrics> {
        use bpf_intf::*;
        let maps = &self.skel.maps;
        let c = Self::sum_percpu(&maps.stats, stat_idx_NR_EXPRESS_STATS as usize)?;
        let n_lane = task_class_NR_CLASSES * lane_stat_idx_NR_LANE_STATS;
        let lane = Self::sum_percpu(&maps.lane_stats, n_lane as usize)?;
        // Each key read is a syscall (hundreds of microseconds a pass under
        // emulation for all 19 groups), so only the classes and the
        // configured tenants are read, not all MAX_TENANTS.
        let groups = task_class_NR_CLASSES + self.cfg.tenants.len() as u32;
        let lat = Self::sum_percpu(
            &maps.lat_stats,
            (groups * lat_stat_idx_NR_LAT_STATS) as usize,
        )?;
        let mut m = Metrics::default();
        stats::fill(STATS, &mut m, |src| match src {
            Source::Bpf(i) => Some(c[i as usize]),
            _ => None,
        });
        for (name, class) in [
            ("gpu", task_class_CLASS_GPU),
            ("agent", task_class_CLASS_AGENT),
        ] {
            let mut cm = ClassMetrics {
                latency_hist: lat_hist(&lat, class),
                ..Default::default()
            };
            stats::fill(CLASS_STATS, &mut cm, |src| match src {
                Source::Lane(i) => Some(lane[(class * lane_stat_idx_NR_LANE_STATS + i) as usize]),
                Source::Lat(i) => Some(lat[(class * lat_stat_idx_NR_LAT_STATS + i) as usize]),
                _ => None,
            });
            m.classes.insert(name.to_string(), cm);
        }
        // Userspace mode charges virtual runtime here, not in BPF.
        if self.cfg.fair.mode == FairMode::Userspace {
            let (charged_ns, forgiven_ns) = self.policy.charged_and_forgiven_ns();
            m.fair_charged_ms = charged_ns / MS;
            m.fair_forgiven_ms = forgiven_ns / MS;
        }
        let probes = self.probes.as_ref().map(|p| p.counts()).unwrap_or_default();
        m.user_lag_max_us = self.user_lag_max_ns / US;
        m.fair_tasks = self.policy.nr_tasks() as u64;
        m.probed_libraries = probes.libraries;
        m.launch_windows = probes.windows;
        m.cpus = self.read_cpus()?;
        m.tenants = self.read_tenants(&lat)?;
        Ok(m)
    }

    /// Resolves `cfg`'s tenant cgroups into the BPF maps (see tenants.rs).
    fn sync_tenants(&mut self, cfg: &Config) -> Result<()> {
        let maps = &self.skel.maps;
        self.tenant_cgroups
            .sync(&maps.tenant_cgroups, &maps.tenant_names, &cfg.tenants)
    }

    /// Per configured tenant: its counters and latency histogram.
    fn read_tenants(&self, lat: &[u64]) -> Result<BTreeMap<String, TenantMetrics>> {
        use bpf_intf::*;
        // Configured tenants only, as the latency groups (metrics()).
        let n = self.cfg.tenants.len() * tenant_stat_idx_NR_TENANT_STATS as usize;
        let ts = Self::sum_percpu(&self.skel.maps.tenant_stats, n)?;
        let mut out = BTreeMap::new();
        for (i, t) in self.cfg.tenants.iter().enumerate() {
            let i = i as u32;
            let group = task_class_NR_CLASSES + i;
            let mut tm = TenantMetrics {
                class: t.class.as_str().to_string(),
                latency_hist: lat_hist(lat, group),
                ..Default::default()
            };
            stats::fill(TENANT_STATS, &mut tm, |src| match src {
                Source::Tenant(k) => Some(ts[(i * tenant_stat_idx_NR_TENANT_STATS + k) as usize]),
                Source::Lat(k) => Some(lat[(group * lat_stat_idx_NR_LAT_STATS + k) as usize]),
                _ => None,
            });
            out.insert(t.name.clone(), tm);
        }
        Ok(out)
    }

    /// Express runs and IRQ load per CPU.
    fn read_cpus(&self) -> Result<BTreeMap<String, CpuMetrics>> {
        let mut out = BTreeMap::new();
        let now = classify::monotonic_ns();
        for cpu in 0..libbpf_rs::num_possible_cpus()? {
            let key = (cpu as u32).to_ne_bytes();
            let Some(v) = self.skel.maps.cpu_ctxs.lookup(&key, MapFlags::ANY)? else {
                continue;
            };
            // SAFETY: the map's value is a struct cpu_ctx.
            let cc: bpf_intf::cpu_ctx =
                unsafe { std::ptr::read_unaligned(v.as_ptr() as *const bpf_intf::cpu_ctx) };
            let fresh = now.saturating_sub(cc.win_start_ns) < 2 * self.irq_window_ns;
            let irq_ns = if fresh {
                cc.irq_ns_cur.max(cc.irq_ns_prev)
            } else {
                0
            };
            out.insert(
                cpu.to_string(),
                CpuMetrics {
                    express_runs: cc.express_runs,
                    irq_pct: irq_ns as f64 * 100.0 / self.irq_window_ns as f64,
                },
            );
        }
        Ok(out)
    }

    /// Reloads the config from `source`. A config that fails to load or
    /// validate is rejected with its reason, and the running one stays.
    fn reload(&mut self, source: &ConfigSource) {
        let mut new = match source.load() {
            Ok(c) => c,
            Err(e) => {
                error!("reload rejected, keeping the running config: {e}");
                return;
            }
        };
        if new.fair.mode != self.cfg.fair.mode {
            warn!(
                "reload: fair.mode \"{}\" takes effect at the next start; staying in \"{}\" mode",
                new.fair.mode.as_str(),
                self.cfg.fair.mode.as_str()
            );
            new.fair.mode = self.cfg.fair.mode;
        }
        if new == self.cfg {
            info!("reload: {} has not changed", source);
            return;
        }
        for (what, changed) in [
            ("[classify]", new.classify != self.cfg.classify),
            (
                "fair.watchdog_ms",
                new.fair.watchdog_ms != self.cfg.fair.watchdog_ms,
            ),
            (
                "express.pm_qos_resume_latency_us",
                new.express.pm_qos_resume_latency_us != self.cfg.express.pm_qos_resume_latency_us,
            ),
            (
                "express.irq_shield and irq_shield_cpus",
                (new.express.irq_shield, new.express.irq_shield_cpus)
                    != (
                        self.cfg.express.irq_shield,
                        self.cfg.express.irq_shield_cpus,
                    ),
            ),
        ] {
            if changed {
                warn!("reload: {what} changes take effect at the next start");
            }
        }
        let knobs = self
            .skel
            .maps
            .data_knobs_data
            .as_mut()
            .expect("knobs are mapped");
        apply_knobs(knobs, &new, &self.topo);
        if let Err(e) = self.sync_tenants(&new) {
            warn!("reload: tenants' cgroups: {e:#}");
        }
        self.policy.set_params(fair_params(&new));
        self.irq_window_ns = new.express.irq_window_ms * MS;
        self.cfg = new;
        info!("reloaded {source}");
    }

    /// The config in force (after accepted reloads).
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Serves the fair path until SIGINT or SIGTERM or the kernel ejects
    /// the scheduler. Returns the kernel's exit information. In BPF mode
    /// the thread sleeps between housekeeping passes, so an ejection is
    /// seen within HOUSEKEEPING (the kernel runs every task on its own
    /// scheduler meanwhile) and a signal at once.
    pub fn run(
        &mut self,
        signals: &Signals,
        source: &ConfigSource,
        metrics: &SharedMetrics,
        metrics_file: Option<&std::path::Path>,
    ) -> Result<UserExitInfo> {
        // Userspace mode serves the fair path from here; in BPF mode this
        // thread only reloads and refreshes the stats.
        let mut user_fair = match self.cfg.fair.mode {
            FairMode::Userspace => Some(UserFair::new(&self.skel)?),
            FairMode::Bpf => None,
        };
        let mut last_housekeeping = Instant::now();
        let mut metrics_file_ok = true;
        while !signals.shutdown.load(Ordering::Relaxed) && !uei_exited!(&self.skel, uei) {
            match user_fair.as_mut() {
                Some(uf) => self.serve_fair(uf)?,
                None => signals.wait(HOUSEKEEPING.saturating_sub(last_housekeeping.elapsed())),
            }
            // A reload also refreshes the stats at once, so that readers see
            // counters of the new config, not a snapshot from before it.
            let reloaded = signals.reload.swap(false, Ordering::Relaxed) && {
                self.reload(source);
                true
            };

            if reloaded || last_housekeeping.elapsed() >= HOUSEKEEPING {
                last_housekeeping = Instant::now();
                let dropped = self.policy.prune(classify::monotonic_ns(), FORGET_AFTER_NS);
                if dropped > 0 {
                    debug!("forgot {dropped} idle tasks");
                }
                if let Err(e) = self.sync_tenants(&self.cfg.clone()) {
                    warn!("tenants' cgroups: {e:#}");
                }
                let m = self.metrics()?;
                if let Some(path) = metrics_file {
                    let text = crate::stats::openmetrics_text(&m);
                    match crate::stats::write_atomically(path, &text) {
                        Ok(()) => metrics_file_ok = true,
                        // Say it once, not every second.
                        Err(e) if metrics_file_ok => {
                            warn!("writing {}: {e}", path.display());
                            metrics_file_ok = false;
                        }
                        Err(_) => {}
                    }
                }
                *metrics.lock().unwrap() = m;
                self.user_lag_max_ns = 0;
            }
        }

        // Detach, then read why the scheduler stopped.
        self.struct_ops.take();
        info!("scx_express detached");
        uei_report!(&self.skel, uei)
    }

    /// Userspace mode: waits up to POLL_TIMEOUT for queued tasks, decides
    /// each one and sends the decisions back.
    fn serve_fair(&mut self, uf: &mut UserFair) -> Result<()> {
        if let Err(e) = uf.queued.poll(POLL_TIMEOUT) {
            if e.kind() != libbpf_rs::ErrorKind::Interrupted {
                return Err(e).context("polling the queued ring buffer");
            }
        }
        std::mem::swap(&mut uf.batch, &mut *uf.pending.borrow_mut());

        let vtime_now = self.read_bss(|b| &b.vtime_now);
        let nr_waiting = self.read_bss(|b| &b.nr_queued_shared) + uf.batch.len() as u64;
        let now = classify::monotonic_ns();
        let mut sent = 0;
        for msg in uf.batch.drain(..) {
            self.user_lag_max_ns = self.user_lag_max_ns.max(now.saturating_sub(msg.enq_ns));
            let d = self
                .policy
                .decide(&runnable(&msg), vtime_now, nr_waiting, now);
            match send_decision(&uf.dispatched, &msg, &d) {
                Ok(()) => sent += 1,
                Err(e) => {
                    // BPF rescues the task after rescue_ms; say so once.
                    if !uf.full_warned {
                        warn!("dispatch ring full ({e}); BPF will rescue queued tasks");
                        uf.full_warned = true;
                    }
                }
            }
        }
        if sent > 0 {
            self.add_user_submitted(sent);
        }
        Ok(())
    }
}

/// The userspace mode's ends of the two ring buffers.
struct UserFair {
    queued: libbpf_rs::RingBuffer<'static>,
    dispatched: UserRingBuffer,
    /// Tasks read from `queued` by its callback, not decided yet.
    pending: Rc<RefCell<Vec<bpf_intf::queued_task>>>,
    batch: Vec<bpf_intf::queued_task>,
    full_warned: bool,
}

impl UserFair {
    fn new(skel: &BpfSkel<'_>) -> Result<Self> {
        let pending: Rc<RefCell<Vec<bpf_intf::queued_task>>> = Rc::default();
        let sink = pending.clone();
        let mut rb = RingBufferBuilder::new();
        rb.add(&skel.maps.queued, move |data: &[u8]| {
            if data.len() >= size_of::<bpf_intf::queued_task>() {
                // SAFETY: the BPF side writes a struct queued_task.
                let msg = unsafe {
                    std::ptr::read_unaligned(data.as_ptr() as *const bpf_intf::queued_task)
                };
                sink.borrow_mut().push(msg);
            }
            0
        })?;
        Ok(Self {
            queued: rb.build()?,
            dispatched: UserRingBuffer::new(&skel.maps.dispatched)?,
            pending,
            batch: Vec::new(),
            full_warned: false,
        })
    }
}

fn runnable(msg: &bpf_intf::queued_task) -> Runnable {
    Runnable {
        pid: msg.pid,
        cpu: msg.cpu,
        nr_cpus_allowed: msg.nr_cpus_allowed,
        weight: msg.weight,
        sum_exec_runtime: msg.sum_exec_runtime,
        express_exec_ns: msg.express_exec_ns,
        wakeup: msg.flags & bpf_intf::queued_flags_QUEUED_WAKEUP != 0,
    }
}

fn send_decision(ring: &UserRingBuffer, msg: &bpf_intf::queued_task, d: &Decision) -> Result<()> {
    let out = bpf_intf::dispatched_task {
        pid: msg.pid,
        cpu: d.cpu,
        slot: msg.slot,
        __pad: 0,
        seq: msg.seq,
        slice_ns: d.slice_ns,
        vtime: d.vtime,
    };
    let mut sample = ring.reserve(size_of::<bpf_intf::dispatched_task>())?;
    // SAFETY: dispatched_task is plain old data of exactly this size.
    let bytes = unsafe {
        std::slice::from_raw_parts(
            &out as *const _ as *const u8,
            size_of::<bpf_intf::dispatched_task>(),
        )
    };
    sample.copy_from_slice(bytes);
    ring.submit(sample)?;
    Ok(())
}
