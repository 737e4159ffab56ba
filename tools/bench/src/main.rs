//! `scx_express_bench`: one command that A/Bs scx_express against EEVDF,
//! the manual fixes (nice, SCHED_FIFO) and peer sched_ext schedulers.
//! A tool of its own, so that the scheduler binary carries none of it: it
//! puts the scheduler binary that `--scheduler` names (default: the
//! repository's `target/release/scx_express`) into the VMs.
//!
//! Each scheduler gets its own VM boot (QEMU TCG, `tests/vm/`), which runs
//! every repeat × scenario × workload cell of the plan (`guest.sh`) and
//! sends back each cell's raw output. The host parses the cells
//! (`parse`), aggregates them into a JSON file and a markdown report
//! (`report`) and draws PNG plots (`plot`). `run` boots the VMs here, or
//! writes a self-contained bundle (QEMU, kernel, initramfs, runner script)
//! for a bigger machine, whose console logs `--from-logs` turns into the
//! same report.

mod parse;
mod plot;
mod report;
mod run;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::ValueEnum;
use serde::{Deserialize, Serialize};

/// What a run compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sched {
    /// The kernel's default scheduler, untouched.
    Eevdf,
    /// EEVDF, workload under `taskset` (first quarter of the CPUs) and
    /// `nice -n -10`: the manual fix of the published study.
    EevdfNice,
    /// EEVDF, workload under `chrt -f 10`.
    EevdfFifo,
    /// EEVDF with scx_express's probes attached and no scheduler
    /// (`scx_express trace --probe-policy scheduler --no-events`): a
    /// control that prices the CUDA uprobes alone. Explicit only (not in
    /// the full preset).
    EevdfProbes,
    /// scx_express with `--config FILE`.
    Express,
    /// scx_rustland (crates.io), for comparison.
    Rustland,
    /// scx_bpfland (crates.io), for comparison.
    Bpfland,
    /// scx_lavd (crates.io), for comparison.
    Lavd,
    /// scx_cosmos (crates.io), for comparison.
    Cosmos,
}

/// The load a workload runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// No noise.
    Baseline,
    /// `stress-ng --cpu N --cpu-method fft`, N = vCPUs.
    Cpu1x,
    /// The same with 4 × vCPUs workers.
    Cpu4x,
    /// iperf3 over loopback, one server and client pair per 2 vCPUs,
    /// parallel streams each.
    Net,
    /// fio randwrite bs=4k iodepth=32, 2 jobs per vCPU, on a scratch NVMe
    /// disk.
    Disk,
    /// cpu4x, net and disk together.
    Heavy,
}

/// What is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// Decode-loop stand-in (`workloads/decode`): tok/s, per-token p50/p99,
    /// Sched/1K of the launcher.
    Decode,
    /// Agent-loop stand-in (`workloads/agent`): local tail and steps/s.
    Agent,
    /// The agent loop whose tool call is a subprocess (`agent --tool
    /// exec`: fork + exec of `workloads/tool`, which reads a file and
    /// replies over a pipe): the same numbers as `agent`.
    AgentExec,
    /// Wakeup latency: cyclictest, one SCHED_OTHER thread.
    Wakeup,
    /// `decode --helpers K`: launcher plus CPU-bound helper threads in one
    /// process.
    Mixed,
    /// Several at once: one decode launcher per two vCPUs (one per "GPU",
    /// at least one) and two agent loops: per-launcher tok/s, each agent's
    /// local tail. Not in the full preset's default workloads (its own
    /// preset, `scale`).
    Scale,
}

impl Workload {
    /// The workloads a preset runs when `--workloads` is not given.
    pub fn matrix() -> Vec<Workload> {
        Workload::value_variants()
            .iter()
            .copied()
            .filter(|w| *w != Workload::Scale)
            .collect()
    }
}

/// Plan presets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Preset {
    /// baseline + cpu4x, eevdf + express, 1 repeat, 2 s cells (minutes).
    Smoke,
    /// Every scheduler, scenario and workload, 3 repeats.
    Full,
    /// The `scale` workload: eevdf, eevdf-nice and express, baseline +
    /// cpu4x, 3 repeats; meant for a bundle run at 8 vCPUs.
    Scale,
}

