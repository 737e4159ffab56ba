//! Statistics: the scx_stats server behind `--stats` and `--monitor`.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use scx_stats::prelude::*;
use scx_stats_derive::{stat_doc, Stats};
use serde::{Deserialize, Serialize};

#[stat_doc]
#[derive(Clone, Debug, Default, Serialize, Deserialize, Stats)]
#[stat(top)]
pub struct Metrics {
    #[stat(desc = "Tasks handed to the userspace scheduler")]
    pub user_queued: u64,
    #[stat(desc = "Decisions sent back by the userspace scheduler")]
    pub user_dispatched: u64,
    #[stat(desc = "Wakeups placed directly on an idle CPU")]
    pub direct_idle: u64,
    #[stat(desc = "Per-CPU kthreads dispatched locally")]
    pub kthread: u64,
    #[stat(desc = "Wakeups of the scheduler's own threads")]
    pub usersched: u64,
    #[stat(desc = "Tasks enqueued by BPF alone (userspace busy)")]
    pub fallback: u64,
    #[stat(desc = "Tasks rescued by BPF after waiting rescue_ms for userspace")]
    pub rescued: u64,
    #[stat(desc = "Express-lane dispatches")]
    pub express: u64,
    #[stat(desc = "Express tasks sent to the fair path for lack of tokens")]
    pub express_no_tokens: u64,
    #[stat(desc = "Tasks known to the fair policy")]
    pub fair_tasks: u64,
    #[stat(desc = "Libraries with CUDA or marker uprobes attached")]
    pub probed_libraries: u64,
    #[stat(desc = "Launch-probe windows opened")]
    pub launch_windows: u64,
}

impl Metrics {
    /// One human-readable line per interval.
    pub fn format<W: Write>(&self, w: &mut W) -> Result<()> {
        writeln!(
            w,
            "[express] user q/d {}/{} idle {} kthr {} self {} fallback {} rescued {} \
             express {} no_tokens {} tasks {} libs {} windows {}",
            self.user_queued,
            self.user_dispatched,
            self.direct_idle,
            self.kthread,
            self.usersched,
            self.fallback,
            self.rescued,
            self.express,
            self.express_no_tokens,
            self.fair_tasks,
            self.probed_libraries,
            self.launch_windows,
        )?;
        Ok(())
    }

    /// Counter increase since `prev` (gauges keep their current value).
    pub fn delta(&self, prev: &Metrics) -> Metrics {
        Metrics {
            user_queued: self.user_queued.wrapping_sub(prev.user_queued),
            user_dispatched: self.user_dispatched.wrapping_sub(prev.user_dispatched),
            direct_idle: self.direct_idle.wrapping_sub(prev.direct_idle),
            kthread: self.kthread.wrapping_sub(prev.kthread),
            usersched: self.usersched.wrapping_sub(prev.usersched),
            fallback: self.fallback.wrapping_sub(prev.fallback),
            rescued: self.rescued.wrapping_sub(prev.rescued),
            express: self.express.wrapping_sub(prev.express),
            express_no_tokens: self.express_no_tokens.wrapping_sub(prev.express_no_tokens),
            fair_tasks: self.fair_tasks,
            probed_libraries: self.probed_libraries,
            launch_windows: self.launch_windows.wrapping_sub(prev.launch_windows),
        }
    }
}

/// Latest metrics, shared between the scheduler loop and the stats server.
pub type SharedMetrics = Arc<Mutex<Metrics>>;

/// Starts the stats server at scx_stats' default socket path.
pub fn launch_server(metrics: SharedMetrics) -> Result<StatsServer<(), ()>> {
    let data = StatsServerData::new().add_meta(Metrics::meta()).add_stats(
        "top",
        Box::new(move |_args, _chan| metrics.lock().unwrap().to_json()),
    );
    StatsServer::new(data).launch()
}

/// Prints the running scheduler's metrics every `interval`, as deltas.
pub fn monitor(interval: Duration, should_exit: impl FnMut() -> bool) -> Result<()> {
    let mut prev: Option<Metrics> = None;
    scx_utils::monitor_stats::<Metrics>(&[], interval, should_exit, |m| {
        let shown = match &prev {
            Some(p) => m.delta(p),
            None => m.clone(),
        };
        shown.format(&mut std::io::stdout())?;
        prev = Some(m);
        Ok(())
    })
}
