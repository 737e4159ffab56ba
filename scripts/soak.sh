#!/usr/bin/env bash
# Long soak of scx_express in the test VM: tests/vm/scenarios/30-soak.sh
# (stress-ng --aggressive -M -c N -f N --affinity-pin beside a GPU and an
# agent stand-in; no ejection, no stall, scheduler alive, stand-ins making
# progress every 10 s) for MINUTES instead of the 1 minute of scripts/test.sh.
#
#   scripts/soak.sh            10 minutes, 2 vCPUs
#   scripts/soak.sh 30         30 minutes
#   scripts/soak.sh 10 --smp 4 extra options go to tests/vm/run.sh
#
# Builds first (release, and the workloads). The console log is kept in
# target/vmtest/soak-<MINUTES>m.log. Exits with run.sh's status (0 = pass;
# see tests/vm/README.md for the others).
set -euo pipefail
cd "$(dirname "$0")/.."

minutes=10
if [ $# -gt 0 ] && [[ $1 =~ ^[0-9]+$ ]]; then
    minutes=$1
    shift
fi
case ${1:-} in -h | --help) sed -n '2,14p' "$0"; exit 0 ;; esac
[ "$minutes" -ge 1 ] || { echo "soak.sh: MINUTES must be at least 1" >&2; exit 2; }

secs=$((minutes * 60))
export BPF_CLANG=${BPF_CLANG:-/usr/bin/clang-19}
cargo build --release --locked
make -s -C workloads

mkdir -p target/vmtest
log=target/vmtest/soak-${minutes}m.log
echo "soak: ${minutes} min; console log in $log"
# Loading takes up to ~1.5 min under TCG, the stand-ins and checks ~1 min:
# give the guest 5 minutes beyond the soak itself.
exec tests/vm/run.sh tests/vm/scenarios/30-soak.sh \
    --env "SOAK_SECS=$secs" --timeout $((secs + 300)) --keep-log "$log" "$@"
