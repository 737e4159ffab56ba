//! IRQ shielding (`express.irq_shield`): while scx_express runs, device
//! IRQs are steered off a few CPUs, the *shielded* CPUs, which the express
//! lane then prefers (src/bpf/placement.bpf.c). A device IRQ and the
//! softirq it raises run on the CPU they land on, before whatever task that
//! CPU was about to run: a NIC or NVMe completion adds its whole handler
//! time (microseconds, up to milliseconds of NET_RX under load) to a
//! latency-critical wakeup there.
//!
//! Every affinity changed is saved first, in a state file written
//! atomically before the first change, and restored exactly on exit (the
//! `IrqShield` guard's drop) or, after a `kill -9`, by the next start
//! (`recover`). IRQs the kernel will not move (managed IRQs, per-CPU IRQs,
//! the timer: their writes fail with EIO) are skipped and reported.
//!
//! The /proc/irq root and the state file are parameters, so that the unit
//! tests run on a fake tree.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use log::{debug, info, warn};

use crate::config::ExpressConfig;

/// Where the kernel lists the IRQs.
pub const PROC_IRQ: &str = "/proc/irq";
/// What the running scheduler changed: tmpfs, so a reboot (which resets
/// every affinity anyway) forgets it.
pub const STATE_FILE: &str = "/run/scx_express/irq_shield.state";

/// Writes an affinity file; a parameter so that tests can fail writes.
pub type WriteFn = fn(&Path, &str) -> std::io::Result<()>;

fn write_affinity(path: &Path, list: &str) -> std::io::Result<()> {
    // One write(2) of the whole list: the kernel parses what one write gives.
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)?
        .write_all(list.as_bytes())
}

/// Parses a cpulist such as `0-3,8,10-11`.
pub fn parse_cpulist(s: &str) -> Result<BTreeSet<usize>> {
    let mut out = BTreeSet::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        let num = |t: &str| {
            t.trim()
                .parse::<usize>()
                .with_context(|| format!("bad CPU number {t:?} in cpulist {s:?}"))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b || b - a > 65536 {
                    bail!("bad range {part:?} in cpulist {s:?}");
                }
                out.extend(a..=b);
            }
            None => {
                out.insert(num(part)?);
            }
        }
    }
    Ok(out)
}

/// Formats a CPU set as a cpulist: `0-3,8`.
pub fn format_cpulist(set: &BTreeSet<usize>) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut it = set.iter().copied().peekable();
    while let Some(start) = it.next() {
        let mut end = start;
        while it.peek() == Some(&(end + 1)) {
            end = it.next().unwrap_or(end);
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    parts.join(",")
}

/// The CPUs to shield: none without `irq_shield`, else the last
/// `irq_shield_cpus` online CPUs (by default a quarter of them, at least
/// one). The last ones because CPU 0 keeps the IRQs nothing can move
/// (the timer, often the boot-time legacy IRQs). Never every CPU: the
/// IRQs must go somewhere.
pub fn shielded_cpus(e: &ExpressConfig, online: &BTreeSet<usize>) -> Result<BTreeSet<usize>> {
    if !e.irq_shield {
        return Ok(BTreeSet::new());
    }
    let n = online.len();
    let want = match e.irq_shield_cpus {
        Some(k) => k as usize,
        None => n.div_ceil(4).max(1),
    };
    if want >= n {
        bail!(
            "express.irq_shield_cpus = {want} would shield all {n} online CPUs, leaving the \
             IRQs nowhere to go; set it below {n} or set express.irq_shield = false"
        );
    }
    Ok(online.iter().rev().take(want).copied().collect())
}

/// One IRQ's original affinity, as saved in the state file.
#[derive(Debug, Clone, PartialEq)]
pub struct Saved {
    pub irq: u32,
    /// The original `smp_affinity_list`, exactly as read.
    pub list: String,
}

/// An IRQ the shield could not move, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Unmovable {
    pub irq: u32,
    pub name: String,
    pub why: String,
}

/// State file text: a header, then `IRQ AFFINITY_LIST` per line.
pub fn format_state(saved: &[Saved]) -> String {
    let mut s = String::from(
        "# scx_express irq_shield: original IRQ affinities (IRQ smp_affinity_list).\n\
         # Restored by scx_express's next start; to restore by hand, write each\n\
         # list to /proc/irq/IRQ/smp_affinity_list, then delete this file.\n",
    );
    for e in saved {
        s.push_str(&format!("{} {}\n", e.irq, e.list));
    }
    s
}

