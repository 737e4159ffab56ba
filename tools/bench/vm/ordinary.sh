#!/bin/sh
# Benchmark (prints numbers, asserts nothing): what ordinary tasks pay for a
# sched_ext scheduler, with no express task at all, against EEVDF in the
# same boot. Phases: EEVDF, the scheduler, EEVDF again (the two EEVDF
# phases are averaged, so host drift during the boot cancels out). Each
# phase measures:
#   hackbench   hackbench -g 8 -l 400, seconds (median of 3 runs)
#   stress      stress-ng --cpu 4xN for 10 s, bogo-ops/s (real time)
#   cyc_p99     cyclictest SCHED_OTHER -i 1000 for 10 s beside 4xN
#               stress-ng CPU hogs: p99 wakeup latency, us (p50 and max too)
# and for the scheduler its own CPU time over its phase, in percent of the
# machine (all its threads, utime + stime). The last line sums it up as
# ratios to EEVDF ("ordinary: ..."), which tools/bench/vm/ordinary-runs.sh
# collects over boots.
#
#   tests/vm/run.sh tools/bench/vm/ordinary.sh                       # scx_express
#   tests/vm/run.sh tools/bench/vm/ordinary.sh --env SCHED_ARGS="--config /etc/u.toml"
#   tests/vm/run.sh tools/bench/vm/ordinary.sh --smp 8 --timeout 900
#   tests/vm/run.sh tools/bench/vm/ordinary.sh --bin ~/.cache/scx_express/peers/bin/scx_bpfland \
#       --env SCHED=scx_bpfland
# A bundle (tools/bench/vm/bundle.sh) picks a config per boot from the kernel
# command line instead: runner.sh --append ordinary.config=/etc/u.toml; and
# a scheduler binary, for an A/B of two builds in one bundle (the other one
# added with bundle.sh's --bin): --append ordinary.sched=NAME.
# vmtest: smp=2 timeout=900 bins=target/release/scx_express,/usr/bin/stress-ng,/usr/bin/cyclictest,/usr/bin/hackbench
# vmtest: files=tools/bench/vm/userspace.toml:/etc/u.toml
# shellcheck source=../../../tests/vm/guest-lib.sh
. /lib/vmtest/guest-lib.sh

N=$VMTEST_SMP
HOGS=$((4 * N))
SCHED=${SCHED:-scx_express}
sched=$(boot_arg ordinary.sched)
[ -z "$sched" ] || SCHED=$sched
cfg=$(boot_arg ordinary.config)
[ -z "$cfg" ] || SCHED_ARGS="$SCHED_ARGS --config $cfg"

hackbench_s() {
    for _ in 1 2 3; do
        hackbench_once
    done | median
}

stress_ops() {
    stress-ng --cpu "$HOGS" --timeout 10s --metrics-brief 2>&1 |
        awk '$0 ~ /stress-ng: .*metrc: .* cpu / { print $(NF - 1) }' | tail -n 1
}

# cyclictest beside hogs: "p50 p99 max" in us, from its histogram.
cyc() {
    stress-ng --cpu "$HOGS" --timeout 14s >/dev/null 2>&1 &
    _hogs=$!
    sleep 2
    cyclictest -q -D 10 -i 1000 -t 1 -h 100000 >/tmp/cyc.txt 2>/dev/null
    wait "$_hogs"
    # Leading zeros stripped: busybox awk reads "000009" as bad octal.
    awk 'function num(s) { sub(/^0+/, "", s); return s + 0 }
        /^[0-9]+ +[0-9]+/ { c = num($2); if (c) { n[num($1)] = c; tot += c } }
        END {
            c = 0
            for (us = 0; us <= 100000; us++) {
                if (!(us in n)) continue
                c += n[us]
                if (!p50 && c >= tot * 0.50) p50 = us
                if (!p99 && c >= tot * 0.99) p99 = us
                max = us
            }
            printf "%d %d %d\n", p50, p99, max
        }' /tmp/cyc.txt
}

# phase NAME: every measurement; sets H S C (hackbench, stress, cyc p99).
phase() {
    H=$(hackbench_s)
    S=$(stress_ops)
    # cyc prints "p50 p99 max": they become $2 $3 $4.
    # shellcheck disable=SC2046
    set -- "$1" $(cyc)
    C=$3
    log "$1: hackbench ${H} s | stress ${S} bogo-ops/s | cyclictest p50 $2 p99 $3 max $4 us"
}

phase eevdf
h1=$H s1=$S c1=$C

start_sched /tmp/scx.log
log "$SCHED attached: ops $(sched_ops_name)"
t0=$(uptime_cs)
k0=$(task_cputime "$SCX_PID")
phase "$SCHED"
hs=$H ss=$S cs=$C
k1=$(task_cputime "$SCX_PID")
t1=$(uptime_cs)
# ticks / (elapsed s x hz x CPUs), in percent
cpu_pct=$(awk -v k=$((k1 - k0)) -v t=$((t1 - t0)) -v hz="$VMTEST_CLK_TCK" -v n="$N" \
    'BEGIN { printf "%.2f", k * 100 * 100 / (t * hz * n) }')
log "$SCHED own CPU: $((k1 - k0)) ticks in $((t1 - t0))0 ms = ${cpu_pct}% of $N CPUs"
# Where that time went: each thread's ticks since it started.
for t in /proc/"$SCX_PID"/task/*; do
    echo "  thread $(cat "$t/comm" 2>/dev/null): $(task_cputime "${t#/proc/}") ticks"
done
# Any build of ours (ordinary.sched=scx_express_X too) answers `scx_express stats`.
case $SCHED in
scx_express*)
    scx_express stats --flat | grep -E '^(fair_|direct_idle|wakeup_preempt|user_queued|rescued|fallback)' | tr '\n' ' '
    echo
    ;;
esac
stop_sched

phase eevdf2
h2=$H s2=$S c2=$C

awk -v h1="$h1" -v h2="$h2" -v hs="$hs" -v s1="$s1" -v s2="$s2" -v ss="$ss" \
    -v c1="$c1" -v c2="$c2" -v cs="$cs" -v cpu="$cpu_pct" -v n="$N" -v name="$SCHED${cfg:+:$(basename "$cfg" .toml)}" 'BEGIN {
    he = (h1 + h2) / 2; se = (s1 + s2) / 2; ce = (c1 + c2) / 2
    printf "ordinary: sched=%s smp=%d hackbench=%.3f stress=%.3f cyc_p99=%.3f cpu_pct=%s", \
        name, n, hs / he, ss / se, (ce > 0 ? cs / ce : 0), cpu
    printf " | eevdf hackbench %s/%s s stress %s/%s cyc_p99 %s/%s us\n", h1, h2, s1, s2, c1, c2
}'
