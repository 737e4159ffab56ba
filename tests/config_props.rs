//! Property tests of the config parser, through `scx_express check-config`
//! (scx_express is a bin crate, so the binary is the interface):
//!
//! - no input, random bytes or random TOML-ish text, makes it panic or die
//!   of a signal: it exits 0 printing `ok`, or 1 with
//!   `scx_express: error: invalid config FILE`;
//! - any config whose values are all inside their documented ranges is
//!   accepted;
//! - a config with one value outside its range is rejected, naming that key.
//!
//! Case counts are kept small (about 750 runs of the binary, a few seconds
//! in all; SCX_PROPS_SCALE=N runs N times as many). Failing inputs are
//! shrunk and printed; none is written to disk.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, TestCaseError};

// The ranges' one home; the scheduler validates with the same table.
#[allow(dead_code)] // this test uses part of it
#[path = "../src/config/ranges.rs"]
mod ranges;

use ranges::{Bound, RANGES};

/// An integer key's value in the shipped default config.
fn default_int(key: &str) -> u64 {
    let v: toml::Value = include_str!("../configs/default.toml").parse().unwrap();
    key.split('.')
        .try_fold(&v, |v, k| v.get(k))
        .and_then(|v| v.as_integer())
        .unwrap_or_else(|| panic!("{key} has no integer default")) as u64
}

/// A bound as a number, a cross-key one at the other key's default.
fn resolve(b: Bound) -> u64 {
    match b {
        Bound::Int(n) => n,
        Bound::Float(_) => panic!("an integer range has no float bound"),
        Bound::Key(k) => default_int(k),
        Bound::AtLeast(n, k) => n.max(default_int(k)),
    }
}

/// The valid values of an integer key, with the other keys at their
/// defaults.
fn bounds(key: &str) -> (u64, u64) {
    let r = ranges::range_of(key).unwrap_or_else(|| panic!("{key} has no range"));
    (resolve(r.lo), resolve(r.hi))
}

fn in_range(key: &str) -> impl Strategy<Value = String> {
    let (lo, hi) = bounds(key);
    int_in(lo, hi)
}

