#!/bin/sh
# express.avoid_slow_idle (cpu_quality.bpf.c): an idle CPU that an express
# task waited over 1 ms to start on, with nothing else in the way
# (slow_idle), is passed over by the idle steps (slow_idle_skips) and
# starts no hold (hold_slow_idle) for 100 ms after. Under TCG on a 2-core
# host an idle vCPU is often that slow: a host thread asleep, its CPU
# shared with the other vCPU and QEMU's own threads. The agent stand-in
# (loop and tool server marked agent) runs twice on 2 vCPUs:
# - with the key on: its skips and refused holds come only after slow
#   starts (none without one), and do come when there were slow starts;
# - after a reload that turns it off: none, whatever slow starts there are
#   (the knob is live).
# vmtest: smp=2 timeout=300 bins=target/release/scx_express
# vmtest: files=workloads/build:/opt/w
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh

CFG=/tmp/cfg.toml
printf '[express]\navoid_slow_idle = true\n' >"$CFG"
start_scx /tmp/scx.log --config "$CFG"

SLOW='classes.gpu.slow_idle classes.agent.slow_idle'
SKIPS='classes.gpu.slow_idle_skips classes.agent.slow_idle_skips'
HOLDS='classes.gpu.hold_slow_idle classes.agent.hold_slow_idle'

# run NAME SECS: the agent stand-in for SECS s; counters before it starts
# (no express task runs then, so no slow start is missed) and after.
run() {
    stats_snapshot "/tmp/$1.0"
    agent_once 1 "$2"
    sleep 1 # the daemon refreshes its stats once a second
    stats_snapshot "/tmp/$1.1"
    # shellcheck disable=SC2086 # word lists of keys
    slow=$(snap_delta "/tmp/$1.0" "/tmp/$1.1" $SLOW)
    # shellcheck disable=SC2086
    skips=$(snap_delta "/tmp/$1.0" "/tmp/$1.1" $SKIPS)
    # shellcheck disable=SC2086
    holds=$(snap_delta "/tmp/$1.0" "/tmp/$1.1" $HOLDS)
    avoid=$((skips + holds))
    steps=$(json_num /tmp/agent.out steps)
    echo "$1: $steps steps, $slow slow starts from idle, $skips idle CPUs passed over, $holds holds refused"
}

run on 4
[ "${steps:-0}" -gt 100 ] || fail_logs "the agent made ${steps:-no} steps"
if [ "$slow" -eq 0 ]; then
    [ "$avoid" -eq 0 ] || fail_logs "no slow start from idle, yet $avoid CPUs avoided for one"
    echo "ok: no slow start from idle in this boot, and nothing avoided (the other half is not exercised)"
elif [ "$slow" -ge 2 ]; then
    [ "$avoid" -gt 0 ] || fail_logs "$slow slow starts from idle, none avoided after"
    echo "ok: after $slow slow starts from idle, $avoid CPUs avoided"
else
    echo "ok: one slow start from idle, too few to require an avoidance after it (it may have been the last)"
fi

printf '[express]\navoid_slow_idle = false\n' >"$CFG"
kill -HUP "$SCX_PID"
wait_until 10 grep -q "reloaded $CFG" /tmp/scx.log || fail_logs "reload not logged"
run off 3
[ "$avoid" -eq 0 ] || fail_logs "avoid_slow_idle off, yet $avoid CPUs avoided ($slow slow starts)"
echo "ok: off after a reload: $slow slow starts from idle, none avoided"
stop_scx