macro_rules! value_name {
    ($($t:ty),*) => {$(
        impl $t {
            pub fn name(self) -> String {
                self.to_possible_value().expect("no skipped variants").get_name().to_string()
            }
            #[allow(dead_code)] // not every type is parsed back
            pub fn parse(s: &str) -> Result<Self> {
                <$t as ValueEnum>::from_str(s, false)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", stringify!($t)))
            }
        }
    )*};
}
value_name!(Sched, Scenario, Workload, Preset);

impl Sched {
    /// The crates.io package of a peer scheduler.
    pub fn peer_crate(self) -> Option<&'static str> {
        match self {
            Sched::Rustland => Some("scx_rustland"),
            Sched::Bpfland => Some("scx_bpfland"),
            Sched::Lavd => Some("scx_lavd"),
            Sched::Cosmos => Some("scx_cosmos"),
            _ => None,
        }
    }

    /// Whether the boot runs the bundle's scx_express binary.
    pub fn runs_express(self) -> bool {
        matches!(self, Sched::Express | Sched::EevdfProbes)
    }
}

/// scx_express_bench: A/B benchmark in QEMU VMs, scx_express against EEVDF,
/// nice, FIFO and peer sched_ext schedulers, under stress-ng, iperf3 and fio
/// noise. Writes results.json, report.md and PNG plots.
#[derive(Debug, clap::Parser)]
#[command(
    name = "scx_express_bench",
    version,
    about,
    long_about,
    after_help = "The express scheduler is the binary --scheduler names (default \
    REPO/target/release/scx_express: build it first with cargo build --release) and \
    runs with --config FILE (default configs/default.toml). Results: OUT/results.json \
    (every raw number), OUT/report.md, OUT/*.png; console logs in OUT/logs/. TCG \
    timings count only as ratios within one run."
)]
pub struct BenchArgs {
    /// The scx_express binary to measure (default: REPO/target/release/scx_express).
    #[arg(long, value_name = "PATH")]
    pub scheduler: Option<PathBuf>,
    /// scx_express's config file in the express runs (default: REPO/configs/default.toml).
    #[arg(short, long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Plan preset; the options below override its parts.
    #[arg(long, value_enum, default_value = "full")]
    pub preset: Preset,
    /// Schedulers, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub schedulers: Option<Vec<Sched>>,
    /// Scenarios, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub scenarios: Option<Vec<Scenario>>,
    /// Workloads, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub workloads: Option<Vec<Workload>>,
    /// Repeats of every cell (smoke 1, full 3).
    #[arg(long)]
    pub repeats: Option<u32>,
    /// Seconds each workload measures (smoke 2, full 3).
    #[arg(long)]
    pub duration: Option<u32>,
    /// vCPUs of each VM (default 2).
    #[arg(long)]
    pub smp: Option<u32>,
    /// The agent stand-ins' tool reply delay in µs (agent, agent-exec and
    /// scale's agents; default 2000): other agent shapes than the
    /// default's 2 ms tool call.
    #[arg(long, value_name = "US")]
    pub agent_reply_us: Option<u32>,
    /// The agent stand-ins' CPU burst per step, in loop iterations
    /// (`agent --burst-iters`; default 125000, about 200 µs natively).
    #[arg(long, value_name = "N")]
    pub agent_burst_iters: Option<u64>,
    /// Output directory (default target/bench/PRESET).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Do not run: write a self-contained bundle (QEMU, kernel, initramfs,
    /// runner.sh) to DIR, to run the plan on another x86-64 Linux machine.
    #[arg(long, value_name = "DIR", conflicts_with = "from_logs")]
    pub bundle: Option<PathBuf>,
    /// Do not run: build the report from the plan.json and console logs
    /// (*.log) that a bundle's runner.sh left in DIR.
    #[arg(long, value_name = "DIR")]
    pub from_logs: Option<PathBuf>,
    /// Only check that the report in DIR is complete and well formed
    /// (every cell, JSON, PNGs); asserts no timing.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["bundle", "from_logs"])]
    pub check: Option<PathBuf>,
    /// Repository root (tests/vm, workloads, configs); default: found
    /// from the current directory or the executable.
    #[arg(long, value_name = "DIR")]
    pub repo: Option<PathBuf>,
    /// Where peer schedulers are installed (cargo install --root); default
    /// ~/.cache/scx_express/peers.
    #[arg(long, value_name = "DIR")]
    pub peers_dir: Option<PathBuf>,
}

