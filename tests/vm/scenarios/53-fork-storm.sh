#!/bin/sh
# A fork and exec storm. stress-ng --fork and --exec (2 workers each per
# vCPU; the exec stressor refuses to run as root, so the storm runs as
# nobody) create and exec tasks as fast as they can for 40 s: every new
# task passes through ops.init_task and its first enqueue, and exiting ones
# leave. The decode (gpu) and agent stand-ins run beside it. Every 10 s: no
# ejection, no stall or sched_ext error in dmesg, both stand-ins got CPU
# time. At the end stress-ng succeeded with fork and exec ops done, and
# SIGINT detaches cleanly.
# vmtest: smp=2 timeout=300 bins=target/release/scx_express,/usr/bin/stress-ng
# vmtest: files=workloads/build:/opt/w
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh

SECS=40
W=$((2 * VMTEST_SMP))
echo "$AGENT_RULE_TOML" >/tmp/scx.toml
start_guarded /tmp/scx.log --config /tmp/scx.toml
start_standins $((SECS + 25))

chmod 1777 /tmp
as_nobody "cd /tmp && stress-ng --fork $W --exec $W --timeout ${SECS}s --metrics-brief" >/tmp/stress.log 2>&1 &
stress=$!
log "stress-ng --fork $W --exec $W for ${SECS}s (as nobody)"
while kill -0 "$stress" 2>/dev/null; do
    sleep 10
    kill -0 "$stress" 2>/dev/null || break
    guarded_ok "storm"
    tracked_progressed "storm"
done
wait "$stress"
rc=$?
grep -E 'metrc|fork|exec|fail|skip' /tmp/stress.log | tail -n 8
[ "$rc" = 0 ] || fail_logs "stress-ng exited $rc"
for s in fork exec; do
    ops=$(awk -v s="$s" '$4 == s { print $5; exit }' /tmp/stress.log)
    [ "${ops:-0}" -gt 0 ] || fail_logs "stress-ng did no $s ops"
    log "$s: $ops bogo ops"
done
echo "ok: the fork/exec storm ran ${SECS}s and succeeded"
finish_standins
guarded_ok "end"
stop_scx
