#!/bin/sh
# Soak: the scx CI's own stress load, `stress-ng --aggressive -M -c N -f N
# --affinity-pin` (N = vCPUs; bookworm's stress-ng 0.15 accepts every one of
# these flags; --affinity-pin only changes the affinity stressor, which this
# command line does not start, so it is a no-op kept to match the CI), runs
# for SOAK_SECS (default 40: four periods of the 10 s watchdog it sets,
# fair.watchdog_ms = WATCHDOG_MS, guest-lib.sh) while a GPU stand-in
# (`decode`, classified gpu by its CUDA calls) and an agent stand-in
# (`agent`, whose agent-loop thread a comm rule makes agent) run beside it. Every 10 s (or as soon as the
# scenario's shell gets the CPU again) and at the end: the
# scheduler process is alive, sched_ext is enabled with ops express*, it was
# never ejected (enable_seq unchanged, so not even an ejection that the
# restart loop hid), dmesg has no `runnable task stall` or sched_ext
# error/disabled line, and both stand-ins made progress in that interval
# (their threads' CPU time grew). At the end both report work done (at
# least 1 token and 1 agent step per soak second) and stress-ng succeeded.
# The 10-minute version: scripts/soak.sh [MINUTES] (SOAK_SECS through
# run.sh --env).
# vmtest: smp=2 timeout=300 bins=target/release/scx_express,/usr/bin/stress-ng
# vmtest: files=workloads/build:/opt/w
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh

SOAK_SECS=${SOAK_SECS:-40}
N=$VMTEST_SMP
INTERVAL=10

# progressed WHEN WHAT BEFORE AFTER PID: the thread's CPU time grew, or its
# stand-in (PID) has finished its run: under slow TCG that can happen before
# stress-ng's last check; how it ended and what it did are checked at the end.
progressed() {
    [ "$4" -gt "$3" ] && return 0
    alive "$5" || return 0
    fail_logs "$1: the $2 made no progress since the last check"
}

printf '%s\n[fair]\nwatchdog_ms = %s\n' "$AGENT_RULE_TOML" "$WATCHDOG_MS" >/tmp/soak.toml
start_guarded /tmp/scx.log --config /tmp/soak.toml --stats "$INTERVAL"
wait_until 10 grep -q "attached (.*watchdog $WATCHDOG_MS ms)" /tmp/scx.log ||
    fail_logs "the scheduler's log does not show watchdog $WATCHDOG_MS ms"
log "soak ${SOAK_SECS}s on $N vCPUs"

# Stand-ins run a little longer than the load, so they see all of it.
run_s=$((SOAK_SECS + 5))
/opt/w/decode --duration "$run_s" >/tmp/decode.out 2>&1 &
dec=$!
/opt/w/agent --duration "$run_s" >/tmp/agent.out 2>&1 &
agt=$!
wait_until 10 grep -q '^launcher_tid=' /tmp/decode.out || fail "decode did not start"
wait_until 10 grep -q '^agent_tid=' /tmp/agent.out || fail "agent did not start"
ltid=$(sed -n 's/^launcher_tid=//p' /tmp/decode.out | head -n 1)
atid=$(sed -n 's/^agent_tid=//p' /tmp/agent.out | head -n 1)
log "decode launcher $ltid, agent loop $atid"
sleep 2
scx_express ps | grep -E "^ *(TID|$ltid|$atid) " || true

log "stress-ng --aggressive -M -c $N -f $N --affinity-pin --timeout ${SOAK_SECS}s"
stress-ng --aggressive -M -c "$N" -f "$N" --affinity-pin --timeout "${SOAK_SECS}s" \
    >/tmp/stress.log 2>&1 &
stress=$!

l0=$(thread_cputime "$ltid")
g0=$(thread_cputime "$atid")
start=$(uptime_cs)
while kill -0 "$stress" 2>/dev/null; do
    sleep "$INTERVAL"
    kill -0 "$stress" 2>/dev/null || break
    t=$((($(uptime_cs) - start) / 100))
    l1=$(thread_cputime "$ltid")
    g1=$(thread_cputime "$atid")
    log "t=${t}s: launcher +$((l1 - l0)) ticks, agent loop +$((g1 - g0)) ticks"
    guarded_ok "t=${t}s"
    progressed "t=${t}s" "decode launcher" "$l0" "$l1" "$dec"
    progressed "t=${t}s" "agent loop" "$g0" "$g1" "$agt"
    l0=$l1 g0=$g1
    [ "$t" -le $((SOAK_SECS + 120)) ] || fail_logs "stress-ng still runs ${t}s after a ${SOAK_SECS}s timeout"
done
wait "$stress"
rc=$?
grep -E 'metrc|info|fail|error' /tmp/stress.log | tail -n 8
[ "$rc" = 0 ] || fail_logs "stress-ng exited $rc"
echo "ok: stress-ng --aggressive ran ${SOAK_SECS}s and succeeded"

wait "$dec" || fail_logs "decode exited $?"
wait "$agt" || fail_logs "agent exited $?"
tokens=$(sed -n 's/^tokens=//p' /tmp/decode.out)
steps=$(sed -n 's/^steps=//p' /tmp/agent.out)
log "decode: tokens=$tokens tok/s=$(sed -n 's/^tok_per_s=//p' /tmp/decode.out) p99_us=$(sed -n 's/^p99_us=//p' /tmp/decode.out)"
log "agent: steps=$steps steps/s=$(sed -n 's/^steps_per_s=//p' /tmp/agent.out) tail_p99_us=$(sed -n 's/^tail_p99_us=//p' /tmp/agent.out)"
[ "${tokens:-0}" -ge "$SOAK_SECS" ] || fail_logs "decode did only ${tokens:-0} tokens in ${run_s}s"
[ "${steps:-0}" -ge "$SOAK_SECS" ] || fail_logs "agent did only ${steps:-0} steps in ${run_s}s"
echo "ok: the stand-ins made progress (decode $tokens tokens, agent $steps steps)"

guarded_ok "end"
echo "ok: no ejection, no stall, scheduler attached and alive after ${SOAK_SECS}s"
# The last interval: 4 [fair] lines and 3 per class (src/stats.rs).
grep -E '^\[' /tmp/scx.log | tail -n 10

stop_scx