/// Parses `format_state`'s text; `path` names the file in errors.
pub fn parse_state(text: &str, path: &Path) -> Result<Vec<Saved>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = || {
            format!(
                "{} line {}: {line:?} is not `IRQ AFFINITY_LIST`; restore that IRQ's \
                 /proc/irq/IRQ/smp_affinity_list by hand, then delete the file",
                path.display(),
                i + 1
            )
        };
        let (irq, list) = line.split_once(' ').with_context(bad)?;
        let irq = irq.parse::<u32>().with_context(bad)?;
        parse_cpulist(list).with_context(bad)?;
        out.push(Saved {
            irq,
            list: list.trim().to_string(),
        });
    }
    Ok(out)
}

/// Writes the state file atomically: a temporary file beside it, synced,
/// then renamed over it, so a crash leaves the old file or the new one.
pub fn write_state(path: &Path, saved: &[Saved]) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let tmp = path.with_extension("tmp");
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(format_state(saved).as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().with_context(|| format!("writing the IRQ shield state file {}", path.display()))
}

/// The names of IRQ `irq`'s handlers (its subdirectories), or None for an
/// IRQ without a handler: no device uses it, nothing to move.
fn irq_name(dir: &Path) -> Option<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    (!names.is_empty()).then(|| names.join(","))
}

/// Every IRQ number under `root`, in order.
fn irqs(root: &Path) -> Result<Vec<u32>> {
    let mut out: Vec<u32> = std::fs::read_dir(root)
        .with_context(|| format!("listing {}", root.display()))?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    out.sort_unstable();
    Ok(out)
}

/// Why the kernel refused a new affinity, in words.
fn refusal(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EIO) => "EIO: the kernel keeps it (a managed, per-CPU or timer IRQ)".into(),
        Some(libc::EINVAL) => "EINVAL: the kernel rejects the new affinity".into(),
        _ => e.to_string(),
    }
}

/// One IRQ to move: where it is, where it goes.
struct Plan {
    irq: u32,
    name: String,
    old: String,
    new: String,
}

/// The IRQs whose affinity includes a shielded CPU, with their new
/// affinity: the old one minus the shielded CPUs or, if that leaves none,
/// every CPU not shielded.
fn plan(
    root: &Path,
    shielded: &BTreeSet<usize>,
    online: &BTreeSet<usize>,
    unmovable: &mut Vec<Unmovable>,
) -> Result<Vec<Plan>> {
    let rest: BTreeSet<usize> = online.difference(shielded).copied().collect();
    let mut out = Vec::new();
    for irq in irqs(root)? {
        let dir = root.join(irq.to_string());
        let Some(name) = irq_name(&dir) else {
            continue;
        };
        let old = match std::fs::read_to_string(dir.join("smp_affinity_list")) {
            Ok(s) => s.trim().to_string(),
            Err(e) => {
                unmovable.push(Unmovable {
                    irq,
                    name,
                    why: format!("cannot read its affinity: {e}"),
                });
                continue;
            }
        };
        let cur = parse_cpulist(&old).with_context(|| format!("IRQ {irq}"))?;
        if cur.is_disjoint(shielded) {
            continue;
        }
        let mut new: BTreeSet<usize> = cur.difference(shielded).copied().collect();
        if new.is_empty() {
            new = rest.clone();
        }
        let new = format_cpulist(&new);
        out.push(Plan {
            irq,
            name,
            old,
            new,
        });
    }
    Ok(out)
}

/// What `IrqShield::apply` did.
#[derive(Debug, Default)]
pub struct Report {
    /// (IRQ, name, old affinity, new affinity).
    pub moved: Vec<(u32, String, String, String)>,
    pub unmovable: Vec<Unmovable>,
}

/// Holds the shield; restores every affinity it changed when dropped.
pub struct IrqShield {
    root: PathBuf,
    state: PathBuf,
    write: WriteFn,
    saved: Vec<Saved>,
}

