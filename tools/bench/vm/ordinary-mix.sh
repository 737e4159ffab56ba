#!/bin/sh
# Benchmark (prints numbers, asserts nothing): ordinary workloads beyond
# ordinary.sh's three, each stressing another path of the fair scheduler,
# with no express task, against EEVDF in the same boot (EEVDF, the
# scheduler, EEVDF again; the two EEVDF phases averaged). stress-ng
# stressors, N = vCPUs, bogo-ops/s (real time), SECS s each:
#   switch   N pairs ping-ponging over pipes: wakeup to run, back to back
#   futex    futex wait/wake between N workers
#   fork     N workers forking and reaping children: new-task placement
#   yield    4N workers calling sched_yield: ops.yield's path
#   pipe     N writer/reader pairs moving data: throughput between wakeups
#   mixed    switch pairs beside 4N CPU hogs (the switch ops/s): wakeups
#            that must preempt a hog to run soon
# Each phase runs every test REPS times (default 1) and keeps the median:
# a single 5 s sample of `mixed` moved by 2x between boots. TESTS picks
# a subset. The last line sums it up as ratios to EEVDF (higher is better).
#
#   tests/vm/run.sh tools/bench/vm/ordinary-mix.sh                     # scx_express
#   tests/vm/run.sh tools/bench/vm/ordinary-mix.sh --env REPS=3 --env TESTS="switch mixed"
#   tests/vm/run.sh tools/bench/vm/ordinary-mix.sh --smp 8 --timeout 900
#   tests/vm/run.sh tools/bench/vm/ordinary-mix.sh --bin ~/.cache/scx_express/peers/bin/scx_bpfland \
#       --env SCHED=scx_bpfland
# A bundle (tools/bench/vm/bundle.sh, peers added with --bin) picks the
# scheduler per boot from the kernel command line: --append mix.sched=NAME.
# vmtest: smp=2 timeout=600 bins=target/release/scx_express,/usr/bin/stress-ng
# shellcheck source=../../../tests/vm/guest-lib.sh
. /lib/vmtest/guest-lib.sh

N=$VMTEST_SMP
SECS=${SECS:-5}
SCHED=${SCHED:-scx_express}
sched=$(boot_arg mix.sched)
[ -z "$sched" ] || SCHED=$sched
REPS=${REPS:-1}
TESTS=${TESTS:-switch futex fork yield pipe mixed}

# ops STRESSOR ARGS...: stress-ng's real-time bogo-ops/s of STRESSOR.
ops() {
    _s=$1
    shift
    stress-ng "$@" --timeout "${SECS}s" --metrics-brief 2>&1 |
        awk -v s="$_s" '$4 == s && $5 ~ /^[0-9]+$/ { print $(NF - 1) }' | tail -n 1
}

# one TEST: its bogo-ops/s.
one() {
    case $1 in
    switch) ops switch --switch "$N" ;;
    futex) ops futex --futex "$N" ;;
    fork) ops fork --fork "$N" ;;
    yield) ops yield --yield $((4 * N)) ;;
    pipe) ops pipe --pipe "$N" ;;
    mixed)
        stress-ng --cpu $((4 * N)) --timeout $((SECS + 3))s >/dev/null 2>&1 &
        _h=$!
        sleep 1
        ops switch --switch "$N"
        wait "$_h"
        ;;
    esac
}

# phase NAME: every test; "NAME TEST OPS" lines in /tmp/r.txt.
phase() {
    for t in $TESTS; do
        v=$(for _ in $(seq "$REPS"); do one "$t"; done | median)
        echo "$1 $t ${v:-0}" >>/tmp/r.txt
        log "$1: $t ${v:-none} bogo-ops/s"
    done
}

: >/tmp/r.txt
phase eevdf
start_sched /tmp/scx.log
log "$SCHED attached: ops $(sched_ops_name)"
phase sched
stop_sched
phase eevdf2

awk -v name="$SCHED" -v n="$N" '
    { v[$1, $2] = $3; if (!($2 in seen)) { seen[$2] = 1; order[++k] = $2 } }
    END {
        printf "ordinary-mix: sched=%s smp=%d", name, n
        for (i = 1; i <= k; i++) {
            t = order[i]; e = (v["eevdf", t] + v["eevdf2", t]) / 2
            printf " %s=%.3f", t, (e > 0 ? v["sched", t] / e : 0)
        }
        printf "\n"
    }' /tmp/r.txt
