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
#   lowpri   4N CPU hogs beside N switch pairs at nice 19 (the hogs'
#            bogo-ops/s): the other side of `mixed`. A nice 19 task is
#            owed about 1/70 of a nice 0 one's CPU, so the hogs should
#            keep nearly the whole machine; a placement that lets
#            ping-pong wakeups skip the queue shows here as the hogs
#            losing what the pairs take
#   hackbench hackbench -g 8 -l 400 (ordinary.sh's), as messages/s:
#            320 tasks, senders that keep running after each wakeup
# Each phase runs every test REPS times (default 1) and keeps the median:
# a single 5 s sample of `mixed` moved by 2x between boots. TESTS picks
# a subset (hackbench and lowpri only when named). The last lines, one
# per scheduler, sum it up as ratios to EEVDF (higher is better).
#
# SCHEDS="A B ..." (or mix.sched=A,B) runs several schedulers in one boot,
# for an A/B of two builds: EEVDF, then ROUNDS rounds (default 1) of each
# scheduler followed by EEVDF, the order reversed each round;
# each scheduler's ratio is the mean of its phases over the mean of
# EEVDF's. Under TCG the same build's ratio moves by tens of percent
# between boots, more than most scheduling changes; within one boot,
# interleaved, host drift falls on all of them alike.
#
#   tests/vm/run.sh tools/bench/vm/ordinary-mix.sh                     # scx_express
#   tests/vm/run.sh tools/bench/vm/ordinary-mix.sh --env REPS=3 --env TESTS="switch mixed"
#   tests/vm/run.sh tools/bench/vm/ordinary-mix.sh --smp 8 --timeout 900
#   tests/vm/run.sh tools/bench/vm/ordinary-mix.sh --bin ~/.cache/scx_express/peers/bin/scx_bpfland \
#       --env SCHED=scx_bpfland
#   tests/vm/run.sh tools/bench/vm/ordinary-mix.sh --bin /tmp/scx_express_x:/bin/scx_express_x \
#       --env "SCHEDS=scx_express scx_express_x" --env ROUNDS=2 --env "TESTS=hackbench mixed"
# A bundle (tools/bench/vm/bundle.sh, peers added with --bin) picks the
# scheduler per boot from the kernel command line: --append mix.sched=NAME.
# vmtest: smp=2 timeout=600 bins=target/release/scx_express,/usr/bin/stress-ng,/usr/bin/hackbench
# shellcheck source=../../../tests/vm/guest-lib.sh
. /lib/vmtest/guest-lib.sh

N=$VMTEST_SMP
SECS=${SECS:-5}
SCHEDS=${SCHEDS:-${SCHED:-scx_express}}
sched=$(boot_arg mix.sched)
[ -z "$sched" ] || SCHEDS=$(echo "$sched" | tr , ' ')
REPS=${REPS:-1}
ROUNDS=${ROUNDS:-1}
TESTS=${TESTS:-switch futex fork yield pipe mixed}

# ops STRESSOR ARGS...: stress-ng's real-time bogo-ops/s of STRESSOR.
ops() {
    _s=$1
    shift
    stress-ng "$@" --timeout "${SECS}s" --metrics-brief 2>&1 |
        awk -v s="$_s" '$4 == s && $5 ~ /^[0-9]+$/ { print $(NF - 1) }' | tail -n 1
}

# beside NICE BG COUNT FG COUNT: FG's bogo-ops/s while COUNT BG workers
# run beside it at NICE (renice, then exec: the guest's busybox has no
# nice(1)).
beside() {
    sh -c 'renice -n "$0" -p $$ >/dev/null && exec "$@"' "$1" \
        stress-ng --"$2" "$3" --timeout $((SECS + 3))s >/dev/null 2>&1 &
    _h=$!
    sleep 1
    ops "$4" --"$4" "$5"
    wait "$_h"
}

# one TEST: its bogo-ops/s.
one() {
    case $1 in
    switch) ops switch --switch "$N" ;;
    futex) ops futex --futex "$N" ;;
    fork) ops fork --fork "$N" ;;
    yield) ops yield --yield $((4 * N)) ;;
    pipe) ops pipe --pipe "$N" ;;
    mixed) beside 0 cpu $((4 * N)) switch "$N" ;;
    lowpri) beside 19 switch "$N" cpu $((4 * N)) ;;
    hackbench)
        hackbench_once | awk -v m="$HACKBENCH_MSGS" '$1 > 0 { printf "%.0f\n", m / $1 }'
        ;;
    esac
}

# phase NAME: every test; "NAME TEST OPS" lines in /tmp/r.txt.
phase() {
    for t in $TESTS; do
        v=$(for _ in $(seq "$REPS"); do one "$t"; done | median)
        echo "$1 $t ${v:-0}" >>/tmp/r.txt
        log "$1: $t ${v:-none} per s (bogo-ops; hackbench: messages)"
    done
}

: >/tmp/r.txt
phase eevdf
order=$SCHEDS
for _ in $(seq "$ROUNDS"); do
    for SCHED in $order; do
        start_sched "/tmp/scx-$SCHED.log"
        log "$SCHED attached: ops $(sched_ops_name)"
        phase "$SCHED"
        stop_sched
    done
    phase eevdf
    # the next round in the reverse order
    order=$(for s in $order; do echo "$s"; done | awk '{ l[NR] = $0 } END { for (i = NR; i; i--) print l[i] }')
done

# Means over each name's phases; one line per scheduler.
awk -v scheds="$SCHEDS" -v n="$N" '
    { sum[$1, $2] += $3; cnt[$1, $2]++; if (!($2 in seen)) { seen[$2] = 1; order[++k] = $2 } }
    END {
        ns = split(scheds, s, " ")
        for (j = 1; j <= ns; j++) {
            printf "ordinary-mix: sched=%s smp=%d", s[j], n
            for (i = 1; i <= k; i++) {
                t = order[i]
                e = cnt["eevdf", t] ? sum["eevdf", t] / cnt["eevdf", t] : 0
                v = cnt[s[j], t] ? sum[s[j], t] / cnt[s[j], t] : 0
                printf " %s=%.3f", t, (e > 0 ? v / e : 0)
            }
            printf "\n"
        }
    }' /tmp/r.txt