impl IrqShield {
    /// Steers every movable IRQ under `root` off `shielded`. The state file
    /// lists every IRQ about to change before the first change, and what
    /// did change after the last.
    pub fn apply(
        root: &Path,
        state: &Path,
        shielded: &BTreeSet<usize>,
        online: &BTreeSet<usize>,
        write: WriteFn,
    ) -> Result<(Self, Report)> {
        let mut report = Report::default();
        let plans = plan(root, shielded, online, &mut report.unmovable)?;
        let planned: Vec<Saved> = plans
            .iter()
            .map(|p| Saved {
                irq: p.irq,
                list: p.old.clone(),
            })
            .collect();
        write_state(state, &planned)?;
        let mut shield = Self {
            root: root.to_path_buf(),
            state: state.to_path_buf(),
            write,
            saved: Vec::new(),
        };
        for p in plans {
            let path = root.join(p.irq.to_string()).join("smp_affinity_list");
            match write(&path, &p.new) {
                Ok(()) => {
                    shield.saved.push(Saved {
                        irq: p.irq,
                        list: p.old.clone(),
                    });
                    report.moved.push((p.irq, p.name, p.old, p.new));
                }
                Err(e) => report.unmovable.push(Unmovable {
                    irq: p.irq,
                    name: p.name,
                    why: refusal(&e),
                }),
            }
        }
        write_state(state, &shield.saved)?;
        Ok((shield, report))
    }

    /// Restores every saved affinity, then deletes the state file.
    pub fn restore(&mut self) {
        let n = restore_all(&self.root, &self.saved, self.write);
        if n > 0 {
            info!("irq_shield: restored the affinity of {n} IRQs");
        }
        self.saved.clear();
        remove_state(&self.state);
    }
}

impl Drop for IrqShield {
    fn drop(&mut self) {
        self.restore();
    }
}

fn remove_state(path: &Path) {
    if let Err(e) = std::fs::remove_file(path) {
        if e.kind() != std::io::ErrorKind::NotFound {
            warn!("irq_shield: cannot remove {}: {e}", path.display());
        }
    }
}

/// Writes each saved affinity back; returns how many were restored. An
/// IRQ that is gone (its device removed) or refuses is reported and
/// skipped: the others still get theirs back.
fn restore_all(root: &Path, saved: &[Saved], write: WriteFn) -> usize {
    let mut n = 0;
    for s in saved {
        let path = root.join(s.irq.to_string()).join("smp_affinity_list");
        match write(&path, &s.list) {
            Ok(()) => n += 1,
            Err(e) => warn!(
                "irq_shield: cannot restore IRQ {} to {}: {}",
                s.irq,
                s.list,
                refusal(&e)
            ),
        }
    }
    n
}

/// A start after a crash (`kill -9`): restores what the state file left
/// by the last run lists, then deletes it. Returns how many IRQs were
/// restored (None: no state file).
pub fn recover(root: &Path, state: &Path, write: WriteFn) -> Result<Option<usize>> {
    let text = match std::fs::read_to_string(state) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", state.display())),
    };
    let saved = parse_state(&text, state)?;
    let n = restore_all(root, &saved, write);
    remove_state(state);
    Ok(Some(n))
}

/// PIDs of running irqbalance processes.
fn irqbalance_pids() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "irqbalance")
        })
        .collect()
}

/// Logs a report: one summary line, one line for the IRQs left alone, the
/// irqbalance warning.
fn log_report(r: &Report, shielded: &BTreeSet<usize>) {
    let cpus = format_cpulist(shielded);
    for (irq, name, old, new) in &r.moved {
        debug!("irq_shield: IRQ {irq} ({name}): {old} -> {new}");
    }
    // A guest whose only device IRQs are managed (NVMe queues) has nothing
    // to move: say so rather than print an empty list.
    let what = if r.moved.is_empty() {
        "no movable IRQ was on them".to_string()
    } else {
        let moved: Vec<String> = r.moved.iter().map(|m| m.0.to_string()).collect();
        format!(
            "moved {} IRQs off them (IRQs {})",
            moved.len(),
            moved.join(" ")
        )
    };
    info!("irq_shield: shielding CPUs {cpus}: {what}; the express lane prefers them");
    if !r.unmovable.is_empty() {
        let list: Vec<String> = r
            .unmovable
            .iter()
            .map(|u| format!("IRQ {} ({}): {}", u.irq, u.name, u.why))
            .collect();
        warn!(
            "irq_shield: {} IRQs stay on CPUs {cpus}, not movable: {}",
            list.len(),
            list.join("; ")
        );
    }
    let running = match irqbalance_pids().as_slice() {
        [] => "irqbalance is not running".to_string(),
        pids => format!("irqbalance IS RUNNING (pid {pids:?}) and will move IRQs back"),
    };
    warn!(
        "irq_shield: {running}; keep it off CPUs {cpus}: set IRQBALANCE_BANNED_CPULIST={cpus} \
         in /etc/default/irqbalance (or /etc/sysconfig/irqbalance), or run it with \
         --banned-cpulist={cpus}, and restart it"
    );
}

