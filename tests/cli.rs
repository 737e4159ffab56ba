//! Host-side tests of the scx_express binary: what a user sees from the
//! CLI without a sched_ext kernel. The VM tests (tests/vm) cover the rest.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_scx_express"))
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("scx_express-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(dir: &Path, name: &str, body: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn no_sched_ext_kernel_fails_fast_naming_the_config_option() {
    if Path::new("/sys/kernel/sched_ext/state").exists() {
        eprintln!("skipped: this kernel has sched_ext (the VM tests cover it)");
        return;
    }
    let t0 = Instant::now();
    let out = bin().output().unwrap();
    let took = t0.elapsed();
    assert!(!out.status.success());
    assert!(
        text(&out).contains("CONFIG_SCHED_CLASS_EXT"),
        "{}",
        text(&out)
    );
    assert!(took < Duration::from_secs(2), "took {took:?}");
}

#[test]
fn help_documents_every_flag() {
    let out = bin().arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = text(&out);
    for flag in [
        "--config",
        "--stats",
        "--monitor",
        "--verbose",
        "check-config",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}:\n{help}");
    }
}

#[test]
fn trace_help_documents_its_flags() {
    let out = bin().args(["trace", "--help"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let help = text(&out);
    for flag in [
        "--duration",
        "--csv",
        "--json",
        "--pid",
        "--probe-policy",
        "--no-events",
        "--config",
        "device IRQs only",
    ] {
        assert!(help.contains(flag), "trace --help lacks {flag}:\n{help}");
    }
    let out = bin()
        .args(["trace", "--probe-policy", "sometimes"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains("full"), "{}", text(&out));
}

#[test]
fn check_config_accepts_shipped_configs() {
    for entry in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/configs")).unwrap() {
        let path = entry.unwrap().path();
        let out = bin().arg("check-config").arg(&path).output().unwrap();
        assert!(out.status.success(), "{}: {}", path.display(), text(&out));
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
    }
}

#[test]
fn run_rejects_bad_config_before_touching_the_kernel() {
    let dir = tmpdir("run");
    let bad = write(&dir, "neg.toml", b"[classes.gpu]\nburst_ms = -1\n");
    let out = bin().arg("--config").arg(&bad).output().unwrap();
    assert!(!out.status.success());
    let msg = text(&out);
    assert!(msg.contains("classes.gpu.burst_ms"), "{msg}");
    assert!(msg.contains("neg.toml"), "{msg}");
    assert!(
        !msg.contains("CONFIG_SCHED_CLASS_EXT"),
        "config must be checked first: {msg}"
    );
}

/// Malformed configs: each is rejected, with a non-zero exit and a message
/// naming the file and, where there is one, the key.
#[test]
fn hostile_configs_are_rejected_with_clear_messages() {
    let dir = tmpdir("hostile");
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("syntax_table", b"[fair\n".to_vec(), "line 1"),
        (
            "syntax_value",
            b"[fair]\nslice_max_us = \n".to_vec(),
            "line 2",
        ),
        (
            "syntax_string",
            b"[fair]\nslice_max_us = \"5000\n".to_vec(),
            "line 2",
        ),
        (
            "dup_key",
            b"[fair]\nrescue_ms = 5\nrescue_ms = 6\n".to_vec(),
            "duplicate",
        ),
        ("unknown_top", b"[turbo]\non = true\n".to_vec(), "turbo"),
        (
            "unknown_key",
            b"[fair]\nslice_us = 1\n".to_vec(),
            "slice_us",
        ),
        (
            "unknown_class",
            b"[classes.tpu]\nburst_ms = 1\n".to_vec(),
            "tpu",
        ),
        (
            "unknown_class_key",
            b"[classes.gpu]\nburts_ms = 1\n".to_vec(),
            "burts_ms",
        ),
        (
            "type_string",
            b"[fair]\nslice_max_us = \"fast\"\n".to_vec(),
            "fair.slice_max_us",
        ),
        (
            "type_bool",
            b"[fair]\ndirect_idle = 1\n".to_vec(),
            "fair.direct_idle",
        ),
        ("type_table", b"fair = 3\n".to_vec(), "fair"),
        (
            "type_float",
            b"[fair]\nrescue_ms = 1.5\n".to_vec(),
            "fair.rescue_ms",
        ),
        (
            "type_rate",
            b"[classes.agent]\nrate = \"half\"\n".to_vec(),
            "classes.agent.rate",
        ),
        (
            "negative_burst",
            b"[classes.gpu]\nburst_ms = -5\n".to_vec(),
            "classes.gpu.burst_ms",
        ),
        (
            "negative_rate",
            b"[classes.gpu]\nrate = -0.1\n".to_vec(),
            "classes.gpu.rate",
        ),
        (
            "rate_over_one",
            b"[classes.agent]\nrate = 2.0\n".to_vec(),
            "classes.agent.rate",
        ),
        (
            "rate_nan",
            b"[classes.agent]\nrate = nan\n".to_vec(),
            "classes.agent.rate",
        ),
        (
            "huge_number",
            b"[fair]\nslice_max_us = 99999999999999999999999\n".to_vec(),
            "slice_max_us",
        ),
        (
            "out_of_range",
            b"[fair]\nrescue_ms = 100000\n".to_vec(),
            "fair.rescue_ms",
        ),
        (
            "too_small",
            b"[express]\nslice_us = 1\n".to_vec(),
            "express.slice_us",
        ),
        (
            "min_over_max",
            b"[fair]\nslice_max_us = 1000\nslice_min_us = 5000\n".to_vec(),
            "fair.slice_min_us",
        ),
        (
            "binary_garbage",
            vec![0xff, 0xfe, 0x00, 0x13, 0x37, 0x80, 0x81],
            "not UTF-8",
        ),
        ("nul_bytes", b"[fair]\x00\x00\n".to_vec(), "line 1"),
    ];
    assert!(cases.len() >= 20);
    for (name, body, expect) in &cases {
        let path = write(&dir, &format!("{name}.toml"), body);
        let out = bin().arg("check-config").arg(&path).output().unwrap();
        let msg = text(&out);
        assert!(!out.status.success(), "{name}: accepted:\n{msg}");
        assert!(
            msg.contains(&format!("{name}.toml")),
            "{name}: file not named:\n{msg}"
        );
        assert!(
            msg.contains(expect),
            "{name}: expected {expect:?} in:\n{msg}"
        );
        assert!(!msg.contains("panicked"), "{name}: panicked:\n{msg}");
    }
}

#[test]
fn unreadable_config_sources_are_rejected() {
    let dir = tmpdir("files");
    let missing = dir.join("missing.toml");
    let out = bin().arg("check-config").arg(&missing).output().unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains("cannot read"), "{}", text(&out));

    let out = bin().arg("check-config").arg(&dir).output().unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains("directory"), "{}", text(&out));

    // Root reads any file, so only check permissions as a normal user.
    if unsafe { libc::geteuid() } != 0 {
        let locked = write(&dir, "locked.toml", b"");
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
        let out = bin().arg("check-config").arg(&locked).output().unwrap();
        assert!(!out.status.success());
        assert!(text(&out).contains("cannot read"), "{}", text(&out));
    }

    let empty = write(&dir, "empty.toml", b"");
    let out = bin().arg("check-config").arg(&empty).output().unwrap();
    assert!(
        out.status.success(),
        "an empty file means all defaults: {}",
        text(&out)
    );
}
