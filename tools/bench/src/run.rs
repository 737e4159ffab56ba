//! Running the plan: the guest scenario, one VM boot per scheduler here
//! (through tests/vm/run.sh), or a bundle to run elsewhere; and reading
//! the cells back out of the console logs.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context as _, Result};
use base64::Engine as _;
use md5::Digest as _;

use super::parse::{self, RawCell};
use super::{Plan, Scenario, Sched};

/// The guest half of the bench (busybox sh), appended to a generated header.
const GUEST_SH: &str = include_str!("guest.sh");
/// The bundle's runner (bash), for a machine without this repository.
const RUNNER_SH: &str = include_str!("runner.sh");

/// Host tools a boot carries (`HOST:GUEST`) and the scenarios that run
/// each (`None`: every boot). A boot carries only what its plan's scenarios
/// run: fio alone pulls about 90 MiB of libraries (ceph, glusterfs, ICU)
/// into the initramfs, which a bundle for cpu4x cells has no use for.
const TOOLS: &[(&str, Option<&[Scenario]>)] = &[
    ("/usr/bin/stress-ng:/usr/bin/stress-ng", None),
    (
        "/usr/bin/iperf3:/usr/bin/iperf3",
        Some(&[Scenario::Net, Scenario::Heavy]),
    ),
    (
        "/usr/bin/fio:/usr/bin/fio",
        Some(&[Scenario::Disk, Scenario::Heavy]),
    ),
    ("/usr/bin/cyclictest:/usr/bin/cyclictest", None),
    ("/usr/bin/chrt:/usr/bin/chrt", None),
    ("/usr/bin/nice:/usr/bin/nice", None),
];

/// Debian packages that provide TOOLS (for the error message).
const TOOL_PKGS: &str = "stress-ng iperf3 fio rt-tests util-linux coreutils";