/// Seconds each noise runs past its workload's nominal end: a workload
/// starts up to a second late under noise (cyclictest's last cell once
/// ended 0.04 s before a noise of warm + duration + 1 s did). guest.sh
/// reads it as BENCH_NOISE_TAIL.
pub const NOISE_TAIL_S: u32 = 2;
/// Seconds more noise for the workloads that warm up after their go file
/// (agent, agent-exec, scale): under noise 200 socket steps take up to
/// 1-2 s, 20 exec steps longer still, so guest.sh also ends their warmup
/// after GO_WARMUP_S - 1 s (`agent --warmup-max-s`) and gives their
/// time limit these seconds. guest.sh: BENCH_GO_WARMUP.
pub const GO_WARMUP_S: u32 = 3;

/// workloads/agent.c's own defaults: a 2 ms tool call, a ~200 µs burst.
fn default_agent_reply_us() -> u32 {
    2000
}

fn default_agent_burst_iters() -> u64 {
    125_000
}

/// Everything a run does, saved as plan.json beside the results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub preset: Preset,
    pub schedulers: Vec<Sched>,
    pub scenarios: Vec<Scenario>,
    pub workloads: Vec<Workload>,
    pub repeats: u32,
    /// Seconds each workload measures.
    pub duration_s: u32,
    /// Seconds of noise before a workload starts.
    pub warm_s: u32,
    pub smp: u32,
    pub mem: String,
    /// Helper threads of the mixed workload (default: vCPUs).
    pub helpers: u32,
    /// iperf3 parallel streams of each client (guest.sh runs one client
    /// and server pair per 2 vCPUs).
    pub streams: u32,
    /// cyclictest interval.
    pub cyc_interval_us: u32,
    /// The agent stand-ins' tool reply delay (µs) and CPU burst (loop
    /// iterations). Plans saved before these existed ran the defaults.
    #[serde(default = "default_agent_reply_us")]
    pub agent_reply_us: u32,
    #[serde(default = "default_agent_burst_iters")]
    pub agent_burst_iters: u64,
    /// Scratch disk size for fio.
    pub disk: String,
    /// The express config, as given.
    pub express_config: String,
    /// The command line that made this plan.
    pub command: String,
    /// `git describe --always --dirty` of the repository the bench ran
    /// from: which scx_express was measured.
    #[serde(default)]
    pub source_version: String,
}

impl Plan {
    pub fn from_args(a: &BenchArgs, express_config: &Path, command: String) -> Result<Plan> {
        let (scheds, scens, repeats, duration) = match a.preset {
            Preset::Smoke => (
                vec![Sched::Eevdf, Sched::Express],
                vec![Scenario::Baseline, Scenario::Cpu4x],
                1,
                2,
            ),
            Preset::Full => (
                Sched::value_variants()
                    .iter()
                    .copied()
                    .filter(|s| *s != Sched::EevdfProbes)
                    .collect(),
                Scenario::value_variants().to_vec(),
                3,
                3,
            ),
            Preset::Scale => (
                vec![Sched::Eevdf, Sched::EevdfNice, Sched::Express],
                vec![Scenario::Baseline, Scenario::Cpu4x],
                3,
                3,
            ),
        };
        let wls = match a.preset {
            Preset::Scale => vec![Workload::Scale],
            _ => Workload::matrix(),
        };
        let smp = a.smp.unwrap_or(2);
        let mut plan = Plan {
            preset: a.preset,
            schedulers: a.schedulers.clone().unwrap_or(scheds),
            scenarios: a.scenarios.clone().unwrap_or(scens),
            workloads: a.workloads.clone().unwrap_or(wls),
            repeats: a.repeats.unwrap_or(repeats),
            duration_s: a.duration.unwrap_or(duration),
            warm_s: 1,
            smp,
            mem: "2G".into(),
            helpers: smp,
            streams: 10,
            cyc_interval_us: 1000,
            agent_reply_us: a.agent_reply_us.unwrap_or_else(default_agent_reply_us),
            agent_burst_iters: a
                .agent_burst_iters
                .unwrap_or_else(default_agent_burst_iters),
            disk: "1G".into(),
            express_config: express_config.display().to_string(),
            command,
            source_version: String::new(),
        };
        plan.normalize();
        plan.validate()?;
        Ok(plan)
    }

