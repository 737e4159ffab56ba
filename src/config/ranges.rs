//! The valid range of every numeric config key: the one home of these
//! numbers. `Config::validate` enforces them, a unit test compares them with
//! the `Range:` comments of configs/default.toml, and tests/config_props.rs
//! (which includes this file by path: scx_express is a bin crate) draws its
//! valid and invalid values from them. Nothing here depends on the rest of
//! the crate, so that include works.

/// One end of a range.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Bound {
    Int(u64),
    Float(f64),
    /// The value of another key (full dotted name), taken within that
    /// key's own range: an out-of-range key is reported by itself, and the
    /// keys bounded by it are checked against its nearest valid value.
    Key(&'static str),
    /// The larger of a number and another key's value (as for `Key`).
    AtLeast(u64, &'static str),
}

/// The valid values of one key: `lo ..= hi`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KeyRange {
    /// Full dotted name, as in error messages: `fair.slice_max_us`.
    pub key: &'static str,
    pub lo: Bound,
    pub hi: Bound,
    /// What the number is, added to the error message ("" for none).
    pub note: &'static str,
}

const fn int(key: &'static str, lo: u64, hi: u64) -> KeyRange {
    KeyRange {
        key,
        lo: Bound::Int(lo),
        hi: Bound::Int(hi),
        note: "",
    }
}

const fn fraction(key: &'static str, note: &'static str) -> KeyRange {
    KeyRange {
        key,
        lo: Bound::Float(0.0),
        hi: Bound::Float(1.0),
        note,
    }
}

/// Every range-checked key, in configs/default.toml's order.
pub const RANGES: &[KeyRange] = &[
    int("fair.slice_max_us", 100, 100_000),
    KeyRange {
        key: "fair.slice_min_us",
        lo: Bound::Int(50),
        hi: Bound::Key("fair.slice_max_us"),
        note: "",
    },
    int("fair.target_latency_us", 1000, 1_000_000),
    int("fair.rescue_ms", 5, 5000),
    // The kernel refuses a timeout_ms over 30 s (SCX_WATCHDOG_MAX_TIMEOUT).
    int("fair.watchdog_ms", 5000, 30_000),
    int("express.slice_us", 100, 100_000),
    int("express.irq_window_ms", 1, 10_000),
    int("express.irq_hot_pct", 1, 100),
    int("express.deep_idle_us", 0, 1_000_000),
    int("express.pm_qos_resume_latency_us", 0, 1_000_000),
    // Below MAX_CPUS (src/bpf/intf.h); below the online CPU count is
    // checked at start (src/irq_shield.rs), where that count is known.
    int("express.irq_shield_cpus", 1, 1023),
    int("classes.gpu.burst_ms", 0, 10_000),
    fraction("classes.gpu.rate", "a fraction of one CPU"),
    fraction("classes.gpu.max_share", "a fraction of the whole machine"),
    int("classes.gpu.latency_target_us", 1, 1_000_000),
    int("classes.gpu.hold_us", 0, 20_000),
    int("classes.agent.burst_ms", 0, 10_000),
    fraction("classes.agent.rate", "a fraction of one CPU"),
    fraction("classes.agent.max_share", "a fraction of the whole machine"),
    int("classes.agent.latency_target_us", 1, 1_000_000),
    int("classes.agent.hold_us", 0, 20_000),
    int("classify.scan_interval_ms", 50, 60_000),
    int("classify.idle_demote_ms", 10, 3_600_000),
    int("classify.launch_window_ms", 0, 60_000),
    KeyRange {
        key: "classify.launch_period_ms",
        lo: Bound::AtLeast(100, "classify.launch_window_ms"),
        hi: Bound::Int(3_600_000),
        note: "",
    },
];

/// The range of `key`.
pub fn range_of(key: &str) -> Option<&'static KeyRange> {
    RANGES.iter().find(|r| r.key == key)
}

/// The last part of a dotted key: its name inside its TOML table.
pub fn short_name(key: &str) -> &str {
    key.rsplit('.').next().unwrap_or(key)
}

impl std::fmt::Display for Bound {
    /// As configs/default.toml writes it: `100000`, `1.0`, `slice_max_us`,
    /// `max(100, launch_window_ms)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Bound::Int(n) => write!(f, "{n}"),
            Bound::Float(x) => write!(f, "{x:?}"),
            Bound::Key(k) => write!(f, "{}", short_name(k)),
            Bound::AtLeast(n, k) => write!(f, "max({n}, {})", short_name(k)),
        }
    }
}

impl std::fmt::Display for KeyRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ..= {}", self.lo, self.hi)
    }
}
