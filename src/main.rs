//! scx_express: a sched_ext scheduler that gives CUDA launcher threads and
//! AI-agent control loops an express lane, bounded by a per-task token
//! bucket, and schedules everything else fairly from userspace.
//!
//! Layout: `config` (typed TOML config), `preflight` (environment checks
//! and error translation), `scheduler` (BPF load/attach and the userspace
//! loop), `fair` (the fair path's pure policy), `stats` (scx_stats server
//! and `--monitor`), `discovery` (the scanner thread: libraries and
//! processes to probe), `probes` (ELF symbols and the uprobes' lifetimes),
//! `classify` (the task-class map, rules, `mark` and `ps`). The BPF side
//! lives in `src/bpf/`, one file per concern.

mod bpf_intf;
mod bpf_skel;
mod classify;
mod config;
mod discovery;
mod fair;
mod idle_guard;
mod irq_shield;
mod preflight;
mod probes;
mod scheduler;
mod signals;
mod stats;
mod tenants;
mod trace;

use std::mem::MaybeUninit;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use log::{debug, error, info};

use config::{Config, ConfigSource};

/// scx_express: an express lane for GPU launchers and AI-agent loops on a
/// sched_ext kernel; fair, nice-weighted scheduling for everything else.
///
/// With no subcommand, it loads and runs the scheduler until SIGINT or
/// SIGTERM, then detaches cleanly. It needs root and a kernel with
/// CONFIG_SCHED_CLASS_EXT (Linux >= 6.12).
#[derive(Debug, Parser)]
#[command(version, about, long_about)]
struct Cli {
    /// Config file (TOML). Without it, the built-in copy of
    /// configs/default.toml is used. Every key is documented there.
    #[arg(short, long, value_name = "FILE", global = true)]
    config: Option<PathBuf>,

    /// Also print scheduler statistics every SECS seconds while running.
    #[arg(long, value_name = "SECS")]
    stats: Option<f64>,

    /// Do not run a scheduler: print the statistics of the running
    /// scx_express every SECS seconds.
    #[arg(long, value_name = "SECS", conflicts_with = "stats")]
    monitor: Option<f64>,

    /// Also write the counters every second to FILE in the Prometheus /
    /// OpenMetrics text format (for node_exporter's textfile collector).
    #[arg(long, value_name = "FILE")]
    metrics_file: Option<PathBuf>,

    /// Describe every statistic (as shown by --stats and --monitor) and exit.
    #[arg(long)]
    help_stats: bool,

    /// Verbose output: debug logs and the libbpf log.
    #[arg(short, long)]
    verbose: bool,

    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate a config file without touching the kernel; prints `ok` or
    /// every error with its key.
    CheckConfig {
        /// The TOML file to check.
        file: PathBuf,
    },
    /// Set the class of a process's threads, or of one thread, in the
    /// running scheduler (root only). The CLI outranks every other source.
    #[command(group(clap::ArgGroup::new("target").required(true).args(["pid", "tid"])))]
    #[command(group(clap::ArgGroup::new("what").required(true).args(["class", "clear"])))]
    Mark {
        /// Every thread of this process.
        #[arg(long)]
        pid: Option<i32>,
        /// This thread only.
        #[arg(long)]
        tid: Option<i32>,
        /// The class to set.
        #[arg(long, value_enum)]
        class: Option<config::ClassName>,
        /// Remove a class set by `mark`, so other sources decide again.
        #[arg(long)]
        clear: bool,
    },
    /// Print the running scheduler's counters once, as JSON.
    Stats {
        /// One `dotted.key value` line per counter instead of JSON.
        #[arg(long)]
        flat: bool,
    },
    /// List classified threads: TID, PID, COMM, CLASS, where the class came
    /// from, CUDA launches and syncs seen, and express tokens left (root only).
    Ps,
    /// Trace CUDA launchers without a scheduler (works without sched_ext).
    ///
    /// Loads the scheduler's CUDA and marker probes, plus the sched_switch and
    /// hard/soft IRQ tracepoints, and attaches no scheduler. At the end it
    /// prints, per thread that made CUDA calls: the class the scheduler would
    /// give it, launches, syncs, context switches (voluntary/involuntary),
    /// off-CPU time, context switches and IRQs per 1,000 launches, and the
    /// detection latency of the scheduler's probe policy (replayed from the
    /// first CUDA call with the full policy; with the scheduler policy, the
    /// JSON report's classified_ns); then the median gap
    /// between consecutive launches with and without a context switch in
    /// between (the difference is the preemption penalty), probe hits per
    /// entry point, and IRQ counts and time by IRQ and softirq vector. The
    /// IRQ tracepoints see device IRQs only, not the local timer or IPIs.
    /// For threads of class agent, a per-step breakdown of the local tail:
    /// a step runs from the wakeup that ends an interruptible sleep (a tool
    /// reply) to the next interruptible sleep, split into runqueue wait,
    /// run, IRQ and softirq time, page faults, block I/O and other D-state
    /// sleep, with the p99 and slowest steps.
    /// Needs root, BTF and uprobes.
    Trace(trace::TraceArgs),
}

