#!/usr/bin/env bash
# Runs every test of scx_express: build, unit and CLI tests, then the VM
# tests (a real sched_ext kernel under QEMU). Installs what it needs on
# Debian/Ubuntu (apt, as root or through sudo) and caches the VM kernel.
#
#   scripts/test.sh            everything
#   scripts/test.sh --no-vm    build, lint and host tests only
#   scripts/test.sh --filter RE  only VM scenarios matching RE
#   scripts/test.sh --no-bench   skip the benchmark smoke run
set -euo pipefail
cd "$(dirname "$0")/.."

run_vm=1 run_bench=1 vm_args=()
while [ $# -gt 0 ]; do
    case $1 in
    --no-vm) run_vm=0 ;;
    --no-bench) run_bench=0 ;;
    --filter) vm_args+=(--filter "${2:?}"); shift ;;
    -h | --help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
    esac
    shift
done

# Each step says when it starts (seconds since this script did): CI allows
# 40 minutes on 2 cores, and the steps' shares say where to look.
say() { printf '\n==> %s [%d s]\n' "$*" "$SECONDS"; }

# --- prerequisites -----------------------------------------------------------
PKGS=(clang-19 llvm-19 libelf-dev zlib1g-dev pkg-config libseccomp-dev
      qemu-system-x86 busybox-static cpio xz-utils stress-ng rt-tests iperf3 fio
      make gcc debian-archive-keyring fonts-dejavu-core clang-format-19 shellcheck)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]}"
    sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
if ! command -v cargo >/dev/null; then
    echo "cargo not found: install Rust (>= 1.91) from rustup.rs or your distribution" >&2
    exit 1
fi
export BPF_CLANG=${BPF_CLANG:-/usr/bin/clang-19}

# --- build, lint, host tests -------------------------------------------------
say "build"
# The workspace: the scheduler and the benchmark tool (tools/bench). With
# its tests (--all-targets): the tests' dev-dependencies turn on features
# of shared crates (getrandom's std, through proptest), and built apart,
# `cargo test` would build those crates and the binaries a second time,
# about 2 minutes on 2 cores.
cargo build --release --locked --workspace --all-targets
make -s -C workloads

say "format and lint"
cargo fmt --all --check
cargo clippy --release --locked --workspace --all-targets -- -D warnings
# BPF C: src/bpf/.clang-format. Shell: tests/vm/.shellcheckrc; the guest
# scripts declare busybox sh (#!/bin/sh or a shell=sh directive).
clang-format-19 --dry-run --Werror src/bpf/*.c src/bpf/*.h
# No import circle between the BPF files (prints who uses whom).
scripts/bpf-deps.sh
shellcheck scripts/*.sh tests/vm/*.sh tests/vm/scenarios/*.sh tests/vm/repro/*.sh \
    tools/bench/vm/*.sh tools/bench/src/*.sh tools/bench/gpu/device/*.sh
scripts/fn-length.sh

say "unit, CLI and doc-link tests"
cargo test --release --locked --workspace 2>&1 | tee target/cargo-test.log
host_pass=$(sed -n 's/^test result: ok\. \([0-9]*\) passed.*/\1/p' target/cargo-test.log |
    awk '{s += $1} END {print s + 0}')

vm_pass=0 vm_fail=0
if [ "$run_vm" = 1 ]; then
    say "VM tests (QEMU TCG, Debian sid cloud kernel with sched_ext)"
    set +e
    tests/vm/run-all.sh "${vm_args[@]}" 2>&1 | tee target/vm-test.log
    vm_rc=${PIPESTATUS[0]}
    set -e
    vm_pass=$(sed -n 's/^vm: \([0-9]*\) passed, \([0-9]*\) failed$/\1/p' target/vm-test.log | tail -n 1)
    vm_fail=$(sed -n 's/^vm: \([0-9]*\) passed, \([0-9]*\) failed$/\2/p' target/vm-test.log | tail -n 1)
    if [ -z "$vm_pass" ]; then
        vm_pass=0 vm_fail=1
    fi
    [ "$vm_rc" = 0 ] || [ "$vm_fail" -gt 0 ] || vm_fail=1
fi

bench_pass=0 bench_fail=0
if [ "$run_vm" = 1 ] && [ "$run_bench" = 1 ]; then
    # The A/B benchmark's smoke preset (2 VM boots, a few minutes): the
    # report must be complete and well formed. It asserts no timing.
    say "benchmark smoke run (scx_express_bench --preset smoke)"
    rm -rf target/bench-smoke
    t0=$(date +%s)
    if target/release/scx_express_bench --preset smoke --out target/bench-smoke &&
        target/release/scx_express_bench --check target/bench-smoke; then
        bench_pass=1
        echo "PASS bench-smoke ($(($(date +%s) - t0))s)"
    else
        bench_fail=1
        echo "FAIL bench-smoke ($(($(date +%s) - t0))s)"
    fi
fi

say "summary: host tests $host_pass passed; VM tests $vm_pass passed, $vm_fail failed; bench smoke $bench_pass passed, $bench_fail failed"
echo "total: $((host_pass + vm_pass + bench_pass)) passed, $((vm_fail + bench_fail)) failed"
[ "$vm_fail" = 0 ] && [ "$bench_fail" = 0 ]