fn tmpdir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("scx_express-props-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

struct Outcome {
    path: String,
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Outcome {
    fn describe(&self) -> String {
        format!(
            "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Writes `body` to a fresh file and runs `scx_express check-config` on it.
fn check_config(body: &[u8]) -> Outcome {
    static N: AtomicUsize = AtomicUsize::new(0);
    let path = tmpdir().join(format!("case-{}.toml", N.fetch_add(1, Ordering::Relaxed)));
    std::fs::write(&path, body).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_scx_express"))
        .arg("check-config")
        .arg(&path)
        .output()
        .expect("running scx_express");
    let _ = std::fs::remove_file(&path);
    Outcome {
        path: path.display().to_string(),
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The contract for any input: a clean `ok`, or a clean rejection that
/// names the file. Never a panic (exit 101) or a signal (no exit code).
fn assert_clean(o: &Outcome) -> Result<(), TestCaseError> {
    prop_assert!(!o.stderr.contains("panicked"), "panic: {}", o.describe());
    match o.code {
        Some(0) => prop_assert_eq!(o.stdout.trim(), "ok", "{}", o.describe()),
        Some(1) => {
            let head = format!("scx_express: error: invalid config {}", o.path);
            prop_assert!(
                o.stderr.starts_with(&head),
                "rejection does not start with {head:?}: {}",
                o.describe()
            );
        }
        _ => prop_assert!(false, "crashed: {}", o.describe()),
    }
    Ok(())
}

/// `cases` runs, times SCX_PROPS_SCALE if set (for a deeper search:
/// `SCX_PROPS_SCALE=50 cargo test --release --test config_props`).
fn runner(cases: u32) -> RunnerConfig {
    let scale = std::env::var("SCX_PROPS_SCALE")
        .ok()
        .and_then(|s| s.parse::<u32>().ok())
        .unwrap_or(1)
        .max(1);
    RunnerConfig {
        cases: cases.saturating_mul(scale),
        failure_persistence: None,
        max_shrink_iters: 200,
        ..RunnerConfig::default()
    }
}

// ---- TOML-ish text -------------------------------------------------------

/// Keys that exist, so random text often gets past the unknown-key check
/// and reaches type and range checks.
const KEYS: &[&str] = &[
    "mode",
    "slice_max_us",
    "slice_min_us",
    "target_latency_us",
    "direct_idle",
    "wakeup_preempt",
    "rescue_ms",
    "watchdog_ms",
    "slice_us",
    "irq_window_ms",
    "irq_hot_pct",
    "deep_idle_us",
    "preempt",
    "pm_qos_resume_latency_us",
    "irq_shield",
    "irq_shield_cpus",
    "enabled",
    "burst_ms",
    "rate",
    "max_share",
    "scope",
    "scan_interval_ms",
    "idle_demote_ms",
    "launch_window_ms",
    "launch_period_ms",
    "libraries",
    "launch_symbols",
    "sync_symbols",
    "class",
    "cgroup_prefix",
    "comm",
    "exe",
    "library",
    "symbol",
];

const TABLES: &[&str] = &[
    "[fair]",
    "[express]",
    "[classes]",
    "[classes.gpu]",
    "[classes.agent]",
    "[classes.tpu]",
    "[classify]",
    "[[classify.rules]]",
    "[[classify.markers]]",
    "[[fair]]",
    "[fair",
    "[]",
    "[classes.gpu.extra]",
    "[ classify . rules ]",
];

fn ident() -> impl Strategy<Value = String> {
    "[a-z_][a-z0-9_]{0,12}"
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => proptest::sample::select(KEYS).prop_map(str::to_string),
        1 => ident(),
        1 => (proptest::sample::select(&["fair", "express", "classes.gpu", "classify"][..]),
              proptest::sample::select(KEYS))
            .prop_map(|(t, k)| format!("{t}.{k}")),
        1 => "\"[^\"\\\\\n]{0,10}\"",
    ]
}

/// Literals that probe the corners of TOML and of the config's types.
#[rustfmt::skip]
const ODD_SCALARS: &[&str] = &[
    "nan", "+inf", "-inf", "-0.0", "1e400", "0x10", "0o7", "0b11", "1_000",
    "true", "false", "True", "\"thread\"", "\"process\"", "\"gpu\"",
    "\"agent\"", "\"normal\"", "\"\"", "'lit'", "\"\"\"multi\nline\"\"\"",
    "1979-05-27T07:32:00Z", "\"\\u0000\"", "\"\\uD800\"", "\"[\"", "\"**/*\"",
];

fn scalar() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|v| v.to_string()),
        (-10i64..200_000).prop_map(|v| v.to_string()),
        any::<f64>().prop_map(|v| format!("{v:?}")),
        (-2.0f64..3.0).prop_map(|v| format!("{v:?}")),
        proptest::sample::select(ODD_SCALARS).prop_map(str::to_string),
        "\"[ -~]{0,16}\"".prop_map(|s| s.replace('\\', "\\\\")),
    ]
}

fn value() -> impl Strategy<Value = String> {
    scalar().prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4)
                .prop_map(|v| format!("[{}]", v.join(", "))),
            proptest::collection::vec((key(), inner), 0..3).prop_map(|v| {
                let kv: Vec<String> = v.into_iter().map(|(k, x)| format!("{k} = {x}")).collect();
                format!("{{ {} }}", kv.join(", "))
            }),
        ]
    })
}

fn line() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => proptest::sample::select(TABLES).prop_map(str::to_string),
        6 => (key(), value()).prop_map(|(k, v)| format!("{k} = {v}")),
        1 => "[ -~]{0,30}",
        1 => Just(String::new()),
        1 => "#[^\n]{0,20}",
        // Deep nesting: the parser must fail cleanly, not overflow its stack.
        1 => (1usize..3000).prop_map(|n| format!("x = {}", "[".repeat(n))),
        1 => (1usize..3000).prop_map(|n| format!("x = {}1{}", "{a = ".repeat(n), "}".repeat(n))),
    ]
}

fn tomlish() -> impl Strategy<Value = String> {
    proptest::collection::vec(line(), 0..24).prop_map(|lines| lines.join("\n"))
}

