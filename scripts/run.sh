#!/usr/bin/env bash
# Builds scx_express (release) and runs it as the system scheduler. Needs a
# kernel with sched_ext (Linux >= 6.12, CONFIG_SCHED_CLASS_EXT=y), clang >= 18
# and root. Arguments go to scx_express, e.g.:
#   sudo scripts/run.sh --config configs/default.toml --stats 2
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${BPF_CLANG:-}" ]; then
    for c in clang-19 clang-20 clang-18 clang; do
        if command -v "$c" >/dev/null; then BPF_CLANG=$(command -v "$c"); break; fi
    done
fi
export BPF_CLANG=${BPF_CLANG:?clang >= 18 not found: apt-get install clang-19}
# The scheduler only: the benchmark tool (tools/bench) is not needed here.
cargo build --release --locked -p scx_express
exec target/release/scx_express "$@"