    /// Sorted and deduplicated, so reports always list things in one order.
    fn normalize(&mut self) {
        self.schedulers.sort();
        self.schedulers.dedup();
        self.scenarios.sort();
        self.scenarios.dedup();
        self.workloads.sort();
        self.workloads.dedup();
    }

    pub fn validate(&self) -> Result<()> {
        if self.schedulers.is_empty() || self.scenarios.is_empty() || self.workloads.is_empty() {
            bail!("the plan needs at least one scheduler, scenario and workload");
        }
        if !(1..=100).contains(&self.repeats) {
            bail!("--repeats must be 1..=100, got {}", self.repeats);
        }
        if !(1..=600).contains(&self.duration_s) {
            bail!(
                "--duration must be 1..=600 seconds, got {}",
                self.duration_s
            );
        }
        if !(1..=64).contains(&self.smp) {
            bail!("--smp must be 1..=64, got {}", self.smp);
        }
        if !(1..=1_000_000).contains(&self.agent_reply_us) {
            bail!(
                "--agent-reply-us must be 1..=1000000 (1 s), got {}",
                self.agent_reply_us
            );
        }
        if !(1..=1_000_000_000).contains(&self.agent_burst_iters) {
            bail!(
                "--agent-burst-iters must be 1..=1000000000, got {}",
                self.agent_burst_iters
            );
        }
        Ok(())
    }

    pub fn cells_per_boot(&self) -> u32 {
        self.repeats * (self.scenarios.len() * self.workloads.len()) as u32
    }

    /// Guest time limit: scheduler attach (lavd takes ~30 s under TCG) plus
    /// twice each cell's nominal length (its longest noise) and some
    /// per-cell slack.
    pub fn guest_timeout_s(&self) -> u32 {
        let cell = self.warm_s + self.duration_s + NOISE_TAIL_S + GO_WARMUP_S;
        240 + self.cells_per_boot() * (2 * cell + 10)
    }

    pub fn needs_disk(&self) -> bool {
        self.scenarios
            .iter()
            .any(|s| matches!(s, Scenario::Disk | Scenario::Heavy))
    }

    pub fn peers(&self) -> Vec<Sched> {
        self.schedulers
            .iter()
            .copied()
            .filter(|s| s.peer_crate().is_some())
            .collect()
    }
}

/// Finds the repository root: the first ancestor of the current directory,
/// then of the executable (target/release/ in the repository), that holds
/// tests/vm/run.sh and workloads/. An absolute path.
fn find_repo(explicit: Option<&Path>) -> Result<PathBuf> {
    let mut starts = vec![std::env::current_dir()?];
    if let Ok(exe) = std::env::current_exe() {
        starts.push(exe);
    }
    find_repo_from(explicit, &starts)
}

fn is_repo(p: &Path) -> bool {
    p.join("tests/vm/run.sh").is_file() && p.join("workloads").is_dir()
}

fn find_repo_from(explicit: Option<&Path>, starts: &[PathBuf]) -> Result<PathBuf> {
    if let Some(p) = explicit {
        if is_repo(p) {
            return Ok(std::path::absolute(p)?);
        }
        bail!(
            "{}: not the scx_express repository (no tests/vm/run.sh)",
            p.display()
        );
    }
    for s in starts {
        for a in s.ancestors() {
            if is_repo(a) {
                return Ok(std::path::absolute(a)?);
            }
        }
    }
    bail!("cannot find the scx_express repository (tests/vm/run.sh); run from it or pass --repo")
}

