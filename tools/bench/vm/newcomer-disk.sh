#!/bin/sh
# Benchmark (prints numbers, asserts nothing): what a forked, CPU-bound
# ordinary task pays beside the bench's disk noise (fio, 2 jobs per vCPU,
# as tools/bench/src/guest.sh runs it). The bench's subprocess agent, whose
# tool is such a task, made half of EEVDF's steps a second under disk at 8
# vCPUs (docs/benchmarks.md, "Net and disk at 8 vCPUs, the noise scaled
# with the guest"). Each phase forks K newcomers one after another: a
# shell that counts to 3,000 and prints its own /proc/self/schedstat (CPU
# time, run-queue wait, runs). Phases, in one boot: EEVDF with and without
# the noise, a short warm-up under scx_express, scx_express with and
# without the noise, `scx_express trace` (its probes and tracepoints, no
# scheduler) with the noise, EEVDF with the noise again.
# Each line also gives the NVMe completion IRQs per second. CONFIGS="F ..."
# adds a scx_express disk phase per config file F (files put in the guest
# with run.sh --file), for an A/B of a knob in the same boot; with
# newcomer.first=configs on the kernel command line (runner.sh --append)
# they run before the default's phases, so that boots can alternate the
# order.
#   tests/vm/run.sh tools/bench/vm/newcomer-disk.sh --smp 4
#   tests/vm/run.sh tools/bench/vm/newcomer-disk.sh --file /tmp/x.toml:/etc/x.toml --env CONFIGS=/etc/x.toml
#   tools/bench/vm/bundle.sh .nc tools/bench/vm/newcomer-disk.sh    # then, on a bigger host:
#   .nc/runner.sh --smp 8 OUT b1 b2 b3
# Under TCG the guest counts the host's preemptions of a vCPU as its
# task's CPU time: give each vCPU a host CPU (not 4 vCPUs on 2 cores).
# vmtest: smp=4 timeout=900 disk=1G bins=target/release/scx_express,/usr/bin/fio
# shellcheck source=../../../tests/vm/guest-lib.sh
. /lib/vmtest/guest-lib.sh

DISK_NOISE_JOBS=$(bench_disk_jobs)
export DISK_NOISE_JOBS
K=${K:-10}

# nvme_irqs: completion IRQs so far, all NVMe queues and CPUs.
nvme_irqs() {
    awk -v n="$VMTEST_SMP" '/nvme/ { for (i = 2; i <= 1 + n; i++) s += $i } END { print s + 0 }' /proc/interrupts
}

# newcomers N: fork N counting shells, one after another; their means.
newcomers() {
    rm -f /tmp/ss.txt
    _i=0
    while [ $_i -lt "$1" ]; do
        _i=$((_i + 1))
        # shellcheck disable=SC2016 # the child's shell expands these
        sh -c 'i=0; while [ $i -lt 3000 ]; do i=$((i + 1)); done; cat /proc/self/schedstat' >>/tmp/ss.txt
        sleep 0.2
    done
    awk '{ c += $1; w += $2; r += $3; n++ }
        END { printf "%d newcomers: cpu %.1f ms, runq wait %.1f ms, %.0f runs (means)", n, c / n / 1e6, w / n / 1e6, r / n }' /tmp/ss.txt
}

# fair_counters: the running scx_express's fair-path counters, one line.
fair_counters() {
    log "  $(scx_express stats --flat | grep -E '^(fair_wakeups|fair_waits_over_1ms|wakeup_preempt|fair_starved) ' | tr '\n' ' ')"
}

# phase NAME disk|clean [N]: N newcomers (default K).
phase() {
    _i0=$(nvme_irqs)
    _t0=$(cut -d' ' -f1 /proc/uptime)
    if [ "$2" = disk ]; then
        disk_noise 120 --filename="$VMTEST_DISK" --direct=1 >/tmp/fio.log 2>&1 &
        _fio=$!
        sleep 2
    fi
    _r=$(newcomers "${3:-$K}")
    _t1=$(cut -d' ' -f1 /proc/uptime)
    _i1=$(nvme_irqs)
    log "$1 $2: $_r; NVMe IRQs/s $(awk -v a="$_i0" -v b="$_i1" -v x="$_t0" -v y="$_t1" 'BEGIN { printf "%.0f", (b - a) / (y - x) }')"
    if [ "$2" = disk ]; then
        kill "$_fio" 2>/dev/null
        wait "$_fio" 2>/dev/null || true
    fi
}

# The scratch image is sparse: the first writes allocate it on the host,
# slower than every later pass (the bench's first disk cell shows it).
disk_noise 8 --filename="$VMTEST_DISK" --direct=1 >/dev/null 2>&1 &
wait $!

phase EEVDF disk
phase EEVDF clean
start_scx /tmp/scx.log
sleep 1
# A boot's first scx_express phase ran slowest whatever its config or
# build (docs/benchmarks.md, "Wakeup preemption: more switches, and an
# order effect"): one short phase first, not to be compared.
phase "warm-up (not to compare)" disk 3
stop_scx
# default_phases / config_phases: scx_express with its built-in config,
# with and without the noise; each CONFIGS file's disk phase.
default_phases() {
    start_scx /tmp/scx.log
    sleep 1
    phase scx_express disk
    fair_counters
    phase scx_express clean
    stop_scx
}
config_phases() {
    for _c in ${CONFIGS:-}; do
        start_scx /tmp/scx.log --config "$_c"
        sleep 1
        phase "scx_express --config $_c" disk
        fair_counters
        stop_scx
    done
}
if [ "$(boot_arg newcomer.first)" = configs ]; then
    config_phases
    default_phases
else
    default_phases
    config_phases
fi
scx_express trace >/tmp/trace.log 2>&1 &
_tpid=$!
sleep 3
phase trace disk
kill -INT "$_tpid"
wait "$_tpid"
phase EEVDF disk
