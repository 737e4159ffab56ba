#!/bin/sh
# Benchmark (prints numbers, asserts nothing): how two CPU hogs pinned to
# CPU 1, at nice 0 and nice 5, split it (kernel weights give 3.0 : 1),
# under EEVDF and then under scx_express, in one boot. Each phase prints
# 7 windows of 4 s of CPU time from /proc/PID/schedstat, the split over
# them, and for scx_express the fair policy's charged/forgiven time.
# REQUEUE=false (run.sh --env) turns fair.requeue_preempted off. To see
# the split under steal time, oversubscribe the host while it runs:
#   yes >/dev/null & yes >/dev/null &
#   tests/vm/run.sh tools/bench/vm/nice-split.sh; kill %1 %2
# vmtest: smp=2 timeout=300 bins=target/release/scx_express,workloads/build/hog
# shellcheck source=../../../tests/vm/guest-lib.sh
. /lib/vmtest/guest-lib.sh

# run_ms PID: CPU time of a task so far, in ms.
run_ms() { echo $(($(cut -d' ' -f1 "/proc/$1/schedstat") / 1000000)); }

# split NAME: 7 windows of the two hogs, then their split.
split() {
    hog --cpu 1 --nice 0 --duration 60 >/dev/null &
    h0=$!
    hog --cpu 1 --nice 5 --duration 60 >/dev/null &
    h5=$!
    sleep 3
    t0=0 t5=0
    for i in 1 2 3 4 5 6 7; do
        a0=$(run_ms $h0) a5=$(run_ms $h5)
        sleep 4
        b0=$(run_ms $h0) b5=$(run_ms $h5)
        echo "$1 window $i: nice0 $((b0 - a0)) ms, nice5 $((b5 - a5)) ms"
        t0=$((t0 + b0 - a0)) t5=$((t5 + b5 - a5))
    done
    echo "$1: nice 0 : nice 5 = $((t0 * 100 / (t5 > 0 ? t5 : 1)))/100"
    kill $h0 $h5
    wait $h0 $h5 2>/dev/null
}

split eevdf
printf '[fair]\nrequeue_preempted = %s\n' "${REQUEUE:-true}" >/tmp/split.toml
start_scx /tmp/scx.log --config /tmp/split.toml
stats_snapshot /tmp/s0
split "scx_express (requeue ${REQUEUE:-true})"
stats_snapshot /tmp/s1
for k in fair_charged_ms fair_forgiven_ms rescued; do
    echo "$k $(($(snap_sum /tmp/s1 $k) - $(snap_sum /tmp/s0 $k)))"
done
stop_scx