/// The scx_express binary the VMs run: `--scheduler`, else the
/// repository's release build. An absolute path (scenario headers read
/// relative ones from the repository root).
fn scheduler_path(repo: &Path, explicit: Option<&Path>) -> Result<PathBuf> {
    let p = match explicit {
        Some(p) => std::path::absolute(p)?,
        None => repo.join("target/release/scx_express"),
    };
    if p.is_file() {
        return Ok(p);
    }
    if explicit.is_some() {
        bail!("--scheduler {}: no such file", p.display());
    }
    bail!(
        "the scheduler binary {} does not exist: build it with `cargo build --release` \
         in {} (or name another with --scheduler PATH)",
        p.display(),
        repo.display()
    )
}

/// Sources of the scheduler newer than `bin`, for a warning: the bench
/// would measure an older build than the checkout.
fn newer_sources(repo: &Path, bin: &Path) -> Vec<PathBuf> {
    fn walk(p: &Path, than: std::time::SystemTime, out: &mut Vec<PathBuf>) {
        let Ok(m) = std::fs::metadata(p) else { return };
        if m.is_dir() {
            for e in std::fs::read_dir(p).into_iter().flatten().flatten() {
                walk(&e.path(), than, out);
            }
        } else if m.modified().is_ok_and(|t| t > than) {
            out.push(p.to_path_buf());
        }
    }
    let Ok(built) = std::fs::metadata(bin).and_then(|m| m.modified()) else {
        return vec![];
    };
    let mut out = vec![];
    for s in ["src", "build.rs", "Cargo.toml", "Cargo.lock"] {
        walk(&repo.join(s), built, &mut out);
    }
    out.sort();
    out
}

fn home_cache() -> PathBuf {
    if let Some(c) = std::env::var_os("SCX_EXPRESS_CACHE") {
        return PathBuf::from(c);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into())).join(".cache")
        });
    base.join("scx_express")
}