/// For the guest's check of what a boot carries: each tool that only some
/// scenarios run, with them (`iperf3:net+heavy/fio:disk+heavy`).
fn tool_needs() -> String {
    let name = |t: &str| t.rsplit('/').next().unwrap_or(t).to_string();
    TOOLS
        .iter()
        .filter_map(|(t, for_s)| {
            let ss: Vec<String> = (*for_s)?.iter().map(|s| s.name()).collect();
            Some(format!("{}:{}", name(t), ss.join("+")))
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// The `HOST:GUEST` tools that `plan`'s scenarios run.
fn plan_tools(plan: &Plan) -> Vec<&'static str> {
    TOOLS
        .iter()
        .filter(|(_, for_s)| for_s.is_none_or(|ss| plan.scenarios.iter().any(|s| ss.contains(s))))
        .map(|(t, _)| *t)
        .collect()
}

pub struct Context {
    repo: PathBuf,
    plan: Plan,
    express_config: PathBuf,
    /// The scx_express binary (express runs only).
    scx_bin: Option<PathBuf>,
    /// Scheduler binary per peer.
    peer_bins: BTreeMap<Sched, PathBuf>,
}

impl Context {
    /// Builds the workloads, installs missing peers and checks every binary
    /// the VMs need.
    pub fn prepare(
        repo: &Path,
        plan: &Plan,
        express_config: &Path,
        scx_bin: Option<PathBuf>,
        peers_dir: &Path,
    ) -> Result<Context> {
        for t in plan_tools(plan) {
            let host = t.split(':').next().unwrap_or(t);
            if !Path::new(host).is_file() {
                bail!("{host} not found; install with: apt-get install {TOOL_PKGS}");
            }
        }
        let st = Command::new("make")
            .args(["-s", "-C"])
            .arg(repo.join("workloads"))
            .status()
            .context("running make -C workloads")?;
        if !st.success() {
            bail!("building the workloads failed (make -C workloads)");
        }
        let peer_bins = ensure_peers(&plan.peers(), peers_dir)?;
        Ok(Context {
            repo: repo.to_path_buf(),
            plan: plan.clone(),
            express_config: express_config.to_path_buf(),
            scx_bin,
            peer_bins,
        })
    }

    /// `HOST:GUEST` executables for the initramfs.
    fn bins(&self) -> Vec<String> {
        let mut v: Vec<String> = plan_tools(&self.plan)
            .into_iter()
            .map(String::from)
            .collect();
        if let Some(b) = &self.scx_bin {
            v.push(format!("{}:/usr/bin/scx_express", b.display()));
        }
        for (s, p) in &self.peer_bins {
            v.push(format!("{}:/usr/bin/scx_{}", p.display(), s.name()));
        }
        v
    }

    fn files(&self) -> Vec<String> {
        vec![
            format!("{}:/opt/w", self.repo.join("workloads/build").display()),
            format!("{}:/etc/bench/express.toml", self.express_config.display()),
        ]
    }

    /// BENCH_* settings shared by every boot (the scheduler comes apart).
    fn env(&self) -> Vec<(String, String)> {
        let p = &self.plan;
        let list = |v: Vec<String>| v.join("+");
        vec![
            ("BENCH_TOOL_NEEDS".into(), tool_needs()),
            (
                "BENCH_SCENARIOS".into(),
                list(p.scenarios.iter().map(|s| s.name()).collect()),
            ),
            (
                "BENCH_WORKLOADS".into(),
                list(p.workloads.iter().map(|s| s.name()).collect()),
            ),
            ("BENCH_REPEAT_FROM".into(), "1".into()),
            ("BENCH_REPEAT_TO".into(), p.repeats.to_string()),
            ("BENCH_DURATION".into(), p.duration_s.to_string()),
            ("BENCH_WARM".into(), p.warm_s.to_string()),
            ("BENCH_NOISE_TAIL".into(), super::NOISE_TAIL_S.to_string()),
            ("BENCH_GO_WARMUP".into(), super::GO_WARMUP_S.to_string()),
            ("BENCH_HELPERS".into(), p.helpers.to_string()),
            ("BENCH_STREAMS".into(), p.streams.to_string()),
            (
                "BENCH_CYC_INTERVAL_US".into(),
                p.cyc_interval_us.to_string(),
            ),
            ("BENCH_AGENT_REPLY_US".into(), p.agent_reply_us.to_string()),
            (
                "BENCH_AGENT_BURST_ITERS".into(),
                p.agent_burst_iters.to_string(),
            ),
        ]
    }

    /// The scenario script for tests/vm/run.sh: vmtest header, then the
    /// guest script. `sched` None leaves the scheduler to bench.sched=.
    fn scenario(&self, sched: Option<Sched>) -> String {
        let p = &self.plan;
        let mut s = String::from(
            "#!/bin/sh\n# Generated by scx_express_bench; see tools/bench/src/guest.sh.\n",
        );
        s += &format!(
            "# vmtest: smp={} mem={} timeout={}\n",
            p.smp,
            p.mem,
            p.guest_timeout_s()
        );
        if p.needs_disk() {
            s += &format!("# vmtest: disk={}\n", p.disk);
        }
        for b in self.bins() {
            s += &format!("# vmtest: bins={b}\n");
        }
        for f in self.files() {
            s += &format!("# vmtest: files={f}\n");
        }
        let mut env = self.env();
        if let Some(sched) = sched {
            env.push(("BENCH_SCHED".into(), sched.name()));
        }
        for (k, v) in env {
            s += &format!("# vmtest: env={k}={v}\n");
        }
        s + GUEST_SH
    }

    /// Boots one VM per scheduler, one after the other, console logs in
    /// `logs/<sched>.log`.
    pub fn run_local(&self, logs: &Path) -> Result<()> {
        let run_sh = self.repo.join("tests/vm/run.sh");
        let mut failed = vec![];
        for &sched in &self.plan.schedulers {
            let scen = logs.join(format!("bench-{}.sh", sched.name()));
            std::fs::write(&scen, self.scenario(Some(sched)))?;
            let log = logs.join(format!("{}.log", sched.name()));
            eprintln!(
                "bench: {}: one boot, {} cells (guest limit {} s)",
                sched.name(),
                self.plan.cells_per_boot(),
                self.plan.guest_timeout_s()
            );
            let mut child = Command::new(&run_sh)
                .arg(&scen)
                .arg("--keep-log")
                .arg(&log)
                .stdout(Stdio::piped())
                .spawn()
                .with_context(|| format!("running {}", run_sh.display()))?;
            // Show the guest's progress lines, not the whole console.
            if let Some(out) = child.stdout.take() {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    if line.contains("bench: ") || line.starts_with("FAIL") {
                        eprintln!("  {}", line.trim_start_matches(|c| c != 'b' && c != 'F'));
                    }
                }
            }
            let st = child.wait()?;
            if !st.success() {
                eprintln!(
                    "bench: {}: the VM run failed ({st}); its cells may be missing",
                    sched.name()
                );
                failed.push(sched.name());
            }
        }
        if !failed.is_empty() {
            eprintln!("bench: failed boots: {}", failed.join(", "));
        }
        Ok(())
    }

    /// Writes a bundle that runs the plan on another x86-64 Linux host
    /// without this repository or Debian's packages: QEMU and its libraries
    /// (glibc's own excepted), the TCG accelerator module, the firmware, the
    /// kernel, one xz initramfs for every scheduler, runner.sh, plan.json.
    pub fn write_bundle(&self, dir: &Path) -> Result<()> {
        let vm = self.repo.join("tests/vm");
        std::fs::create_dir_all(dir)?;
        let kdir = capture(Command::new(vm.join("kernel.sh")))?;
        let kdir = PathBuf::from(kdir.trim());
        std::fs::copy(kdir.join("vmlinuz"), dir.join("vmlinuz"))?;
        std::fs::copy(kdir.join("version"), dir.join("kernel-version"))?;

        let tmp = dir.join(".build");
        self.bundle_initramfs(dir, &kdir, &tmp)?;
        bundle_qemu(&dir.join("qemu"))?;
        self.bundle_runner(dir)?;
        std::fs::remove_dir_all(&tmp)?;
        let scheds: Vec<String> = self.plan.schedulers.iter().map(|s| s.name()).collect();
        eprintln!(
            "bench: bundle in {} ({} MiB). On the target machine:\n  {}/runner.sh --smp {} OUTDIR {}\n\
             then here: scx_express_bench --from-logs OUTDIR --out DIR",
            dir.display(),
            dir_size(dir)? >> 20,
            dir.display(),
            self.plan.smp,
            scheds.join(" ")
        );
        Ok(())
    }

    /// The bundle's one initramfs, `dir/initrd.xz`, built in `tmp` for the
    /// kernel in `kdir`; the runner picks the scheduler with bench.sched=.
    fn bundle_initramfs(&self, dir: &Path, kdir: &Path, tmp: &Path) -> Result<()> {
        let vm = self.repo.join("tests/vm");
        std::fs::create_dir_all(tmp)?;
        let scen = tmp.join("scenario.sh");
        std::fs::write(&scen, self.scenario(None))?;
        std::fs::write(tmp.join("env"), self.bundle_env())?;
        let cpio = tmp.join("initrd.cpio");
        let mut c = Command::new(vm.join("initramfs.sh"));
        c.arg("-o")
            .arg(&cpio)
            .arg("--kconfig")
            .arg(kdir.join("config"));
        c.arg("--file")
            .arg(format!("{}:/scenario.sh", scen.display()));
        c.arg("--file").arg(format!(
            "{}:/lib/vmtest/guest-lib.sh",
            vm.join("guest-lib.sh").display()
        ));
        c.arg("--file")
            .arg(format!("{}:/etc/vmtest/env", tmp.join("env").display()));
        for b in self.bins() {
            c.arg("--bin").arg(stripped(&b, tmp)?);
        }
        for f in self.files() {
            c.arg("--file").arg(f);
        }
        run_ok(&mut c, "building the initramfs")?;
        // Straight to the file, not through this process's memory.
        let xz_out = std::fs::File::create(dir.join("initrd.xz"))?;
        run_ok(
            Command::new("xz")
                .args(["--check=crc32", "-9", "-T0", "-c"])
                .arg(&cpio)
                .stdout(xz_out),
            "compressing the initramfs with xz (apt-get install xz-utils)",
        )
    }

    /// The guest's /etc/vmtest/env in the bundle's initramfs.
    fn bundle_env(&self) -> String {
        let mut env = format!(
            "VMTEST_TIMEOUT={}\nVMTEST_NAME=bench\n",
            self.plan.guest_timeout_s()
        );
        for (k, v) in self.env() {
            env += &format!("export {k}='{v}'\n");
        }
        if self.plan.needs_disk() {
            env += "export VMTEST_DISK=/dev/nvme0n1\n";
        }
        env
    }

    /// The bundle's vm.env, runner.sh and plan.json (its command names
    /// this bundle).
    fn bundle_runner(&self, dir: &Path) -> Result<()> {
        std::fs::write(
            dir.join("vm.env"),
            format!(
                "SMP={}\nMEM={}\nDISK={}\nGUEST_TIMEOUT={}\n",
                self.plan.smp,
                self.plan.mem,
                if self.plan.needs_disk() {
                    self.plan.disk.as_str()
                } else {
                    ""
                },
                self.plan.guest_timeout_s()
            ),
        )?;
        let runner = dir.join("runner.sh");
        std::fs::write(&runner, RUNNER_SH)?;
        set_exec(&runner)?;
        let mut plan = self.plan.clone();
        plan.command = format!(
            "{} --bundle {}",
            plan.command.split(" --bundle").next().unwrap_or(""),
            dir.display()
        );
        super::write_json(&dir.join("plan.json"), &plan)
    }
}

/// QEMU, its libraries minus glibc, the TCG module, the firmware, into
/// the bundle's `qdir`.
fn bundle_qemu(qdir: &Path) -> Result<()> {
    std::fs::create_dir_all(qdir.join("lib"))?;
    std::fs::create_dir_all(qdir.join("modules"))?;
    std::fs::create_dir_all(qdir.join("fw"))?;
    let qemu = which("qemu-system-x86_64")?;
    std::fs::copy(&qemu, qdir.join("qemu-system-x86_64"))?;
    let accel = glob::glob("/usr/lib/*/qemu/accel-tcg-x86_64.so")?
        .flatten()
        .next()
        .context("accel-tcg-x86_64.so not found (qemu-system-x86)")?;
    std::fs::copy(&accel, qdir.join("modules/accel-tcg-x86_64.so"))?;
    let mut libs = ldd(&qemu)?;
    libs.extend(ldd(&accel)?);
    libs.sort();
    libs.dedup();
    for l in libs {
        let name = l
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        if is_glibc(&name) {
            continue;
        }
        std::fs::copy(&l, qdir.join("lib").join(&name))
            .with_context(|| format!("copying {}", l.display()))?;
    }
    bundle_firmware(&qdir.join("fw"))
}

/// The QEMU firmware the VMs boot with, from Debian's places.
fn bundle_firmware(fw: &Path) -> Result<()> {
    for (name, cands) in [
        (
            "bios-256k.bin",
            &[
                "/usr/share/qemu/bios-256k.bin",
                "/usr/share/seabios/bios-256k.bin",
            ][..],
        ),
        ("kvmvapic.bin", &["/usr/share/qemu/kvmvapic.bin"][..]),
        (
            "linuxboot_dma.bin",
            &["/usr/share/qemu/linuxboot_dma.bin"][..],
        ),
        ("linuxboot.bin", &["/usr/share/qemu/linuxboot.bin"][..]),
    ] {
        let src = cands
            .iter()
            .map(Path::new)
            .find(|p| p.exists())
            .with_context(|| format!("QEMU firmware {name} not found"))?;
        std::fs::copy(src, fw.join(name))?;
    }
    Ok(())
}

/// The machine the VMs run on: kernel, CPUs, CPU model (as runner.sh).
pub fn host_description() -> String {
    let uname = capture({
        let mut c = Command::new("uname");
        c.arg("-srm");
        c
    })
    .unwrap_or_default();
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_default();
    format!("{}, {cpus} CPUs, {model}\n", uname.trim())
}

/// Returns the binary of every peer, installing missing ones with
/// `cargo install --root PEERS_DIR` (needs BPF_CLANG; minutes per peer).
fn ensure_peers(peers: &[Sched], dir: &Path) -> Result<BTreeMap<Sched, PathBuf>> {
    let mut bins = BTreeMap::new();
    let mut missing = vec![];
    for &p in peers {
        let krate = p.peer_crate().expect("peer");
        let bin = dir.join("bin").join(krate);
        if !bin.is_file() {
            missing.push(krate);
        }
        bins.insert(p, bin);
    }
    if !missing.is_empty() {
        let clang = std::env::var("BPF_CLANG").unwrap_or_else(|_| "/usr/bin/clang-19".into());
        if !Path::new(&clang).is_file() {
            bail!(
                "peer schedulers {} need building and BPF_CLANG ({clang}) is missing",
                missing.join(" ")
            );
        }
        eprintln!(
            "bench: building peer schedulers {} into {} (once; about 5 min each on 2 cores)",
            missing.join(" "),
            dir.display()
        );
        let st = Command::new("cargo")
            .arg("install")
            .arg("--root")
            .arg(dir)
            .args(&missing)
            .env("BPF_CLANG", &clang)
            .env("CARGO_TARGET_DIR", dir.join("target"))
            .status()
            .context("running cargo install")?;
        if !st.success() {
            bail!("cargo install {} failed", missing.join(" "));
        }
    }
    Ok(bins)
}

/// For the bundle, which has to travel: a stripped copy (in `tmp`) of a
/// `HOST:GUEST` executable that is not stripped yet (ours, the peers).
fn stripped(bin: &str, tmp: &Path) -> Result<String> {
    let (host, guest) = bin.split_once(':').unwrap_or((bin, ""));
    if host.starts_with("/usr/") {
        return Ok(bin.to_string()); // distribution binaries are stripped
    }
    let name = Path::new(host)
        .file_name()
        .context("executable without a name")?;
    let out = tmp.join(name);
    let ok = Command::new("strip")
        .arg("-o")
        .arg(&out)
        .arg(host)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        return Ok(bin.to_string()); // no binutils: ship it as it is
    }
    Ok(format!("{}:{guest}", out.display()))
}

