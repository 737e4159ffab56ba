#!/bin/sh
# Live reload: SIGHUP re-reads the config without a detach. An invalid new
# config is rejected with its reason and the old one stays in force; a valid
# one takes effect (here: turning the gpu class off stops express dispatches
# of a running launcher). `check-config` validates without the kernel, and
# --metrics-file writes OpenMetrics text.
# vmtest: smp=2 timeout=240 bins=target/release/scx_express files=workloads/build:/opt/w,configs/default.toml:/etc/scx_express/config.toml
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh

CFG=/etc/scx_express/config.toml
start_scx /tmp/scx.log --config $CFG --metrics-file /tmp/metrics.prom
/opt/w/decode --duration 40 >/tmp/decode.out 2>&1 &
dec=$!
sleep 3

express() {
    stats_snapshot /tmp/snap
    snap_sum /tmp/snap classes.gpu.prev classes.gpu.llc classes.gpu.any classes.gpu.preempt classes.gpu.requeue
}
gain() { _a=$(express); sleep 3; echo $(($(express) - _a)); }

g=$(gain)
log "express dispatches in 3 s with the gpu class on: $g"
[ "$g" -gt 50 ] || fail "the launcher is not in the express lane ($g)"

# An invalid config: rejected, reason logged, old config still in force.
cp $CFG /tmp/good.toml
printf '[classes.gpu]\nenabled = false\nburst_ms = -3\n' >$CFG
scx_express check-config $CFG && fail "check-config accepted a negative burst"
kill -HUP "$SCX_PID"
wait_until 10 grep -q 'reload rejected' /tmp/scx.log || { cat /tmp/scx.log; fail "no rejection logged"; }
grep 'reload rejected' -A1 /tmp/scx.log | grep -q 'classes.gpu.burst_ms' || fail "rejection does not name the key"
g=$(gain)
[ "$g" -gt 50 ] || fail "after a rejected reload the gpu class stopped working ($g)"
echo "ok: invalid reload rejected (classes.gpu.burst_ms named), old config still serving ($g express dispatches)"

# A valid change takes effect without a detach.
sed 's/^enabled = true$/enabled = false/' /tmp/good.toml >$CFG
grep -c '^enabled = false$' $CFG | grep -q 2 || fail "test setup: could not turn classes off"
scx_express check-config $CFG >/dev/null || fail "check-config rejected the valid config"
kill -HUP "$SCX_PID"
wait_until 10 grep -q "reloaded $CFG" /tmp/scx.log || { cat /tmp/scx.log; fail "reload not logged"; }
# Stats are snapshots taken once a second: let one pass before counting.
sleep 2
g=$(gain)
log "express dispatches in 3 s with the classes off: $g"
[ "$g" -le 2 ] || fail "classes disabled by reload, yet $g express dispatches"
echo "ok: valid reload took effect without a detach"
check "still the same scheduler process" kill -0 "$SCX_PID"
check "still attached" sched_state_is enabled
[ "$(dmesg | grep -c 'sched_ext: BPF scheduler "express')" -le 1 ] || fail "the scheduler was re-attached"
echo "ok: no detach during reloads"

grep -q '^scx_express_rescued_total ' /tmp/metrics.prom || fail "metrics file lacks counters"
grep -q 'scx_express_express_prev_total{class="gpu"}' /tmp/metrics.prom || fail "metrics file lacks per-class counters"
tail -n 1 /tmp/metrics.prom | grep -qx '# EOF' || fail "metrics file not terminated"
echo "ok: --metrics-file writes OpenMetrics text"

kill "$dec"
wait "$dec"
stop_scx