#[test]
fn random_bytes_never_crash_check_config() {
    let mut r = proptest::test_runner::TestRunner::new(runner(150));
    r.run(&proptest::collection::vec(any::<u8>(), 0..600), |bytes| {
        assert_clean(&check_config(&bytes))
    })
    .unwrap();
}

#[test]
fn random_tomlish_text_never_crashes_check_config() {
    let mut r = proptest::test_runner::TestRunner::new(runner(300));
    r.run(&tomlish(), |text| {
        assert_clean(&check_config(text.as_bytes()))
    })
    .unwrap();
}

#[test]
fn very_deep_nesting_is_rejected_cleanly() {
    for body in [
        format!("x = {}", "[".repeat(200_000)),
        format!("x = {}1{}", "{a = ".repeat(50_000), "}".repeat(50_000)),
        format!("{}\n", "[a.".repeat(50_000)),
    ] {
        let o = check_config(body.as_bytes());
        assert_eq!(o.code, Some(1), "{}", o.describe());
        assert!(!o.stderr.contains("panicked"), "{}", o.describe());
    }
}

// ---- Valid configs ---------------------------------------------------------

/// One `key = value` line, or none (the key keeps its default).
type Entry = Option<(&'static str, String)>;

fn opt_entry<S: Strategy<Value = String> + 'static>(
    key: &'static str,
    s: S,
) -> BoxedStrategy<Entry> {
    proptest::option::weighted(0.8, s.prop_map(move |v| (key, v))).boxed()
}

fn int_in(lo: u64, hi: u64) -> impl Strategy<Value = String> {
    prop_oneof![Just(lo), Just(hi), lo..=hi].prop_map(|v| v.to_string())
}

fn float_in(key: &str) -> impl Strategy<Value = String> {
    let r = ranges::range_of(key).unwrap_or_else(|| panic!("{key} has no range"));
    let (Bound::Float(lo), Bound::Float(hi)) = (r.lo, r.hi) else {
        panic!("{key} is not a fractional key");
    };
    prop_oneof![Just(lo), Just(hi), lo..=hi].prop_map(|v| format!("{v:?}"))
}

fn boolean() -> impl Strategy<Value = String> {
    any::<bool>().prop_map(|b| b.to_string())
}

fn glob_word() -> impl Strategy<Value = String> {
    ("[a-z][a-z0-9_.-]{0,10}", any::<bool>()).prop_map(|(w, star)| if star { w + "*" } else { w })
}

fn section(name: &'static str, entries: Vec<BoxedStrategy<Entry>>) -> BoxedStrategy<String> {
    entries
        .prop_map(move |es| {
            let body: Vec<String> = es
                .into_iter()
                .flatten()
                .map(|(k, v)| format!("{k} = {v}"))
                .collect();
            format!("[{name}]\n{}\n", body.join("\n"))
        })
        .boxed()
}

fn fair() -> BoxedStrategy<String> {
    let (max_lo, max_hi) = bounds("fair.slice_max_us");
    // slice_min_us <= slice_max_us, and each takes its default when left
    // out: stay below both (bounds() puts slice_min_us under the default
    // slice_max_us), and give slice_min_us whenever slice_max_us is below
    // its default.
    let (min_lo, min_hi) = bounds("fair.slice_min_us");
    let min_default = default_int("fair.slice_min_us");
    (max_lo..=max_hi)
        .prop_flat_map(move |max| {
            let min_hi = max.min(min_hi);
            let min = if max < min_default {
                int_in(min_lo, min_hi)
                    .prop_map(|v| Some(("slice_min_us", v)))
                    .boxed()
            } else {
                opt_entry("slice_min_us", int_in(min_lo, min_hi))
            };
            section(
                "fair",
                vec![
                    opt_entry(
                        "mode",
                        prop_oneof![
                            Just("\"bpf\"".to_string()),
                            Just("\"userspace\"".to_string())
                        ],
                    ),
                    opt_entry("slice_max_us", Just(max.to_string())),
                    min,
                    opt_entry("target_latency_us", in_range("fair.target_latency_us")),
                    opt_entry("direct_idle", boolean()),
                    opt_entry("wakeup_preempt", boolean()),
                    opt_entry("rescue_ms", in_range("fair.rescue_ms")),
                    opt_entry("watchdog_ms", in_range("fair.watchdog_ms")),
                ],
            )
        })
        .boxed()
}

