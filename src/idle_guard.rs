//! Deep-idle guard: while scx_express runs, hold every CPU at a PM QoS
//! resume latency, so no CPU serving express wakeups sits in an idle state
//! that is slow to leave. The previous values are restored on drop.

use anyhow::{bail, Context, Result};
use log::{info, warn};

fn sysfs_path(cpu: usize) -> String {
    format!("/sys/devices/system/cpu/cpu{cpu}/power/pm_qos_resume_latency_us")
}

pub struct IdleGuard {
    saved: Vec<(usize, String)>,
}

impl IdleGuard {
    /// Applies `latency_us` to `cpus`, remembering what was there.
    pub fn hold(cpus: impl IntoIterator<Item = usize>, latency_us: u64) -> Result<Self> {
        if !scx_utils::pm::cpu_idle_resume_latency_supported() {
            bail!(
                "express.pm_qos_resume_latency_us is set, but this kernel has no per-CPU \
                 PM QoS resume latency (sysfs pm_qos_resume_latency_us); unset the key"
            );
        }
        let mut guard = IdleGuard { saved: Vec::new() };
        for cpu in cpus {
            let old = std::fs::read_to_string(sysfs_path(cpu))
                .with_context(|| format!("reading {}", sysfs_path(cpu)))?;
            scx_utils::pm::update_cpu_idle_resume_latency(cpu, latency_us as i32)
                .with_context(|| format!("writing {}", sysfs_path(cpu)))?;
            guard.saved.push((cpu, old.trim().to_string()));
        }
        info!(
            "deep-idle guard: {} CPUs held at {latency_us} µs resume latency",
            guard.saved.len()
        );
        Ok(guard)
    }
}

impl Drop for IdleGuard {
    fn drop(&mut self) {
        for (cpu, old) in &self.saved {
            if let Err(e) = std::fs::write(sysfs_path(*cpu), old) {
                warn!("restoring {}: {e}", sysfs_path(*cpu));
            }
        }
    }
}
