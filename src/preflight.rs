//! Checks made before touching the kernel, and translation of load failures
//! into what the user should check. Each message names the fix.

use std::path::Path;

use anyhow::{bail, Result};

const SCHED_EXT_SYSFS: &str = "/sys/kernel/sched_ext";

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// Fails unless the running kernel has sched_ext.
pub fn require_sched_ext() -> Result<()> {
    if Path::new(SCHED_EXT_SYSFS).join("state").exists() {
        return Ok(());
    }
    bail!(
        "the running kernel ({}) has no sched_ext: {SCHED_EXT_SYSFS} is missing.\n\
         scx_express needs Linux >= 6.12 built with CONFIG_SCHED_CLASS_EXT=y \
         (plus CONFIG_BPF_SYSCALL=y, CONFIG_BPF_JIT=y and CONFIG_DEBUG_INFO_BTF=y).\n\
         Get such a kernel from your distribution (for example Debian's \
         linux-image-cloud-amd64 from sid, Ubuntu >= 25.04, Fedora >= 42, Arch), \
         or try scx_express without one in a VM: tests/vm/run.sh (see README.md).",
        kernel_release()
    )
}

/// Fails unless we run as root; `why` says what needs it.
pub fn require_root(what: &str, why: &str) -> Result<()> {
    if unsafe { libc::geteuid() } == 0 {
        return Ok(());
    }
    bail!("{what} needs root ({why}); run it with sudo")
}

/// Hints for a BPF open/load/attach failure, from what the system lacks.
pub fn load_failure_hints() -> Vec<String> {
    let mut hints = Vec::new();
    let rel = kernel_release();
    if !Path::new("/sys/kernel/btf/vmlinux").exists() {
        hints.push(
            "kernel BTF is missing (/sys/kernel/btf/vmlinux): the kernel must be \
             built with CONFIG_DEBUG_INFO_BTF=y"
                .into(),
        );
    }
    if let Ok(v) = std::fs::read_to_string("/proc/sys/net/core/bpf_jit_enable") {
        if v.trim() == "0" {
            hints.push(
                "the BPF JIT is off: sysctl -w net.core.bpf_jit_enable=1 \
                 (struct_ops programs need it)"
                    .into(),
            );
        }
    }
    let boot_config = format!("/boot/config-{rel}");
    if !Path::new(&boot_config).exists() && !Path::new("/proc/config.gz").exists() {
        hints.push(format!(
            "no kernel config found ({boot_config} or /proc/config.gz): libbpf \
             reads it to resolve kernel config values; install it there"
        ));
    }
    if let Ok(state) = std::fs::read_to_string(Path::new(SCHED_EXT_SYSFS).join("state")) {
        if state.trim() != "disabled" {
            hints.push(format!(
                "another sched_ext scheduler is active (state: {}); stop it first \
                 (see /sys/kernel/sched_ext/root/ops)",
                state.trim()
            ));
        }
    }
    if hints.is_empty() {
        hints.push(
            "run with -v for the libbpf log, and check `dmesg` for the \
             verifier's or sched_ext's reason"
                .into(),
        );
    }
    hints
}

/// Wraps a load/attach error with the hints above.
pub fn explain_load_error(err: anyhow::Error) -> anyhow::Error {
    let hints = load_failure_hints()
        .into_iter()
        .map(|h| format!("  - {h}"))
        .collect::<Vec<_>>()
        .join("\n");
    err.context(format!("loading the BPF scheduler failed; check:\n{hints}"))
}

/// The ops name of the sched_ext scheduler attached now, if any.
pub fn running_scheduler() -> Option<String> {
    let state = std::fs::read_to_string(Path::new(SCHED_EXT_SYSFS).join("state")).ok()?;
    if state.trim() != "enabled" {
        return None;
    }
    Some(
        std::fs::read_to_string(Path::new(SCHED_EXT_SYSFS).join("root/ops"))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into()),
    )
}

/// Fails if a sched_ext scheduler is already attached.
pub fn require_no_scheduler() -> Result<()> {
    match running_scheduler() {
        None => Ok(()),
        Some(ops) => bail!(
            "a sched_ext scheduler is already running (ops {ops}); stop it first \
             (for scx_express: systemctl stop scx_express, or SIGINT/SIGTERM)"
        ),
    }
}

/// Fails unless scx_express itself is the attached scheduler.
pub fn require_express_running() -> Result<()> {
    match running_scheduler() {
        Some(ops) if ops.starts_with("express") => Ok(()),
        Some(ops) => bail!("scx_express is not running (the attached scheduler is {ops})"),
        None => bail!("scx_express is not running (no sched_ext scheduler is attached)"),
    }
}