fn express() -> BoxedStrategy<String> {
    section(
        "express",
        vec![
            opt_entry("slice_us", in_range("express.slice_us")),
            opt_entry("irq_window_ms", in_range("express.irq_window_ms")),
            opt_entry("irq_hot_pct", in_range("express.irq_hot_pct")),
            opt_entry("deep_idle_us", in_range("express.deep_idle_us")),
            opt_entry("preempt", boolean()),
            opt_entry(
                "pm_qos_resume_latency_us",
                in_range("express.pm_qos_resume_latency_us"),
            ),
            opt_entry("irq_shield", boolean()),
            opt_entry("irq_shield_cpus", in_range("express.irq_shield_cpus")),
        ],
    )
}

fn class(name: &'static str) -> BoxedStrategy<String> {
    section(
        name,
        vec![
            opt_entry("enabled", boolean()),
            opt_entry("burst_ms", in_range(&format!("{name}.burst_ms"))),
            opt_entry("rate", float_in(&format!("{name}.rate"))),
            opt_entry("max_share", float_in(&format!("{name}.max_share"))),
            opt_entry(
                "scope",
                proptest::sample::select(&["\"thread\"", "\"process\""][..])
                    .prop_map(str::to_string),
            ),
        ],
    )
}

fn classify() -> BoxedStrategy<String> {
    let (window_lo, window_hi) = bounds("classify.launch_window_ms");
    // With the window at its default (it may be left out).
    let (period_lo, period_hi) = bounds("classify.launch_period_ms");
    let period_default = default_int("classify.launch_period_ms");
    (window_lo..=window_hi)
        .prop_flat_map(move |window| {
            // The period must cover the window; the default period covers
            // only windows up to itself, so a longer one needs its own.
            let lo = window.max(period_lo);
            let period = if window > period_default {
                int_in(lo, period_hi)
                    .prop_map(|v| Some(("launch_period_ms", v)))
                    .boxed()
            } else {
                opt_entry("launch_period_ms", int_in(lo, period_hi))
            };
            section(
                "classify",
                vec![
                    opt_entry("scan_interval_ms", in_range("classify.scan_interval_ms")),
                    opt_entry("idle_demote_ms", in_range("classify.idle_demote_ms")),
                    opt_entry("launch_window_ms", Just(window.to_string())),
                    period,
                    opt_entry(
                        "libraries",
                        proptest::collection::vec(glob_word(), 0..3).prop_map(|v| {
                            let quoted: Vec<String> = v.iter().map(|g| format!("{g:?}")).collect();
                            format!("[{}]", quoted.join(", "))
                        }),
                    ),
                ],
            )
        })
        .boxed()
}

fn class_name() -> impl Strategy<Value = &'static str> {
    proptest::sample::select(&["gpu", "agent", "normal"][..])
}

fn rules() -> BoxedStrategy<String> {
    let rule = (
        class_name(),
        proptest::option::of("[a-z][a-z0-9_-]{0,8}".prop_map(|s| format!("/{s}"))),
        proptest::option::of(glob_word()),
        proptest::option::of(glob_word().prop_map(|g| format!("/usr/bin/{g}"))),
    )
        .prop_map(|(class, cg, comm, exe)| {
            let mut s = format!("[[classify.rules]]\nclass = \"{class}\"\n");
            // A rule needs at least one field.
            let cg = if cg.is_none() && comm.is_none() && exe.is_none() {
                Some("/agents".to_string())
            } else {
                cg
            };
            for (k, v) in [("cgroup_prefix", cg), ("comm", comm), ("exe", exe)] {
                if let Some(v) = v {
                    s += &format!("{k} = {v:?}\n");
                }
            }
            s
        });
    let marker =
        (glob_word(), "[a-z_][a-z0-9_]{0,12}", class_name()).prop_map(|(lib, sym, class)| {
            format!(
                "[[classify.markers]]\nlibrary = {lib:?}\nsymbol = {sym:?}\nclass = \"{class}\"\n"
            )
        });
    (
        proptest::collection::vec(rule, 0..3),
        proptest::collection::vec(marker, 0..3),
    )
        .prop_map(|(r, m)| r.concat() + &m.concat())
        .boxed()
}

