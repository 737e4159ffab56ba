#!/bin/sh
# Lifecycle: scx_express attaches (state enabled, ops express...), survives
# `stress-ng --cpu 4 --fork 2 --switch 2 --timeout 20s` with no stall, and
# detaches cleanly on SIGINT (state disabled, exit code 0).
# vmtest: smp=2 timeout=300 bins=target/release/scx_express,/usr/bin/stress-ng
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh

scx_express --stats 5 >/tmp/scx.log 2>&1 &
scx=$!
wait_sched_state enabled 60 || { cat /tmp/scx.log; fail "scheduler did not attach"; }
ops=$(sched_ops_name)
log "ops: $ops"
case "$ops" in
express*) echo "ok: ops name '$ops' starts with express" ;;
*) fail "ops name '$ops' does not start with express" ;;
esac

log "stress-ng --cpu 4 --fork 2 --switch 2 --timeout 20s"
stress-ng --cpu 4 --fork 2 --switch 2 --timeout 20s --metrics-brief >/tmp/stress.log 2>&1
rc=$?
cat /tmp/stress.log
[ "$rc" = 0 ] || fail "stress-ng exited $rc"
echo "ok: stress-ng completed"
check "scheduler still attached after stress" sched_state_is enabled
check "scheduler process still alive" kill -0 "$scx"
if dmesg_has 'runnable task stall|sched_ext: .*(error|disabled)'; then
    dmesg | grep -E 'sched_ext|stall' | tail -20
    fail "kernel reported a stall or a sched_ext error"
fi
echo "ok: no stall or sched_ext error in dmesg"

kill -INT "$scx"
wait "$scx"
rc=$?
cat /tmp/scx.log
wait_sched_state disabled 10 || fail "state did not return to disabled"
echo "ok: state disabled after SIGINT"
[ "$rc" = 0 ] || fail "scx_express exited $rc after SIGINT, expected 0"
echo "ok: exit code 0"
