#!/bin/sh
# Benchmark (prints numbers, asserts no timing): wakeup latency of an
# ordinary (fair-path) task under 8 CPU hogs, EEVDF then scx_express, in
# one boot. cyclictest -i 1000 for 6 s, twice under scx_express, each
# followed by the fair-path stats: the whole wait to run (fair_wait_us) per
# fair_wakeups, and in fair.mode = "userspace" (SCX_ARGS="--config
# /etc/u.toml") the userspace decision's part of it (fair_decide_us). TCG timings are ratios within one boot: repeat the boot.
#   tests/vm/run.sh tools/bench/vm/fair-wakeup.sh
# vmtest: smp=2 timeout=300 bins=target/release/scx_express,/usr/bin/stress-ng,/usr/bin/cyclictest
# vmtest: files=tools/bench/vm/userspace.toml:/etc/u.toml
# shellcheck source=../../../tests/vm/guest-lib.sh
. /lib/vmtest/guest-lib.sh

# One cyclictest run; prints its min/avg/max latency (us).
cyc() {
    cyclictest -q -D 6 -i 1000 -t 1 -h 20000 --json=/tmp/c.json >/dev/null 2>&1
    grep -E '"(min|avg|max)"' /tmp/c.json | tr -d ' \n'
    echo
}
fair_stats() {
    scx_express stats --flat |
        grep -E "^(fair_wakeups|fair_decide_us|fair_wait_us|fair_waits_over_1ms|wakeup_preempt|rescued) " |
        tr '\n' ' '
    echo
}

stress-ng --cpu 8 --cpu-method fft --timeout 100s >/dev/null 2>&1 &
sleep 1
log "EEVDF, 8 hogs: $(cyc)"
# shellcheck disable=SC2086
start_scx /tmp/scx.log $SCX_ARGS
sleep 1
log "scx_express, 8 hogs: $(cyc)"
log "  $(fair_stats)"
log "scx_express, 8 hogs: $(cyc)"
log "  $(fair_stats)"
stop_scx
