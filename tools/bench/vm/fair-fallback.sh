#!/bin/sh
# Benchmark (prints numbers, asserts no timing): with no express tasks, how
# does stress-ng's throughput under scx_express compare with EEVDF's in the
# same boot? The goal is within 10%. EEVDF runs before and after, and their
# mean is the reference, so a drift in the emulator's speed during the boot
# does not decide the result. TCG timings are only meaningful as ratios
# within one run, and only on an otherwise idle host: repeat it.
#   tests/vm/run.sh tools/bench/vm/fair-fallback.sh
# vmtest: smp=2 timeout=240 bins=target/release/scx_express,/usr/bin/stress-ng
# shellcheck source=../../../tests/vm/guest-lib.sh
. /lib/vmtest/guest-lib.sh

# bogo ops/s (real time) of `stress-ng --cpu 4` over 15 s.
bogo() {
    stress-ng --cpu 4 --cpu-method fft --timeout 15s --metrics-brief 2>&1 |
        awk '$4 == "cpu" { print int($9) }'
}
check "starts under EEVDF" sched_state_is disabled
before=$(bogo)
start_scx /tmp/scx.log
express=$(bogo)
stop_scx
after=$(bogo)
eevdf=$(((before + after) / 2))
log "stress-ng --cpu 4 bogo ops/s: EEVDF $before then $after (mean $eevdf), scx_express $express"
[ "${eevdf:-0}" -gt 0 ] && [ "${express:-0}" -gt 0 ] || fail "could not read stress-ng's bogo ops/s"
echo "RESULT fair-fallback: scx_express at $((express * 100 / eevdf))% of EEVDF's stress-ng throughput (goal: >= 90%)"