fn init_logging(verbose: bool) {
    let level = if verbose {
        simplelog::LevelFilter::Debug
    } else {
        simplelog::LevelFilter::Info
    };
    let cfg = simplelog::ConfigBuilder::new()
        .set_time_level(simplelog::LevelFilter::Error)
        .set_location_level(simplelog::LevelFilter::Off)
        .set_target_level(simplelog::LevelFilter::Off)
        .set_thread_level(simplelog::LevelFilter::Off)
        .build();
    let _ = simplelog::TermLogger::init(
        level,
        cfg,
        simplelog::TerminalMode::Stderr,
        simplelog::ColorChoice::Never,
    );
}

fn secs(v: f64, flag: &str) -> Result<Duration> {
    Duration::try_from_secs_f64(v)
        .ok()
        .filter(|d| !d.is_zero())
        .with_context(|| format!("{flag} takes a positive number of seconds, got {v}"))
}

/// Nice -20 for the calling thread (and the threads it starts later).
/// Best effort: a failure only makes a start on a busy machine slower.
fn raise_own_priority() {
    // SAFETY: plain syscall on the calling thread; no pointers involved.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, -20) };
    if rc != 0 {
        debug!(
            "could not raise the scheduler's priority: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Keep the OOM killer off the scheduler: killing it detaches it, and its
/// locked memory (VmLck was 415 MB in the 1 GB test VM: mlockall locks
/// every mapping) makes it a likely pick on a small machine.
/// Best effort, like raise_own_priority().
fn protect_from_oom_killer() {
    if let Err(e) = std::fs::write("/proc/self/oom_score_adj", "-1000") {
        debug!("could not set the scheduler's oom_score_adj: {e}");
    }
}

/// Runs the scheduler, re-attaching when the kernel asks for a restart:
/// it does on every CPU hotplug event, since the BPF side leaves
/// ops.cpu_online/cpu_offline out (src/bpf/main.bpf.c says why).
fn run_scheduler(
    cli: &Cli,
    source: ConfigSource,
    mut cfg: Config,
    signals: &signals::Signals,
) -> Result<()> {
    let shutdown = &signals.shutdown;
    preflight::require_sched_ext()?;
    preflight::require_root(
        "scx_express",
        "it loads BPF programs and attaches a sched_ext scheduler",
    )?;
    // Before touching pins or the stats socket, which a running one owns.
    preflight::require_no_scheduler()?;
    // Loading and verifying the BPF programs takes CPU; on a loaded machine
    // a nice-0 loader gets a small share of it, and attaching beside a few
    // CPU hogs per CPU takes tens of seconds instead of about one
    // (docs/operations.md). Threads started from here on inherit it.
    raise_own_priority();

    let metrics = stats::SharedMetrics::default();
    let _server = stats::launch_server(metrics.clone()).context("starting the stats server")?;

    if let Some(v) = cli.stats {
        let interval = secs(v, "--stats")?;
        let stop = shutdown.clone();
        std::thread::spawn(move || {
            if let Err(e) = stats::monitor(interval, || stop.load(Ordering::Relaxed)) {
                error!("stats monitor: {e:#}");
            }
        });
    }

    let _idle_guard = match cfg.express.pm_qos_resume_latency_us {
        Some(us) => {
            let cpus = scx_utils::Topology::new()?.all_cpus.into_keys();
            Some(idle_guard::IdleGuard::hold(cpus, us)?)
        }
        None => None,
    };
    // After require_no_scheduler: a state file left now is a crashed run's.
    let online: std::collections::BTreeSet<usize> =
        scx_utils::Topology::new()?.all_cpus.into_keys().collect();
    let shielded = irq_shield::shielded_cpus(&cfg.express, &online)
        .with_context(|| format!("invalid config {source}"))?;
    // Restores on drop: on return, error or not (SIGINT and SIGTERM return).
    let _irq_shield = irq_shield::start(&shielded, &online)?;
    // Keep the scheduler's memory resident: a page fault in the thread that
    // schedules everyone else must not wait on reclaim.
    scx_rustland_core::ALLOCATOR.lock_memory();
    protect_from_oom_killer();
    let result = (|| loop {
        let mut open_object = MaybeUninit::uninit();
        let mut sched = scheduler::Scheduler::init(&cfg, &mut open_object, cli.verbose, &shielded)?;
        let uei = sched.run(signals, &source, &metrics, cli.metrics_file.as_deref())?;
        cfg = sched.config().clone();
        if !uei.should_restart() || shutdown.load(Ordering::Relaxed) {
            return Ok(());
        }
        info!("the kernel asked for a restart; re-attaching");
    })();
    scx_rustland_core::ALLOCATOR.unlock_memory();
    result
}

fn real_main(cli: Cli) -> Result<()> {
    if cli.help_stats {
        return stats::describe(&mut std::io::stdout());
    }
    match &cli.command {
        Some(Command::CheckConfig { file }) => {
            Config::load(file)?;
            println!("ok");
            return Ok(());
        }
        Some(Command::Mark {
            pid,
            tid,
            class,
            clear,
        }) => return classify::mark(*pid, *tid, *class, *clear),
        Some(Command::Stats { flat }) => {
            println!("{}", stats::snapshot(*flat)?);
            return Ok(());
        }
        Some(Command::Ps) => {
            classify::print_ps(&classify::ps_rows()?);
            return Ok(());
        }
        // Needs the config and the signal handler, below.
        Some(Command::Trace(_)) | None => {}
    }

    let source = match &cli.config {
        Some(p) => ConfigSource::File(p.clone()),
        None => ConfigSource::Builtin,
    };
    // Validate the config before anything touches the kernel.
    let cfg = source.load()?;

    // SIGINT and SIGTERM detach cleanly; SIGHUP reloads the config.
    let signals = signals::Signals::install()?;
    let shutdown = signals.shutdown.clone();

    if let Some(Command::Trace(args)) = &cli.command {
        return trace::run(args, &cfg, &shutdown, cli.verbose);
    }

    if let Some(v) = cli.monitor {
        let interval = secs(v, "--monitor")?;
        return stats::monitor(interval, || shutdown.load(Ordering::Relaxed));
    }
    run_scheduler(&cli, source, cfg, &signals)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose);
    match real_main(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("scx_express: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn stats_and_monitor_conflict() {
        assert!(Cli::try_parse_from(["scx_express", "--stats", "1", "--monitor", "1"]).is_err());
    }

    #[test]
    fn interval_must_be_positive() {
        assert!(secs(0.0, "--stats").is_err());
        assert!(secs(-1.0, "--stats").is_err());
        assert_eq!(secs(0.5, "--stats").unwrap(), Duration::from_millis(500));
    }
}
