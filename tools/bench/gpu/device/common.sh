# Sourced by the device runs after they set D (their own folder): the
# binaries beside them, a scratch folder /tmp/$1, the run's whole output
# also in $OUT/$2.log, and ts() to stamp each step.
# shellcheck shell=bash disable=SC2034 # B, W, R and ts are the runs' own
B=$D/scx_express
W=$D/bench
R=/tmp/$1
mkdir -p "$R"
exec > >(tee "$OUT/$2.log") 2>&1
ts() { echo "[$(date -u +%H:%M:%S)] $*"; }