fn capture(mut c: Command) -> Result<String> {
    let o = c
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {c:?}"))?;
    if !o.status.success() {
        bail!("{c:?} failed");
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

fn run_ok(c: &mut Command, what: &str) -> Result<()> {
    let st = c.status().with_context(|| what.to_string())?;
    if !st.success() {
        bail!("{what} failed ({st})");
    }
    Ok(())
}

fn which(name: &str) -> Result<PathBuf> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .with_context(|| format!("{name} not found (apt-get install qemu-system-x86)"))
}

/// Libraries `ldd` lists for a binary.
fn ldd(bin: &Path) -> Result<Vec<PathBuf>> {
    let out = capture({
        let mut c = Command::new("ldd");
        c.arg(bin);
        c
    })?;
    Ok(out
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f.as_slice() {
                [_, "=>", p, ..] if p.starts_with('/') => Some(PathBuf::from(p)),
                [p, ..] if p.starts_with('/') => Some(PathBuf::from(p)),
                _ => None,
            }
        })
        .collect())
}

/// glibc's own libraries: the target's (newer) glibc must serve these.
fn is_glibc(name: &str) -> bool {
    const GLIBC: &[&str] = &[
        "libc.so",
        "libm.so",
        "libpthread.so",
        "libdl.so",
        "librt.so",
        "libresolv.so",
        "libutil.so",
        "libmvec.so",
        "ld-linux",
    ];
    GLIBC.iter().any(|g| name.starts_with(g))
}

