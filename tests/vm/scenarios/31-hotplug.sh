#!/bin/sh
# CPU hotplug without an ejection. scx_express implements ops.cpu_online
# and ops.cpu_offline (src/bpf/main.bpf.c), so the kernel no longer ejects
# it on a hotplug event. Under cpu4x load (stress-ng --cpu 4 per vCPU),
# with the decode (gpu) and agent stand-ins running and a hog pinned to
# CPU 1 (so a task waits in CPU 1's own fair DSQ when it goes down), CPU 1
# goes offline and back online twice. After each event: the kernel saw it
# (hotplug_seq moved), the scheduler is the same attachment (enable_seq
# unchanged, ops express*, no stall or sched_ext error in dmesg), and
# every stand-in, the hogs and the pinned hog got CPU time since the last
# check (the pinned hog too while its CPU is offline: the kernel must have
# moved it, which it can only do once our offline callback hands it over;
# it is pinned again after each round).
# CPU 1 runs tasks again once back. SIGINT then detaches with exit code 0.
# vmtest: smp=2 timeout=300 bins=target/release/scx_express,/usr/bin/stress-ng
# vmtest: files=workloads/build:/opt/w tcg=single
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh

CPU1=/sys/devices/system/cpu/cpu1/online
[ -w "$CPU1" ] || fail "$CPU1 is not writable: no CPU hotplug in this kernel"
hotplug_seq() { cat "$SCX_SYSFS/hotplug_seq"; }

echo "$AGENT_RULE_TOML" >/tmp/scx.toml
start_guarded /tmp/scx.log --config /tmp/scx.toml

start_standins 60
stress-ng --cpu $((4 * VMTEST_SMP)) --timeout 150s >/tmp/stress.log 2>&1 &
stress=$!
/opt/w/hog --cpu 1 --duration 150 >/tmp/pinned.out 2>&1 &
pinned=$!
track pinned_hog "$pinned"
sleep 5
tracked_progressed "before hotplug"
guarded_ok "before hotplug"

# hotplug VALUE WHAT: write VALUE to cpu1/online (in the background: a
# hotplug that cannot finish must fail the test, not hang it), then check.
hotplug() {
    hs=$(hotplug_seq)
    log "cpu1 going $2 (hotplug_seq $hs)"
    echo "$1" >"$CPU1" &
    w=$!
    wait_until 60 sh -c "! kill -0 $w 2>/dev/null" ||
        fail_logs "writing $1 to $CPU1 did not finish in 60 s"
    wait "$w" || fail_logs "cannot write $1 to $CPU1"
    [ "$(cat "$CPU1")" = "$1" ] || fail_logs "cpu1/online reads $(cat "$CPU1"), not $1"
    [ "$(hotplug_seq)" -gt "$hs" ] || fail_logs "hotplug_seq did not move: the kernel saw no event"
    sleep 6
    guarded_ok "cpu1 $2"
    tracked_progressed "cpu1 $2"
    echo "ok: cpu1 $2: still attached (enable_seq $SCX_SEQ0), no stall, every task progressed"
}

for round in 1 2; do
    log "round $round"
    hotplug 0 offline
    hotplug 1 online
    # Going offline broke the pinned hog's affinity: pin it again.
    taskset -p 2 "$pinned" >/dev/null || fail_logs "cannot pin the hog to cpu1 again"
done

# CPU 1 runs tasks again: a task pinned there now gets CPU time.
/opt/w/hog --cpu 1 --duration 3 >/tmp/pinned2.out 2>&1 || fail_logs "a hog pinned to cpu1 failed"
ms=$(sed -n 's/^cpu_ms=//p' /tmp/pinned2.out)
log "hog pinned to cpu1 after the events: cpu_ms=$ms"
[ "${ms%.*}" -gt 0 ] || fail_logs "a hog pinned to cpu1 got no CPU after it came back"
echo "ok: cpu1 is scheduled again after coming back"

finish_standins
untrack pinned_hog
kill "$stress" "$pinned"
guarded_ok "end"
stop_scx
