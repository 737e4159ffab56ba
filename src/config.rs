//! Typed configuration. The keys are documented once, in
//! `configs/default.toml`, which is also the built-in default.
//!
//! Loading is all or nothing: a file with any error (syntax, unknown key,
//! wrong type, out-of-range value) is rejected with its path, the key and
//! the reason, and nothing from it is used.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

pub mod ranges;

/// The shipped default configuration, compiled in.
pub const DEFAULT_TOML: &str = include_str!("../configs/default.toml");

#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub fair: FairConfig,
    pub express: ExpressConfig,
    pub classes: Classes,
    pub classify: ClassifyConfig,
    pub tenants: Vec<Tenant>,
}

/// At most this many `[[tenants]]` (MAX_TENANTS in src/bpf/intf.h).
pub const MAX_TENANTS: usize = crate::bpf_intf::express_consts_MAX_TENANTS as usize;

/// A tenant's name is at most this long (TENANT_NAME_LEN, less its NUL).
pub const TENANT_NAME_MAX: usize = crate::bpf_intf::express_consts_TENANT_NAME_LEN as usize - 1;

/// One `[[tenants]]` entry: the express tasks of `class` in a cgroup
/// subtree, with a budget of their own. Unset numbers are the class's.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tenant {
    pub name: String,
    /// cgroup v2 path prefix: that cgroup and its descendants.
    pub cgroup: String,
    pub class: ClassName,
    pub burst_ms: Option<u64>,
    pub rate: Option<f64>,
    pub max_share: Option<f64>,
    pub latency_target_us: Option<u64>,
}

impl Tenant {
    /// The tenant's budget: its own numbers, the class's where unset.
    pub fn budget(&self, classes: &Classes) -> ClassConfig {
        let base = match self.class {
            ClassName::Gpu => &classes.gpu,
            _ => &classes.agent,
        };
        ClassConfig {
            burst_ms: self.burst_ms.unwrap_or(base.burst_ms),
            rate: self.rate.unwrap_or(base.rate),
            max_share: self.max_share.unwrap_or(base.max_share),
            latency_target_us: self.latency_target_us.unwrap_or(base.latency_target_us),
            ..base.clone()
        }
    }
}

/// A task class, as written in config files and on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ClassName {
    Normal,
    Gpu,
    Agent,
}

impl ClassName {
    pub fn as_str(self) -> &'static str {
        match self {
            ClassName::Normal => "normal",
            ClassName::Gpu => "gpu",
            ClassName::Agent => "agent",
        }
    }
}

/// Whether a class learned by one thread applies to its whole process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    Thread,
    Process,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClassifyConfig {
    pub scan_interval_ms: u64,
    pub idle_demote_ms: u64,
    pub launch_window_ms: u64,
    pub launch_period_ms: u64,
    pub libraries: Vec<String>,
    pub launch_symbols: Vec<String>,
    pub sync_symbols: Vec<String>,
    pub markers: Vec<Marker>,
    pub rules: Vec<Rule>,
}

/// A function whose caller joins a class (an opt-in marker).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Marker {
    /// Library or binary: a file-name glob, or a path glob if it has a '/'.
    pub library: String,
    pub symbol: String,
    pub class: ClassName,
}

/// Tasks matching every given field join `class`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub class: ClassName,
    /// cgroup v2 path prefix, e.g. "/agents" matches /agents and /agents/x.
    pub cgroup_prefix: Option<String>,
    /// Glob on the thread name (/proc/PID/task/TID/comm).
    pub comm: Option<String>,
    /// Glob on the executable path (/proc/PID/exe).
    pub exe: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FairConfig {
    pub mode: FairMode,
    pub slice_max_us: u64,
    pub slice_min_us: u64,
    pub target_latency_us: u64,
    pub direct_idle: bool,
    pub wakeup_preempt: bool,
    pub requeue_preempted: bool,
    pub rescue_ms: u64,
    pub watchdog_ms: u64,
}

/// Where the fair path's decisions are made (`fair.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FairMode {
    /// In BPF, on the enqueue path (src/bpf/fair.bpf.c).
    Bpf,
    /// By the userspace scheduler (src/fair.rs), through ring buffers.
    Userspace,
}