fn set_exec(p: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755))?;
    Ok(())
}

fn dir_size(dir: &Path) -> Result<u64> {
    let mut n = 0;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let m = e.metadata()?;
        n += if m.is_dir() {
            dir_size(&e.path())?
        } else {
            m.len()
        };
    }
    Ok(n)
}

/// Files a console log carries (`export_file`), by name; later copies (a
/// retried boot) replace earlier ones. Blocks whose md5 does not match
/// (console noise) are dropped with a warning.
pub fn exported_files(log: &str) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut cur: Option<(String, String, String)> = None; // name, md5, base64
    for line in log.lines() {
        let line = line.trim_end_matches('\r');
        if let Some(rest) = line.strip_prefix("@@VMTEST-FILE name=") {
            let mut it = rest.trim_end_matches("@@").split(" md5=");
            if let (Some(n), Some(m)) = (it.next(), it.next()) {
                cur = Some((n.to_string(), m.to_string(), String::new()));
            }
            continue;
        }
        if line == "@@VMTEST-FILE-END@@" {
            if let Some((name, sum, b64)) = cur.take() {
                match base64::engine::general_purpose::STANDARD.decode(b64.as_bytes()) {
                    Ok(data) if format!("{:x}", md5::Md5::digest(&data)) == sum => {
                        files.insert(name, data);
                    }
                    _ => eprintln!("bench: warning: exported file {name} is corrupt; dropped"),
                }
            }
            continue;
        }
        if let Some((_, _, b64)) = cur.as_mut() {
            b64.push_str(line.trim());
        }
    }
    files
}