fn main() -> std::process::ExitCode {
    use clap::Parser as _;
    match run(&BenchArgs::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("scx_express_bench: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(args: &BenchArgs) -> Result<()> {
    if let Some(dir) = &args.check {
        return check(dir);
    }
    if let Some(dir) = &args.from_logs {
        return from_logs(args, dir);
    }

    let repo = find_repo(args.repo.as_deref())?;
    let express_config = match &args.config {
        Some(c) => std::path::absolute(c)?,
        None => repo.join("configs/default.toml"),
    };
    if !express_config.is_file() {
        bail!("express config {} not found", express_config.display());
    }
    // Shown relative to the repository when it is inside it.
    let shown = express_config
        .strip_prefix(&repo)
        .unwrap_or(&express_config)
        .to_path_buf();
    let mut plan = Plan::from_args(args, &shown, command_line())?;
    plan.source_version = git_describe(&repo);
    let peers_dir = args
        .peers_dir
        .clone()
        .unwrap_or_else(|| home_cache().join("peers"));
    let scheduler = express_binary(args, &repo, &mut plan)?;
    let ctx = run::Context::prepare(&repo, &plan, &express_config, scheduler, &peers_dir)?;

    if let Some(dir) = &args.bundle {
        ctx.write_bundle(dir)?;
        return Ok(());
    }

    let out = args
        .out
        .clone()
        .unwrap_or_else(|| repo.join("target/bench").join(plan.preset.name()));
    let logs = out.join("logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    write_json(&logs.join("plan.json"), &plan)?;
    std::fs::write(logs.join("host.txt"), run::host_description())?;
    let t0 = std::time::Instant::now();
    ctx.run_local(&logs)?;
    eprintln!("bench: VMs done in {:.0} s", t0.elapsed().as_secs_f64());
    finish(&plan, &logs, &out)
}

/// `--check DIR`: the problems of the report in `dir`, an error if any.
fn check(dir: &Path) -> Result<()> {
    let problems = report::check_dir(dir)?;
    if problems.is_empty() {
        println!("bench report ok: {}", dir.display());
        return Ok(());
    }
    for p in &problems {
        eprintln!("  {p}");
    }
    bail!(
        "{} problem(s) in the bench report in {}",
        problems.len(),
        dir.display()
    );
}

/// `--from-logs DIR`: the report of a bundle's logs and its plan.json.
fn from_logs(args: &BenchArgs, dir: &Path) -> Result<()> {
    let mut plan: Plan = read_json(&dir.join("plan.json"))?;
    // --schedulers picks some of the run's schedulers for the report.
    if let Some(s) = &args.schedulers {
        plan.schedulers.retain(|x| s.contains(x));
        plan.validate()?;
    }
    plan.command = format!("{}, then: {}", plan.command, command_line());
    let out = args.out.clone().unwrap_or_else(|| dir.to_path_buf());
    finish(&plan, dir, &out)
}

/// The scx_express binary the plan measures (None without express runs),
/// with a warning if the checkout's own build is older than its sources;
/// a `--scheduler` binary is named in the plan's source version.
fn express_binary(args: &BenchArgs, repo: &Path, plan: &mut Plan) -> Result<Option<PathBuf>> {
    // Only the express runs (and the probes' control) need the binary.
    if !plan.schedulers.iter().any(|s| s.runs_express()) {
        return Ok(None);
    }
    let p = scheduler_path(repo, args.scheduler.as_deref())?;
    // The checkout's own build should be as new as the checkout.
    let newer = match args.scheduler {
        None => newer_sources(repo, &p),
        Some(_) => vec![],
    };
    if let Some(f) = newer.first() {
        eprintln!(
            "bench: warning: {} is older than {} source file(s), e.g. {}: \
             rebuild it with cargo build --release to measure this checkout",
            p.display(),
            newer.len(),
            f.strip_prefix(repo).unwrap_or(f).display()
        );
    }
    if args.scheduler.is_some() {
        plan.source_version = with_scheduler(&plan.source_version, &p);
    }
    Ok(Some(p))
}

/// `git describe --always --dirty` of the repository, or "unknown".
fn git_describe(repo: &Path) -> String {
    std::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["describe", "--always", "--dirty"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// The source version for the report when `--scheduler` named the binary:
/// the checkout's version need not be the measured one.
fn with_scheduler(describe: &str, bin: &Path) -> String {
    format!("{describe}; scx_express measured: {}", bin.display())
}

/// This command line, as `scx_express_bench ARGS`.
fn command_line() -> String {
    std::iter::once("scx_express_bench".to_string())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Parses the console logs in `logs`, writes results.json, report.md and
/// the plots to `out`.
fn finish(plan: &Plan, logs: &Path, out: &Path) -> Result<()> {
    let cells = run::collect_cells(logs)?;
    let host = std::fs::read_to_string(logs.join("host.txt"))
        .map(|h| h.split_whitespace().collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    let results = report::Results::build(plan, cells, host);
    std::fs::create_dir_all(out)?;
    write_json(&out.join("results.json"), &results)?;
    let plots = plot::draw_all(&results, out)?;
    let md = report::markdown(&results, &plots);
    std::fs::write(out.join("report.md"), md)?;
    eprintln!(
        "bench: {} of {} cells ok; report in {}",
        results.cells.iter().filter(|c| c.ok).count(),
        results.expected_cells(),
        out.join("report.md").display()
    );
    let missing = results.missing_cells();
    if !missing.is_empty() {
        eprintln!(
            "bench: {} cell(s) missing or failed, e.g. {}",
            missing.len(),
            missing[0]
        );
    }
    Ok(())
}

fn read_json<T: serde::de::DeserializeOwned>(p: &Path) -> Result<T> {
    let s = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
    serde_json::from_str(&s).with_context(|| format!("parsing {}", p.display()))
}

fn write_json<T: Serialize>(p: &Path, v: &T) -> Result<()> {
    let s = serde_json::to_string_pretty(v)?;
    std::fs::write(p, s + "\n").with_context(|| format!("writing {}", p.display()))
}

/// Arguments as the CLI gives them with only `--preset`; for tests.
#[cfg(test)]
pub(crate) fn test_args(preset: Preset) -> BenchArgs {
    BenchArgs {
        scheduler: None,
        config: None,
        preset,
        schedulers: None,
        scenarios: None,
        workloads: None,
        repeats: None,
        duration: None,
        smp: None,
        agent_reply_us: None,
        agent_burst_iters: None,
        out: None,
        bundle: None,
        from_logs: None,
        check: None,
        repo: None,
        peers_dir: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(preset: Preset) -> BenchArgs {
        test_args(preset)
    }

    #[test]
    fn presets() {
        let p = Plan::from_args(&args(Preset::Smoke), Path::new("c.toml"), "x".into()).unwrap();
        assert_eq!(p.schedulers, vec![Sched::Eevdf, Sched::Express]);
        assert_eq!(p.scenarios, vec![Scenario::Baseline, Scenario::Cpu4x]);
        assert_eq!(p.repeats, 1);
        assert!(p.peers().is_empty());
        assert!(!p.needs_disk());
        let f = Plan::from_args(&args(Preset::Full), Path::new("c.toml"), "x".into()).unwrap();
        assert_eq!(f.schedulers.len(), 8);
        assert!(!f.schedulers.contains(&Sched::EevdfProbes));
        assert_eq!(f.scenarios.len(), 6);
        assert_eq!(f.workloads.len(), 5);
        assert!(f.workloads.contains(&Workload::AgentExec));
        assert_eq!(f.repeats, 3);
        assert_eq!(f.peers().len(), 4);
        assert!(f.needs_disk());
        assert_eq!(f.cells_per_boot(), 90);
        assert!(!f.workloads.contains(&Workload::Scale));
        let s = Plan::from_args(&args(Preset::Scale), Path::new("c.toml"), "x".into()).unwrap();
        assert_eq!(s.workloads, vec![Workload::Scale]);
        assert_eq!(s.scenarios, vec![Scenario::Baseline, Scenario::Cpu4x]);
        assert!(s.schedulers.contains(&Sched::EevdfNice));
    }

    #[test]
    fn agent_shape_reaches_the_plan() {
        let a = BenchArgs {
            agent_reply_us: Some(500),
            agent_burst_iters: Some(600_000),
            ..args(Preset::Smoke)
        };
        let p = Plan::from_args(&a, Path::new("c.toml"), "x".into()).unwrap();
        assert_eq!((p.agent_reply_us, p.agent_burst_iters), (500, 600_000));
        let d = Plan::from_args(&args(Preset::Smoke), Path::new("c.toml"), "x".into()).unwrap();
        assert_eq!((d.agent_reply_us, d.agent_burst_iters), (2000, 125_000));
        // A plan.json from before the fields existed ran the defaults.
        let mut v = serde_json::to_value(&p).unwrap();
        let o = v.as_object_mut().unwrap();
        o.remove("agent_reply_us");
        o.remove("agent_burst_iters");
        let old: Plan = serde_json::from_value(v).unwrap();
        assert_eq!((old.agent_reply_us, old.agent_burst_iters), (2000, 125_000));
        let zero = BenchArgs {
            agent_reply_us: Some(0),
            ..args(Preset::Smoke)
        };
        let err = Plan::from_args(&zero, Path::new("c.toml"), "x".into()).unwrap_err();
        assert!(err.to_string().contains("--agent-reply-us"), "{err}");
    }

    #[test]
    fn names_round_trip() {
        for s in Sched::value_variants() {
            assert_eq!(Sched::parse(&s.name()).unwrap(), *s);
        }
        assert_eq!(Sched::EevdfNice.name(), "eevdf-nice");
        assert_eq!(Scenario::Cpu4x.name(), "cpu4x");
        assert_eq!(
            serde_json::to_string(&Sched::EevdfFifo).unwrap(),
            "\"eevdf-fifo\""
        );
        assert!(Workload::parse("nope").is_err());
    }

    /// A fresh scratch directory for one test.
    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("scx-bench-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// A fake repository: what find_repo looks for, and a release build.
    fn fake_repo(name: &str) -> PathBuf {
        let r = scratch(name);
        std::fs::create_dir_all(r.join("tests/vm")).unwrap();
        std::fs::write(r.join("tests/vm/run.sh"), "").unwrap();
        std::fs::create_dir_all(r.join("workloads")).unwrap();
        std::fs::create_dir_all(r.join("target/release")).unwrap();
        r
    }

    #[test]
    fn repo_is_found_from_the_repo_or_from_target_release() {
        let r = fake_repo("find");
        let exe = r.join("target/release/scx_express_bench");
        let elsewhere = scratch("find-elsewhere");
        // From a subdirectory of the repository.
        assert_eq!(
            find_repo_from(None, &[r.join("tools/bench"), exe.clone()]).unwrap(),
            r
        );
        // From anywhere else, through the executable in target/release.
        assert_eq!(find_repo_from(None, &[elsewhere.clone(), exe]).unwrap(), r);
        let err = find_repo_from(None, std::slice::from_ref(&elsewhere)).unwrap_err();
        assert!(err.to_string().contains("--repo"), "{err}");
        assert_eq!(find_repo_from(Some(&r), &[]).unwrap(), r);
        assert!(find_repo_from(Some(&elsewhere), std::slice::from_ref(&r)).is_err());
    }

    #[test]
    fn scheduler_defaults_to_the_release_build_and_says_how_to_make_it() {
        let r = fake_repo("sched");
        let bin = r.join("target/release/scx_express");
        let err = scheduler_path(&r, None).unwrap_err().to_string();
        assert!(err.contains(&bin.display().to_string()), "{err}");
        assert!(err.contains("cargo build --release"), "{err}");
        std::fs::write(&bin, "").unwrap();
        assert_eq!(scheduler_path(&r, None).unwrap(), bin);
        // --scheduler wins over the default, and must exist.
        let other = r.join("other");
        let err = scheduler_path(&r, Some(&other)).unwrap_err().to_string();
        assert!(err.contains(&other.display().to_string()), "{err}");
        std::fs::write(&other, "").unwrap();
        assert_eq!(scheduler_path(&r, Some(&other)).unwrap(), other);
    }

    #[test]
    fn sources_newer_than_the_scheduler_are_found() {
        let r = fake_repo("newer");
        let bin = r.join("target/release/scx_express");
        std::fs::create_dir_all(r.join("src/bpf")).unwrap();
        let old = r.join("src/main.rs");
        let new = r.join("src/bpf/main.bpf.c");
        std::fs::write(&old, "").unwrap();
        std::fs::write(&new, "").unwrap();
        std::fs::write(&bin, "").unwrap();
        let t = std::time::SystemTime::now();
        let set = |p: &Path, t| {
            std::fs::File::options()
                .write(true)
                .open(p)
                .unwrap()
                .set_modified(t)
                .unwrap()
        };
        let hour = std::time::Duration::from_secs(3600);
        set(&old, t - hour);
        set(&bin, t);
        set(&new, t + hour);
        assert_eq!(newer_sources(&r, &bin), vec![new.clone()]);
        set(&new, t - hour);
        assert!(newer_sources(&r, &bin).is_empty());
        // No binary: nothing to compare (scheduler_path reports it).
        assert!(newer_sources(&r, &r.join("none")).is_empty());
    }

    #[test]
    fn an_explicit_scheduler_is_named_in_the_source_version() {
        let v = with_scheduler("4e7d860", Path::new("/opt/scx_express"));
        assert_eq!(v, "4e7d860; scx_express measured: /opt/scx_express");
    }

    #[test]
    fn the_cli_takes_scheduler_and_config() {
        use clap::Parser as _;
        let a = BenchArgs::try_parse_from([
            "scx_express_bench",
            "--preset",
            "smoke",
            "--scheduler",
            "/x/scx_express",
            "-c",
            "my.toml",
        ])
        .unwrap();
        assert_eq!(a.preset, Preset::Smoke);
        assert_eq!(a.scheduler.as_deref(), Some(Path::new("/x/scx_express")));
        assert_eq!(a.config.as_deref(), Some(Path::new("my.toml")));
        let d = BenchArgs::try_parse_from(["scx_express_bench"]).unwrap();
        assert_eq!(d.preset, Preset::Full);
        assert!(d.scheduler.is_none() && d.config.is_none());
    }

    #[test]
    fn bad_plans_are_rejected() {
        let mut a = args(Preset::Smoke);
        a.repeats = Some(0);
        assert!(Plan::from_args(&a, Path::new("c"), "x".into()).is_err());
        let mut a = args(Preset::Smoke);
        a.schedulers = Some(vec![]);
        assert!(Plan::from_args(&a, Path::new("c"), "x".into()).is_err());
    }
}