impl FairMode {
    pub fn as_str(self) -> &'static str {
        match self {
            FairMode::Bpf => "bpf",
            FairMode::Userspace => "userspace",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExpressConfig {
    pub slice_us: u64,
    pub irq_window_ms: u64,
    pub irq_hot_pct: u64,
    pub deep_idle_us: u64,
    pub preempt: bool,
    pub quiet_only: bool,
    pub avoid_slow_idle: bool,
    pub pm_qos_resume_latency_us: Option<u64>,
    pub irq_shield: bool,
    pub irq_shield_cpus: Option<u64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Classes {
    pub gpu: ClassConfig,
    pub agent: ClassConfig,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ClassConfig {
    pub enabled: bool,
    pub burst_ms: u64,
    pub rate: f64,
    pub max_share: f64,
    pub latency_target_us: u64,
    pub hold_us: u64,
    pub hold_whole: bool,
    pub scope: Scope,
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

impl Default for ClassifyConfig {
    fn default() -> Self {
        Self {
            scan_interval_ms: 250,
            idle_demote_ms: 2000,
            launch_window_ms: 200,
            launch_period_ms: 10000,
            libraries: strings(&["libcuda.so*", "libcudart.so*"]),
            launch_symbols: strings(&[
                "cuLaunchKernel",
                "cuLaunchKernel_ptsz",
                "cuLaunchKernelEx",
                "cuLaunchKernelEx_ptsz",
                "cuGraphLaunch",
                "cuGraphLaunch_ptsz",
                "cudaLaunchKernel",
                "cudaLaunchKernel_ptsz",
                "__cudaLaunchKernel",
                "__cudaLaunchKernel_ptsz",
                "cudaLaunchKernelExC",
                "cudaLaunchKernelExC_ptsz",
                "cudaGraphLaunch",
                "cudaGraphLaunch_ptsz",
            ]),
            sync_symbols: strings(&[
                "cuStreamSynchronize",
                "cuStreamSynchronize_ptsz",
                "cuCtxSynchronize",
                "cuEventSynchronize",
                "cuMemcpyDtoHAsync_v2",
                "cuMemcpyDtoHAsync_v2_ptsz",
                "cuMemcpyAsync",
                "cuMemcpyAsync_ptsz",
                "cudaStreamSynchronize",
                "cudaStreamSynchronize_ptsz",
                "cudaDeviceSynchronize",
                "cudaEventSynchronize",
                "cudaMemcpy",
                "cudaMemcpyAsync",
                "cudaMemcpyAsync_ptsz",
                "cudaStreamWaitEvent",
                "cudaStreamWaitEvent_ptsz",
            ]),
            markers: vec![
                Marker {
                    library: "libexpress_mark.so*".into(),
                    symbol: "express_mark_agent".into(),
                    class: ClassName::Agent,
                },
                Marker {
                    library: "libexpress_mark.so*".into(),
                    symbol: "express_mark_gpu".into(),
                    class: ClassName::Gpu,
                },
                Marker {
                    library: "libexpress_mark.so*".into(),
                    symbol: "express_unmark".into(),
                    class: ClassName::Normal,
                },
            ],
            rules: Vec::new(),
        }
    }
}

impl Default for FairConfig {
    fn default() -> Self {
        Self {
            mode: FairMode::Bpf,
            slice_max_us: 5000,
            slice_min_us: 500,
            target_latency_us: 20000,
            direct_idle: true,
            wakeup_preempt: true,
            requeue_preempted: true,
            rescue_ms: 50,
            watchdog_ms: 30_000,
        }
    }
}

impl Default for ExpressConfig {
    fn default() -> Self {
        Self {
            slice_us: 2000,
            irq_window_ms: 20,
            irq_hot_pct: 10,
            deep_idle_us: 50,
            preempt: true,
            quiet_only: false,
            avoid_slow_idle: false,
            pm_qos_resume_latency_us: None,
            irq_shield: false,
            irq_shield_cpus: None,
        }
    }
}

impl Default for Classes {
    fn default() -> Self {
        Self {
            gpu: ClassConfig {
                enabled: true,
                burst_ms: 20,
                rate: 0.9,
                max_share: 0.5,
                latency_target_us: 1000,
                hold_us: 0,
                hold_whole: false,
                scope: Scope::Thread,
            },
            agent: ClassConfig {
                enabled: true,
                burst_ms: 10,
                rate: 0.5,
                max_share: 0.25,
                latency_target_us: 2000,
                hold_us: 5000,
                hold_whole: true,
                scope: Scope::Thread,
            },
        }
    }
}

// A class table given partially keeps the class's own defaults for the rest.
impl<'de> Deserialize<'de> for Classes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Partial {
            enabled: Option<bool>,
            burst_ms: Option<u64>,
            rate: Option<f64>,
            max_share: Option<f64>,
            latency_target_us: Option<u64>,
            hold_us: Option<u64>,
            hold_whole: Option<bool>,
            scope: Option<Scope>,
        }
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Raw {
            gpu: Option<Partial>,
            agent: Option<Partial>,
        }
        fn merge(base: ClassConfig, p: Option<Partial>) -> ClassConfig {
            let Some(p) = p else { return base };
            ClassConfig {
                enabled: p.enabled.unwrap_or(base.enabled),
                burst_ms: p.burst_ms.unwrap_or(base.burst_ms),
                rate: p.rate.unwrap_or(base.rate),
                max_share: p.max_share.unwrap_or(base.max_share),
                latency_target_us: p.latency_target_us.unwrap_or(base.latency_target_us),
                hold_us: p.hold_us.unwrap_or(base.hold_us),
                hold_whole: p.hold_whole.unwrap_or(base.hold_whole),
                scope: p.scope.unwrap_or(base.scope),
            }
        }
        let raw = Raw::deserialize(d)?;
        let dfl = Classes::default();
        Ok(Classes {
            gpu: merge(dfl.gpu, raw.gpu),
            agent: merge(dfl.agent, raw.agent),
        })
    }
}

/// One problem in a config file.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError {
    /// Dotted key, e.g. `classes.gpu.burst_ms`; empty for file-level errors.
    pub key: String,
    pub reason: String,
}

/// Every problem found in one config source.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigErrors {
    pub source: String,
    pub errors: Vec<ConfigError>,
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid config {}:", self.source)?;
        for e in &self.errors {
            if e.key.is_empty() {
                write!(f, "\n  {}", e.reason)?;
            } else {
                write!(f, "\n  key `{}`: {}", e.key, e.reason)?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

impl Config {
    /// Parses and validates TOML text. `source` names it in errors.
    pub fn parse(text: &str, source: &str) -> Result<Config, ConfigErrors> {
        let fail = |errors| ConfigErrors {
            source: source.to_string(),
            errors,
        };
        let de = toml::Deserializer::new(text);
        let cfg: Config = serde_path_to_error::deserialize(de).map_err(|e| {
            let key = e.path().to_string();
            let inner = e.into_inner();
            let at = inner
                .span()
                .map(|s| where_in(text, s.start))
                .unwrap_or_default();
            let key = if key == "." { String::new() } else { key };
            fail(vec![ConfigError {
                key,
                reason: format!("{}{}", inner.message().trim(), at),
            }])
        })?;
        let errors = cfg.validate();
        if errors.is_empty() {
            Ok(cfg)
        } else {
            Err(fail(errors))
        }
    }

    /// Reads, parses and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
        let source = path.display().to_string();
        let file_error = |reason: String| ConfigErrors {
            source: source.clone(),
            errors: vec![ConfigError {
                key: String::new(),
                reason,
            }],
        };
        if path.is_dir() {
            return Err(file_error(
                "is a directory; pass a TOML file such as configs/default.toml".into(),
            ));
        }
        let bytes = std::fs::read(path).map_err(|e| file_error(format!("cannot read: {e}")))?;
        let text = String::from_utf8(bytes)
            .map_err(|_| file_error("is not UTF-8 text; a config is a TOML file".into()))?;
        Config::parse(&text, &source)
    }

    /// The built-in default (`configs/default.toml`).
    pub fn builtin() -> Config {
        Config::parse(DEFAULT_TOML, "configs/default.toml (built in)")
            .expect("the shipped default config is valid (checked by unit tests)")
    }

    /// Range and consistency checks, one error per offending key.
    pub fn validate(&self) -> Vec<ConfigError> {
        let mut errs: Vec<ConfigError> = ranges::RANGES
            .iter()
            .filter_map(|r| self.check_range(r))
            .collect();
        let k = &self.classify;
        let globs = k
            .libraries
            .iter()
            .map(|g| ("classify.libraries".to_string(), g))
            .chain(
                k.markers
                    .iter()
                    .map(|m| ("classify.markers.library".to_string(), &m.library)),
            )
            .chain(k.rules.iter().flat_map(|r| {
                [("comm", &r.comm), ("exe", &r.exe)]
                    .into_iter()
                    .filter_map(|(f, g)| g.as_ref().map(|g| (format!("classify.rules.{f}"), g)))
            }));
        for (key, g) in globs {
            if let Err(e) = glob::Pattern::new(g) {
                errs.push(ConfigError {
                    key,
                    reason: format!("bad glob {g:?}: {e}"),
                });
            }
        }
        for (i, r) in k.rules.iter().enumerate() {
            if r.cgroup_prefix.is_none() && r.comm.is_none() && r.exe.is_none() {
                errs.push(ConfigError {
                    key: format!("classify.rules[{i}]"),
                    reason: "a rule needs at least one of cgroup_prefix, comm, exe".into(),
                });
            }
            if let Some(p) = &r.cgroup_prefix {
                if !p.starts_with('/') {
                    errs.push(ConfigError {
                        key: format!("classify.rules[{i}].cgroup_prefix"),
                        reason: format!(
                            "{p:?} must be an absolute cgroup path such as \"/agents\""
                        ),
                    });
                }
            }
        }
        errs.extend(self.tenant_errors());
        errs
    }

    /// Tenants: at most MAX_TENANTS, each valid, one tenant per cgroup
    /// and class.
    fn tenant_errors(&self) -> Vec<ConfigError> {
        let mut errs = Vec::new();
        if self.tenants.len() > MAX_TENANTS {
            errs.push(ConfigError {
                key: "tenants".into(),
                reason: format!(
                    "{} tenants configured, at most {MAX_TENANTS}: merge some",
                    self.tenants.len()
                ),
            });
        }
        let mut names = std::collections::HashSet::new();
        let mut paths = std::collections::HashSet::new();
        for (i, t) in self.tenants.iter().enumerate() {
            let mut err = |f: &str, reason: String| {
                errs.push(ConfigError {
                    key: format!("tenants[{i}].{f}"),
                    reason,
                })
            };
            if !names.insert(t.name.as_str()) {
                err(
                    "name",
                    format!("{:?} names two tenants: names must be unique", t.name),
                );
            }
            let cg = t.cgroup.trim_end_matches('/');
            if !paths.insert((if cg.is_empty() { "/" } else { cg }, t.class)) {
                err(
                    "cgroup",
                    format!(
                        "{:?} has two {} tenants: a cgroup has one tenant per class",
                        t.cgroup,
                        t.class.as_str()
                    ),
                );
            }
            for (f, reason) in self.tenant_entry_errors(t) {
                err(f, reason);
            }
        }
        errs
    }

    /// One tenant's own errors: (field, reason).
    fn tenant_entry_errors(&self, t: &Tenant) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        let name_ok = !t.name.is_empty()
            && t.name.len() <= TENANT_NAME_MAX
            && t.name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        if !name_ok {
            out.push((
                "name",
                format!(
                    "{:?} must be 1 to {TENANT_NAME_MAX} letters, digits, '-', '_' or '.'",
                    t.name
                ),
            ));
        }
        if let Some(why) = cgroup_path_error(&t.cgroup) {
            out.push(("cgroup", format!("{:?} {why}", t.cgroup)));
        }
        if t.class == ClassName::Normal {
            let why = "must be \"gpu\" or \"agent\": normal tasks have no express budget";
            out.push(("class", why.into()));
        }
        let class = if t.class == ClassName::Gpu {
            "gpu"
        } else {
            "agent"
        };
        let numbers = [
            ("burst_ms", t.burst_ms.map(|v| v as f64)),
            ("rate", t.rate),
            ("max_share", t.max_share),
            ("latency_target_us", t.latency_target_us.map(|v| v as f64)),
        ];
        for (f, v) in numbers {
            let Some(v) = v else { continue };
            let key = format!("classes.{class}.{f}");
            let Some(r) = ranges::range_of(&key) else {
                continue;
            };
            let (lo, hi) = (self.resolve(r.lo), self.resolve(r.hi));
            // NaN is in no range.
            if !(v >= lo && v <= hi) {
                out.push((f, format!("{v} is out of range {r} (that of {key})")));
            }
        }
        out
    }

    /// The error of `r.key`, if its value is outside its range.
    fn check_range(&self, r: &ranges::KeyRange) -> Option<ConfigError> {
        let v = self.number(r.key)?;
        let (lo, hi) = (self.resolve(r.lo), self.resolve(r.hi));
        // NaN is in no range.
        if v >= lo && v <= hi {
            return None;
        }
        let show = |x: f64| match r.lo {
            ranges::Bound::Float(_) => format!("{x:?}"),
            _ => format!("{}", x as u64),
        };
        let note = match r.note {
            "" => String::new(),
            n => format!(" ({n})"),
        };
        Some(ConfigError {
            key: r.key.to_string(),
            reason: format!("{v} is out of range {} ..= {}{note}", show(lo), show(hi)),
        })
    }

    /// The number a bound stands for in this config.
    fn resolve(&self, b: ranges::Bound) -> f64 {
        use ranges::Bound;
        match b {
            Bound::Int(n) => n as f64,
            Bound::Float(x) => x,
            Bound::Key(k) => {
                let v = self.number(k).expect("a bound names a numeric key");
                match ranges::range_of(k) {
                    Some(r) => v.clamp(self.resolve(r.lo), self.resolve(r.hi)),
                    None => v,
                }
            }
            Bound::AtLeast(n, k) => (n as f64).max(self.resolve(Bound::Key(k))),
        }
    }

    /// The value of a numeric key by its dotted name (the keys of
    /// `ranges::RANGES`); None for an unset optional key. Values this side
    /// of 2^53, which covers every bound, convert to f64 exactly.
    fn number(&self, key: &str) -> Option<f64> {
        let (f, e, k) = (&self.fair, &self.express, &self.classify);
        let int = match key {
            "fair.slice_max_us" => f.slice_max_us,
            "fair.slice_min_us" => f.slice_min_us,
            "fair.target_latency_us" => f.target_latency_us,
            "fair.rescue_ms" => f.rescue_ms,
            "fair.watchdog_ms" => f.watchdog_ms,
            "express.slice_us" => e.slice_us,
            "express.irq_window_ms" => e.irq_window_ms,
            "express.irq_hot_pct" => e.irq_hot_pct,
            "express.deep_idle_us" => e.deep_idle_us,
            "express.pm_qos_resume_latency_us" => e.pm_qos_resume_latency_us?,
            "express.irq_shield_cpus" => e.irq_shield_cpus?,
            "classify.scan_interval_ms" => k.scan_interval_ms,
            "classify.idle_demote_ms" => k.idle_demote_ms,
            "classify.launch_window_ms" => k.launch_window_ms,
            "classify.launch_period_ms" => k.launch_period_ms,
            _ => {
                let (class, field) = key.strip_prefix("classes.")?.split_once('.')?;
                let c = match class {
                    "gpu" => &self.classes.gpu,
                    "agent" => &self.classes.agent,
                    _ => return None,
                };
                return match field {
                    "burst_ms" => Some(c.burst_ms as f64),
                    "latency_target_us" => Some(c.latency_target_us as f64),
                    "hold_us" => Some(c.hold_us as f64),
                    "rate" => Some(c.rate),
                    "max_share" => Some(c.max_share),
                    _ => None,
                };
            }
        };
        Some(int as f64)
    }
}

/// Why `p` is not a cgroup v2 path such as "/agents/team-a", if it is not.
fn cgroup_path_error(p: &str) -> Option<&'static str> {
    if !p.starts_with('/') {
        return Some("must be an absolute cgroup path such as \"/agents/team-a\"");
    }
    if p.split('/').any(|c| c == "." || c == "..") {
        return Some("may not contain \".\" or \"..\" components");
    }
    if p.contains("//") || p.chars().any(|c| c.is_control()) {
        return Some("has an empty component or a control character");
    }
    None
}

/// " (line N: `text of that line`)" for a byte offset, to point at the key.
fn where_in(text: &str, offset: usize) -> String {
    let offset = offset.min(text.len());
    let line_no = text.as_bytes()[..offset]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1;
    let line: String = text
        .lines()
        .nth(line_no - 1)
        .unwrap_or("")
        .chars()
        .filter(|c| !c.is_control())
        .take(80)
        .collect();
    format!(" (line {line_no}: `{}`)", line.trim())
}

/// Where the running config comes from.
#[derive(Debug, Clone)]
pub enum ConfigSource {
    Builtin,
    File(PathBuf),
}

impl std::fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigSource::Builtin => write!(f, "the built-in config"),
            ConfigSource::File(p) => write!(f, "{}", p.display()),
        }
    }
}