/// A console log of one or more boots of the same VM (tests/vm/run.sh
/// --keep-log and runner.sh put `===== boot I/N =====` before each when a
/// guest died without a result and was booted again): the number of boots
/// and the last one's text, the only one whose cells count (a dead boot's
/// cells were measured on a guest that was failing).
pub fn last_boot(log: &str) -> (usize, &str) {
    let mut boots = 1;
    let mut start = 0;
    let mut pos = 0;
    for line in log.split_inclusive('\n') {
        if line.starts_with("===== boot ") {
            if pos > 0 {
                boots += 1;
            }
            start = pos + line.len();
        }
        pos += line.len();
    }
    (boots, &log[start..])
}

/// Every cell in the console logs (`*.log`) of a directory.
pub fn collect_cells(dir: &Path) -> Result<Vec<RawCell>> {
    let mut cells = vec![];
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    if logs.is_empty() {
        bail!("no console logs (*.log) in {}", dir.display());
    }
    for log in logs {
        let text = std::fs::read(&log)?;
        let text = String::from_utf8_lossy(&text);
        let (boots, last) = last_boot(&text);
        let files = exported_files(last);
        for (name, data) in files {
            let text = String::from_utf8_lossy(&data);
            if name.starts_with("cell-") {
                match parse::split_cell(&text) {
                    Ok(c) => cells.push(c),
                    Err(e) => eprintln!("bench: warning: {}: {name}: {e:#}", log.display()),
                }
            } else if let Some(s) = name
                .strip_prefix("info-")
                .and_then(|n| n.strip_suffix(".txt"))
            {
                let mut info = RawCell::info(s, &text);
                info.meta
                    .insert("retried_boots".into(), (boots - 1).to_string());
                cells.push(info);
            } else if let Some(s) = name
                .strip_prefix("final-")
                .and_then(|n| n.strip_suffix(".txt"))
            {
                cells.push(RawCell::final_(s, &text));
            }
        }
    }
    Ok(cells)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exports_are_decoded_and_checked() {
        let data = b"@@bench sched=eevdf\nhello\n";
        let b64 = base64::engine::general_purpose::STANDARD.encode(data);
        let sum = format!("{:x}", md5::Md5::digest(data));
        let (a, b) = b64.split_at(10);
        let log = format!(
            "noise\r\n@@VMTEST-FILE name=cell-a.txt md5={sum}@@\n{a}\n{b}\n@@VMTEST-FILE-END@@\n\
             @@VMTEST-FILE name=bad.txt md5=0000@@\n{b64}\n@@VMTEST-FILE-END@@\n"
        );
        let f = exported_files(&log);
        assert_eq!(f.len(), 1);
        assert_eq!(f["cell-a.txt"], data);
    }

    #[test]
    fn a_boot_carries_the_tools_of_its_scenarios_only() {
        let a = crate::test_args(crate::Preset::Smoke);
        let mut plan = Plan::from_args(&a, Path::new("c.toml"), "x".into()).unwrap();
        plan.scenarios = vec![Scenario::Baseline, Scenario::Cpu4x];
        let t = plan_tools(&plan);
        assert!(t.iter().any(|t| t.starts_with("/usr/bin/stress-ng:")));
        assert!(!t.iter().any(|t| t.contains("fio") || t.contains("iperf3")));
        plan.scenarios = vec![Scenario::Disk];
        let t = plan_tools(&plan);
        assert!(t.iter().any(|t| t.contains("fio")));
        assert!(!t.iter().any(|t| t.contains("iperf3")));
        plan.scenarios = vec![Scenario::Heavy];
        assert_eq!(plan_tools(&plan).len(), TOOLS.len());
        assert_eq!(tool_needs(), "iperf3:net+heavy/fio:disk+heavy");
    }

    #[test]
    fn only_the_last_boot_of_a_log_counts() {
        assert_eq!(last_boot("a\nb\n"), (1, "a\nb\n"));
        let log =
            "===== boot 1/3 =====\nKernel panic - not syncing: Fatal exception in interrupt\n\
                   ===== boot 2/3 =====\ncell-1\n===== boot 3/3 =====\ncell-2\nrc\n";
        assert_eq!(last_boot(log), (3, "cell-2\nrc\n"));
        // The bundle runner's log, whose first boot has no marker line.
        assert_eq!(last_boot("died\n===== boot 2/3 =====\nok\n"), (2, "ok\n"));
    }

    #[test]
    fn the_bundle_carries_the_scale_plan() {
        let a = crate::BenchArgs {
            workloads: Some(vec![crate::Workload::Scale]),
            ..crate::test_args(crate::Preset::Scale)
        };
        let plan = Plan::from_args(&a, Path::new("c.toml"), "x".into()).unwrap();
        let c = Context {
            repo: PathBuf::from("/r"),
            plan,
            express_config: PathBuf::from("c.toml"),
            scx_bin: None,
            peer_bins: BTreeMap::new(),
        };
        let env = c.bundle_env();
        assert!(env.contains("export BENCH_WORKLOADS='scale'"), "{env}");
        assert!(
            env.contains("export BENCH_SCENARIOS='baseline+cpu4x'"),
            "{env}"
        );
        // The launchers follow the guest's vCPUs (guest.sh: n/2 of
        // nproc), not the plan: the header sets no count.
        assert!(!c.scenario(None).contains("BENCH_LAUNCHERS"));
    }

    #[test]
    fn glibc_is_left_out() {
        assert!(is_glibc("libc.so.6"));
        assert!(is_glibc("ld-linux-x86-64.so.2"));
        assert!(!is_glibc("libcapstone.so.4"));
        assert!(!is_glibc("libcurl.so.4"));
    }
}