/// At start: restores what a crashed run left (always, shield on or off),
/// then shields `shielded` (if any). The guard restores on drop.
pub fn start(shielded: &BTreeSet<usize>, online: &BTreeSet<usize>) -> Result<Option<IrqShield>> {
    let (root, state) = (Path::new(PROC_IRQ), Path::new(STATE_FILE));
    if let Some(n) = recover(root, state, write_affinity)? {
        info!(
            "irq_shield: found {} from a run that did not exit cleanly; restored the \
             affinity of {n} IRQs from it",
            state.display()
        );
    }
    if shielded.is_empty() {
        return Ok(None);
    }
    let (shield, report) = IrqShield::apply(root, state, shielded, online, write_affinity)?;
    log_report(&report, shielded);
    Ok(Some(shield))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake /proc/irq: IRQ -> (handler name or "", affinity list).
    struct Tree {
        dir: PathBuf,
    }

    impl Tree {
        fn new(tag: &str, irqs: &[(u32, &str, &str)]) -> Self {
            let dir =
                std::env::temp_dir().join(format!("scx_express-irq-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(dir.join("irq")).unwrap();
            for &(irq, name, list) in irqs {
                let d = dir.join("irq").join(irq.to_string());
                std::fs::create_dir_all(&d).unwrap();
                if !name.is_empty() {
                    std::fs::create_dir(d.join(name)).unwrap();
                }
                std::fs::write(d.join("smp_affinity_list"), format!("{list}\n")).unwrap();
            }
            std::fs::write(dir.join("irq").join("default_smp_affinity"), "3\n").unwrap();
            Tree { dir }
        }
        fn root(&self) -> PathBuf {
            self.dir.join("irq")
        }
        fn state(&self) -> PathBuf {
            self.dir.join("run").join("irq_shield.state")
        }
        fn list(&self, irq: u32) -> String {
            let p = self.root().join(irq.to_string()).join("smp_affinity_list");
            std::fs::read_to_string(p).unwrap().trim().to_string()
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// As the kernel does for managed, per-CPU and timer IRQs: EIO, for
    /// IRQs whose handler is named `percpu*`.
    fn fake_write(path: &Path, list: &str) -> std::io::Result<()> {
        let dir = path.parent().unwrap();
        if irq_name(dir).is_some_and(|n| n.starts_with("percpu")) {
            return Err(std::io::Error::from_raw_os_error(libc::EIO));
        }
        std::fs::write(path, list)
    }

    fn set(s: &str) -> BTreeSet<usize> {
        parse_cpulist(s).unwrap()
    }

    #[test]
    fn cpulists_round_trip() {
        assert_eq!(set("0-3,8,10-11"), [0, 1, 2, 3, 8, 10, 11].into());
        assert_eq!(format_cpulist(&set("0-3,8,10-11")), "0-3,8,10-11");
        assert_eq!(format_cpulist(&set("5")), "5");
        assert_eq!(format_cpulist(&BTreeSet::new()), "");
        assert!(parse_cpulist("3-1").is_err());
        assert!(parse_cpulist("x").is_err());
    }

    #[test]
    fn shielded_set_is_the_last_cpus_and_never_all() {
        let mut e = ExpressConfig::default();
        let online = set("0-7");
        assert!(
            shielded_cpus(&e, &online).unwrap().is_empty(),
            "off by default"
        );
        e.irq_shield = true;
        assert_eq!(shielded_cpus(&e, &online).unwrap(), set("6-7"));
        assert_eq!(shielded_cpus(&e, &set("0-1")).unwrap(), set("1"));
        e.irq_shield_cpus = Some(3);
        assert_eq!(shielded_cpus(&e, &online).unwrap(), set("5-7"));
        e.irq_shield_cpus = Some(8);
        let err = shielded_cpus(&e, &online).unwrap_err().to_string();
        assert!(err.contains("express.irq_shield_cpus"), "{err}");
        e.irq_shield_cpus = None;
        assert!(
            shielded_cpus(&e, &set("0")).is_err(),
            "1 CPU: nothing to shield"
        );
    }

    #[test]
    fn movable_irqs_move_failing_ones_are_reported_and_all_restore() {
        let t = Tree::new(
            "move",
            &[
                (0, "percpu_timer", "0-3"),
                (4, "ttyS0", "0-3"),
                (9, "acpi", "2-3"),
                (11, "nvme0q1", "1"),
                (12, "", "0-3"),
            ],
        );
        let (shielded, online) = (set("2-3"), set("0-3"));
        let (mut s, r) =
            IrqShield::apply(&t.root(), &t.state(), &shielded, &online, fake_write).unwrap();
        let moved: Vec<u32> = r.moved.iter().map(|m| m.0).collect();
        assert_eq!(moved, [4, 9]);
        assert_eq!(t.list(4), "0-1");
        assert_eq!(
            t.list(9),
            "0-1",
            "empty after removal: every unshielded CPU"
        );
        assert_eq!(t.list(11), "1", "already off the shield: untouched");
        assert_eq!(t.list(12), "0-3", "no handler: untouched");
        assert_eq!(r.unmovable.len(), 1);
        assert_eq!(r.unmovable[0].irq, 0);
        assert!(r.unmovable[0].why.contains("EIO"), "{:?}", r.unmovable);
        let saved = parse_state(&std::fs::read_to_string(t.state()).unwrap(), &t.state());
        assert_eq!(saved.unwrap().len(), 2, "the state lists what changed");
        s.restore();
        assert_eq!(
            (t.list(4), t.list(9), t.list(0)),
            ("0-3".into(), "2-3".into(), "0-3".into())
        );
        assert!(!t.state().exists(), "a clean exit deletes the state file");
    }

    #[test]
    fn drop_restores() {
        let t = Tree::new("drop", &[(4, "ttyS0", "0,3")]);
        let shield = IrqShield::apply(&t.root(), &t.state(), &set("3"), &set("0-3"), fake_write);
        assert_eq!(t.list(4), "0");
        drop(shield);
        assert_eq!(t.list(4), "0,3");
    }

    #[test]
    fn state_file_round_trips_and_rejects_garbage() {
        let t = Tree::new("state", &[]);
        let saved = vec![
            Saved {
                irq: 4,
                list: "0-3".into(),
            },
            Saved {
                irq: 130,
                list: "0,2,5-7".into(),
            },
        ];
        write_state(&t.state(), &saved).unwrap();
        assert!(!t.state().with_extension("tmp").exists());
        let text = std::fs::read_to_string(t.state()).unwrap();
        assert_eq!(parse_state(&text, &t.state()).unwrap(), saved);
        let err = parse_state("4 0-3\nfour 1\n", Path::new("/x/s")).unwrap_err();
        assert!(format!("{err:#}").contains("/x/s line 2"), "{err:#}");
        assert!(parse_state("4 zero\n", Path::new("s")).is_err());
    }

    #[test]
    fn a_start_after_a_crash_restores_from_the_state_file() {
        let t = Tree::new("crash", &[(4, "ttyS0", "0-3"), (5, "i8042", "3")]);
        let (shield, _) =
            IrqShield::apply(&t.root(), &t.state(), &set("3"), &set("0-3"), fake_write).unwrap();
        assert_eq!((t.list(4), t.list(5)), ("0-2".into(), "0-2".into()));
        // kill -9: no destructor runs.
        std::mem::forget(shield);
        assert!(t.state().exists());
        let n = recover(&t.root(), &t.state(), fake_write).unwrap();
        assert_eq!(n, Some(2));
        assert_eq!((t.list(4), t.list(5)), ("0-3".into(), "3".into()));
        assert!(!t.state().exists());
        assert_eq!(recover(&t.root(), &t.state(), fake_write).unwrap(), None);
    }
}