fn valid_config() -> impl Strategy<Value = String> {
    (
        fair(),
        express(),
        class("classes.gpu"),
        class("classes.agent"),
        classify(),
        rules(),
    )
        .prop_map(|(f, e, g, a, c, r)| [f, e, g, a, c, r].concat())
}

#[test]
fn valid_in_range_configs_are_accepted() {
    let mut r = proptest::test_runner::TestRunner::new(runner(150));
    r.run(&valid_config(), |text| {
        let o = check_config(text.as_bytes());
        prop_assert_eq!(
            o.code,
            Some(0),
            "rejected a valid config:\n{}\n{}",
            text,
            o.describe()
        );
        prop_assert_eq!(o.stdout.trim(), "ok");
        Ok(())
    })
    .unwrap();
}

// ---- One value out of range --------------------------------------------------

/// (table, key, lowest valid, highest valid) of every integer key in the
/// ranges table; cross-key bounds use the other key's default.
fn int_ranges() -> Vec<(&'static str, &'static str, i64, i64)> {
    RANGES
        .iter()
        .filter(|r| !matches!(r.lo, Bound::Float(_)))
        .map(|r| {
            let (table, key) = r.key.rsplit_once('.').unwrap();
            let (lo, hi) = bounds(r.key);
            (table, key, lo as i64, hi as i64)
        })
        .collect()
}

/// (table, key) of every fractional key in the ranges table.
fn float_keys() -> Vec<(&'static str, &'static str)> {
    RANGES
        .iter()
        .filter(|r| matches!(r.lo, Bound::Float(_)))
        .map(|r| r.key.rsplit_once('.').unwrap())
        .collect()
}

fn outside(lo: i64, hi: i64) -> impl Strategy<Value = i64> {
    let below = if lo > 0 {
        (0..lo).boxed()
    } else {
        (i64::MIN..0).boxed()
    };
    prop_oneof![below, (hi + 1)..=i64::MAX, Just(hi + 1)]
}

fn out_of_range_int() -> impl Strategy<Value = (String, String)> {
    proptest::sample::select(int_ranges()).prop_flat_map(|(t, k, lo, hi)| {
        outside(lo, hi).prop_map(move |v| (format!("{t}.{k}"), format!("[{t}]\n{k} = {v}\n")))
    })
}

fn out_of_range_float() -> impl Strategy<Value = (String, String)> {
    let value = prop_oneof![
        (1.0f64..1e300).prop_filter("above 1", |v| *v > 1.0),
        (-1e300f64..0.0).prop_filter("below 0", |v| *v < 0.0),
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
    ];
    (proptest::sample::select(float_keys()), value).prop_map(|((t, k), v)| {
        let lit = if v.is_nan() {
            "nan".to_string()
        } else if v.is_infinite() {
            if v > 0.0 { "inf" } else { "-inf" }.to_string()
        } else {
            format!("{v:?}")
        };
        (format!("{t}.{k}"), format!("[{t}]\n{k} = {lit}\n"))
    })
}

fn assert_rejects_key(key: &str, text: &str) -> Result<(), TestCaseError> {
    let o = check_config(text.as_bytes());
    assert_clean(&o)?;
    prop_assert_eq!(o.code, Some(1), "accepted out-of-range {}:\n{}", key, text);
    prop_assert!(
        o.stderr.contains(&format!("`{key}`")),
        "rejection does not name `{}`:\n{}\n{}",
        key,
        text,
        o.describe()
    );
    Ok(())
}

#[test]
fn one_out_of_range_value_is_rejected_by_name() {
    let mut r = proptest::test_runner::TestRunner::new(runner(150));
    let s = prop_oneof![out_of_range_int(), out_of_range_float()];
    r.run(&s, |(key, text)| assert_rejects_key(&key, &text))
        .unwrap();
}
