//! The scx_express_bench binary as a user meets it: its help, and how it
//! fails before any VM boots when the scheduler binary is missing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bench(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_scx_express_bench"))
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("running scx_express_bench")
}

/// A minimal repository: what the bench looks for, with no build in it.
fn fake_repo(name: &str) -> PathBuf {
    let r = std::env::temp_dir().join(format!("scx-bench-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&r);
    std::fs::create_dir_all(r.join("tests/vm")).unwrap();
    std::fs::write(r.join("tests/vm/run.sh"), "#!/bin/sh\nexit 1\n").unwrap();
    std::fs::create_dir_all(r.join("workloads")).unwrap();
    std::fs::create_dir_all(r.join("configs")).unwrap();
    std::fs::write(r.join("configs/default.toml"), "").unwrap();
    r
}

#[test]
fn help_names_the_scheduler_option() {
    let o = bench(&["--help"], Path::new("/"));
    assert!(o.status.success());
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(help.contains("--scheduler <PATH>"), "{help}");
    assert!(help.contains("--preset"), "{help}");
    assert!(help.contains("cargo build --release"), "{help}");
}

#[test]
fn a_missing_scheduler_is_named_with_the_fix() {
    let r = fake_repo("missing");
    // Found from the current directory, a subdirectory of the repository.
    let o = bench(&["--preset", "smoke"], &r.join("workloads"));
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    let bin = r.join("target/release/scx_express");
    assert!(err.contains(&bin.display().to_string()), "{err}");
    assert!(err.contains("cargo build --release"), "{err}");
    // A --scheduler that does not exist is named as given.
    let o = bench(
        &[
            "--preset",
            "smoke",
            "--scheduler",
            "/nonexistent/scx_express",
        ],
        &r,
    );
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--scheduler /nonexistent/scx_express"),
        "{err}"
    );
    std::fs::remove_dir_all(&r).unwrap();
}

#[test]
fn a_plan_without_express_needs_no_scheduler() {
    let r = fake_repo("eevdf");
    let o = bench(&["--preset", "smoke", "--schedulers", "eevdf"], &r);
    // It gets past the scheduler lookup and stops later (no workloads to
    // build, or no host tools), never on the missing scheduler binary.
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("scheduler binary"), "{err}");
    assert!(!err.contains("target/release/scx_express"), "{err}");
    std::fs::remove_dir_all(&r).unwrap();
}

#[test]
fn outside_any_repository_it_asks_for_repo() {
    let d = std::env::temp_dir().join(format!("scx-bench-cli-{}-none", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let o = bench(&["--preset", "smoke", "--repo", d.to_str().unwrap()], &d);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("not the scx_express repository"), "{err}");
    std::fs::remove_dir_all(&d).unwrap();
}