impl ConfigSource {
    pub fn load(&self) -> Result<Config, ConfigErrors> {
        match self {
            ConfigSource::Builtin => Ok(Config::builtin()),
            ConfigSource::File(p) => Config::load(p),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err_keys(text: &str) -> Vec<String> {
        Config::parse(text, "test.toml")
            .unwrap_err()
            .errors
            .into_iter()
            .map(|e| e.key)
            .collect()
    }

    /// Every key line of a TOML text (`key = ...`, or `# key = ...` for a
    /// commented-out optional key) with its full dotted name and the comment
    /// block right above it, joined into one line.
    fn documented_keys(toml: &str) -> Vec<(String, String)> {
        let mut table = String::new();
        let mut block: Vec<&str> = Vec::new();
        let mut out = Vec::new();
        for line in toml.lines().map(str::trim) {
            if let Some(t) = line.strip_prefix('[') {
                table = t.trim_matches(|c| c == '[' || c == ']').to_string();
                block.clear();
                continue;
            }
            let comment = line.strip_prefix('#').map(str::trim);
            let text = comment.unwrap_or(line);
            let key = text
                .split_once(" = ")
                .map(|(k, _)| k)
                .filter(|k| !k.is_empty() && k.chars().all(|c| c.is_ascii_lowercase() || c == '_'));
            match (key, comment) {
                (Some(k), _) => {
                    out.push((format!("{table}.{k}"), block.join(" ")));
                    block.clear();
                }
                (None, Some(c)) => block.push(c),
                (None, None) => block.clear(),
            }
        }
        out
    }

    /// `Range: LO ..= HI` in a comment block, as written.
    fn documented_range(block: &str) -> Option<(String, String)> {
        let rest = block.split_once("Range: ")?.1;
        let (lo, rest) = rest.split_once(" ..= ")?;
        let hi = rest.split_whitespace().next()?;
        let hi = hi.strip_suffix(['.', ';', ',']).unwrap_or(hi);
        Some((lo.to_string(), hi.to_string()))
    }

    #[test]
    fn default_toml_documents_the_ranges_validation_enforces() {
        let keys = documented_keys(DEFAULT_TOML);
        let mut bad = Vec::new();
        for r in ranges::RANGES {
            let Some((_, block)) = keys.iter().find(|(k, _)| k == r.key) else {
                bad.push(format!("{}: not in configs/default.toml", r.key));
                continue;
            };
            let code = (r.lo.to_string(), r.hi.to_string());
            match documented_range(block) {
                Some(doc) if doc == code => {}
                Some((lo, hi)) => bad.push(format!(
                    "{}: configs/default.toml says {lo} ..= {hi}, config/ranges.rs says {r}",
                    r.key
                )),
                None => bad.push(format!(
                    "{}: configs/default.toml documents no `Range:`, config/ranges.rs says {r}",
                    r.key
                )),
            }
        }
        for (k, block) in &keys {
            if ranges::range_of(k).is_none() {
                if let Some((lo, hi)) = documented_range(block) {
                    bad.push(format!(
                        "{k}: documented {lo} ..= {hi}, not in config/ranges.rs"
                    ));
                }
            }
        }
        assert!(bad.is_empty(), "\n{}", bad.join("\n"));
    }

    #[test]
    fn range_comment_parser_reads_what_it_should() {
        let toml = "[a]\n# Long text.\n# Range: 1 ..= 10 (0: off).\nx = 3\ny = 4\n\
                    [b.c]\n# Range: 0.0 ..= 1.0.\n# z = 5\n";
        let keys = documented_keys(toml);
        let names: Vec<_> = keys.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["a.x", "a.y", "b.c.z"]);
        assert_eq!(
            documented_range(&keys[0].1),
            Some(("1".into(), "10".into()))
        );
        assert_eq!(documented_range(&keys[1].1), None, "y's block is empty");
        assert_eq!(
            documented_range(&keys[2].1),
            Some(("0.0".into(), "1.0".into()))
        );
    }

    #[test]
    fn every_ranged_key_has_a_value_and_its_bounds_resolve() {
        let mut c = Config::default();
        c.express.pm_qos_resume_latency_us = Some(0);
        c.express.irq_shield_cpus = Some(1);
        for r in ranges::RANGES {
            assert!(
                c.number(r.key).is_some(),
                "{}: Config::number does not know it",
                r.key
            );
            assert!(
                c.resolve(r.lo) <= c.resolve(r.hi),
                "{}: empty range {r}",
                r.key
            );
        }
    }

    #[test]
    fn ranges_are_enforced_at_both_ends() {
        // Just inside passes, just outside fails, for every literal bound.
        for r in ranges::RANGES {
            let (ranges::Bound::Int(lo), ranges::Bound::Int(hi)) = (r.lo, r.hi) else {
                continue;
            };
            let (table, key) = r.key.rsplit_once('.').unwrap();
            // Other keys' defaults may fall outside a range this one bounds
            // (slice_min_us past slice_max_us = 100): only r.key counts.
            let rejects = |v: u64| {
                let text = format!("[{table}]\n{key} = {v}\n");
                Config::parse(&text, "t")
                    .err()
                    .is_some_and(|e| e.errors.iter().any(|e| e.key == r.key))
            };
            for v in [lo, hi] {
                assert!(!rejects(v), "{} = {v} rejected", r.key);
            }
            let mut outside = vec![hi + 1];
            outside.extend(lo.checked_sub(1));
            for v in outside {
                assert!(rejects(v), "{} = {v} accepted", r.key);
            }
        }
    }

    #[test]
    fn shipped_default_matches_code_defaults() {
        assert_eq!(Config::builtin(), Config::default());
    }

    #[test]
    fn every_shipped_config_loads_and_differs_from_the_default_where_it_says() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().and_then(|e| e.to_str()) != Some("toml") {
                continue;
            }
            let cfg = Config::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            if path.file_name().unwrap() != "default.toml" {
                assert_ne!(cfg, Config::default(), "{} changes nothing", path.display());
            }
            seen += 1;
        }
        assert!(seen >= 3, "only {seen} configs found in {}", dir.display());
    }

    #[test]
    fn empty_file_is_all_defaults() {
        assert_eq!(Config::parse("", "empty").unwrap(), Config::default());
    }

    #[test]
    fn partial_class_keeps_other_defaults() {
        let c = Config::parse("[classes.gpu]\nburst_ms = 7\n", "t").unwrap();
        assert_eq!(c.classes.gpu.burst_ms, 7);
        assert_eq!(c.classes.gpu.rate, Classes::default().gpu.rate);
        assert_eq!(c.classes.agent, Classes::default().agent);
    }

    #[test]
    fn hold_is_per_class_and_bounded() {
        let d = Config::default();
        assert_eq!((d.classes.gpu.hold_us, d.classes.agent.hold_us), (0, 5000));
        let c = Config::parse("[classes.agent]\nhold_us = 0\n", "t").unwrap();
        assert_eq!(c.classes.agent.hold_us, 0);
        assert!(d.classes.agent.hold_whole && !d.classes.gpu.hold_whole);
        let c = Config::parse("[classes.agent]\nhold_whole = false\n", "t").unwrap();
        assert!(!c.classes.agent.hold_whole && !c.classes.gpu.hold_whole);
        assert_eq!(c.classes.agent.hold_us, d.classes.agent.hold_us);
        assert_eq!(
            err_keys("[classes.agent]\nhold_whole = 1\n"),
            ["classes.agent.hold_whole"]
        );
        assert_eq!(c.classes.agent.rate, d.classes.agent.rate);
        assert_eq!(
            err_keys("[classes.gpu]\nhold_us = 20001\n"),
            ["classes.gpu.hold_us"]
        );
        // A tenant takes its class's hold: the hold is not a tenant key.
        let t = Config::parse(&tenant(""), "t").unwrap();
        assert_eq!(t.tenants[0].budget(&t.classes).hold_us, 5000);
        assert!(Config::parse(&tenant("hold_us = 1\n"), "t").is_err());
    }

    #[test]
    fn unknown_key_is_named() {
        let e = Config::parse("[fair]\nslice_us = 3\n", "t.toml").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("t.toml"), "{msg}");
        assert!(msg.contains("slice_us"), "{msg}");
        assert!(msg.contains("unknown field"), "{msg}");
    }

    #[test]
    fn unknown_table_is_named() {
        let msg = Config::parse("[gpu]\nburst_ms = 3\n", "t")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("gpu"), "{msg}");
        let msg = Config::parse("[classes.tpu]\nburst_ms = 3\n", "t")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("tpu"), "{msg}");
    }

    #[test]
    fn negative_budget_is_rejected_with_key() {
        let keys = err_keys("[classes.gpu]\nburst_ms = -5\n");
        assert_eq!(keys, vec!["classes.gpu.burst_ms".to_string()]);
        let keys = err_keys("[classes.agent]\nrate = -0.5\n");
        assert_eq!(keys, vec!["classes.agent.rate".to_string()]);
    }

    #[test]
    fn wrong_type_is_rejected_with_key_and_line() {
        let e = Config::parse("\n[fair]\nslice_max_us = \"fast\"\n", "t").unwrap_err();
        assert_eq!(e.errors[0].key, "fair.slice_max_us");
        assert!(e.errors[0].reason.contains("line 3"), "{e}");
    }

    #[test]
    fn out_of_range_values_are_all_reported() {
        let keys = err_keys("[fair]\nslice_max_us = 10\nslice_min_us = 50\nrescue_ms = 100000\n[express]\nslice_us = 0\n");
        assert_eq!(
            keys,
            vec!["fair.slice_max_us", "fair.rescue_ms", "express.slice_us"]
        );
    }

    #[test]
    fn express_thresholds_are_range_checked() {
        let keys = err_keys(
            "[express]\nirq_window_ms = 0\nirq_hot_pct = 101\ndeep_idle_us = 2000000\n\
             pm_qos_resume_latency_us = 5000000\n",
        );
        assert_eq!(
            keys,
            vec![
                "express.irq_window_ms",
                "express.irq_hot_pct",
                "express.deep_idle_us",
                "express.pm_qos_resume_latency_us"
            ]
        );
    }

    #[test]
    fn slice_min_may_not_exceed_slice_max() {
        let keys = err_keys("[fair]\nslice_max_us = 1000\nslice_min_us = 2000\n");
        assert_eq!(keys, vec!["fair.slice_min_us"]);
    }

    #[test]
    fn syntax_error_is_reported() {
        let e = Config::parse("[fair\nslice_max_us = 1\n", "t").unwrap_err();
        assert!(e.to_string().contains("line 1"), "{e}");
    }

    #[test]
    fn missing_file_and_directory_are_clear() {
        let e = Config::load(Path::new("/nonexistent/x.toml")).unwrap_err();
        assert!(e.to_string().contains("cannot read"), "{e}");
        let e = Config::load(Path::new("/")).unwrap_err();
        assert!(e.to_string().contains("directory"), "{e}");
    }

    const TWO_TENANTS: &str = "[[tenants]]\nname = \"a\"\ncgroup = \"/agents/a\"\n\
        class = \"agent\"\nrate = 0.1\nmax_share = 0.05\n\
        [[tenants]]\nname = \"b\"\ncgroup = \"/agents/b\"\nclass = \"gpu\"\n\
        latency_target_us = 500\n";

    #[test]
    fn tenants_parse_and_default_to_their_class() {
        let c = Config::parse(TWO_TENANTS, "t").unwrap();
        assert_eq!(c.tenants.len(), 2);
        let a = c.tenants[0].budget(&c.classes);
        assert_eq!((a.rate, a.max_share), (0.1, 0.05));
        assert_eq!(a.burst_ms, c.classes.agent.burst_ms, "unset: the class's");
        assert_eq!(a.latency_target_us, c.classes.agent.latency_target_us);
        let b = c.tenants[1].budget(&c.classes);
        assert_eq!(b.latency_target_us, 500);
        assert_eq!(
            b.rate, c.classes.gpu.rate,
            "a gpu tenant takes the gpu class's"
        );
    }

    fn tenant(fields: &str) -> String {
        format!("[[tenants]]\nname = \"a\"\ncgroup = \"/a\"\nclass = \"agent\"\n{fields}")
    }

    #[test]
    fn bad_tenants_are_rejected_with_their_key() {
        let dup =
            format!("{TWO_TENANTS}[[tenants]]\nname = \"a\"\ncgroup = \"/x\"\nclass = \"agent\"\n");
        assert_eq!(err_keys(&dup), ["tenants[2].name"]);
        let relative = tenant("").replace("\"/a\"", "\"agents\"");
        assert_eq!(err_keys(&relative), ["tenants[0].cgroup"]);
        let dots = tenant("").replace("\"/a\"", "\"/a/../b\"");
        assert_eq!(err_keys(&dots), ["tenants[0].cgroup"]);
        let normal = tenant("").replace("\"agent\"", "\"normal\"");
        assert_eq!(err_keys(&normal), ["tenants[0].class"]);
        assert_eq!(err_keys(&tenant("rate = 1.5\n")), ["tenants[0].rate"]);
        assert_eq!(
            err_keys(&tenant("max_share = -0.1\nburst_ms = 20000\n")),
            ["tenants[0].burst_ms", "tenants[0].max_share"]
        );
        assert_eq!(
            err_keys(&tenant("latency_target_us = 0\n")),
            ["tenants[0].latency_target_us"]
        );
        let bad_name = tenant("").replace("name = \"a\"", "name = \"a b\"");
        assert_eq!(err_keys(&bad_name), ["tenants[0].name"]);
        let msg = Config::parse(&tenant("cpu = 3\n"), "t.toml")
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("unknown field") && msg.contains("cpu"),
            "{msg}"
        );
        let missing = "[[tenants]]\nname = \"a\"\nclass = \"agent\"\n";
        let msg = Config::parse(missing, "t.toml").unwrap_err().to_string();
        assert!(msg.contains("cgroup"), "{msg}");
    }

    #[test]
    fn one_tenant_per_cgroup_and_class_and_at_most_max_tenants() {
        let same = format!(
            "{}[[tenants]]\nname = \"b\"\ncgroup = \"/a/\"\nclass = \"agent\"\n",
            tenant("")
        );
        assert_eq!(err_keys(&same), ["tenants[1].cgroup"]);
        let other_class = same.replace("/a/\"\nclass = \"agent\"", "/a\"\nclass = \"gpu\"");
        assert!(
            Config::parse(&other_class, "t").is_ok(),
            "gpu and agent tenants may share a cgroup"
        );
        let many: String = (0..=MAX_TENANTS)
            .map(|i| {
                format!("[[tenants]]\nname = \"t{i}\"\ncgroup = \"/t{i}\"\nclass = \"agent\"\n")
            })
            .collect();
        assert_eq!(err_keys(&many), ["tenants"]);
    }

    #[test]
    fn shipped_configs_are_valid() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
            }
        }
    }
}
