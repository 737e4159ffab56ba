#!/bin/sh
# CPU hotplug: one restart per event, nothing stalls. scx_express leaves
# out ops.cpu_online/cpu_offline (staying attached through hotplug hung
# the kernel: src/bpf/main.bpf.c and docs/operations.md say why), so the
# kernel ends it on each hotplug event with a restart request and the
# daemon re-attaches in the same process. Under cpu4x load (stress-ng
# --cpu 4 per vCPU), with the decode (gpu) and agent stand-ins running and
# a hog pinned to CPU 1, CPU 1 goes offline and back online twice. After
# each event: the kernel saw it (hotplug_seq moved), the daemon attached
# again exactly once (enable_seq one up, the same process, ops express*,
# its log says it re-attached), the kernel's only sched_ext disable lines
# are the events' own ("unregistered from the main kernel"), with no stall
# or sched_ext error, and every stand-in, the hogs and the pinned hog got
# CPU time since the last check (the pinned hog too while its CPU is
# offline: the kernel moved it; it is pinned again after each round).
# CPU 1 runs tasks again once back. SIGINT then detaches with exit code 0.
# vmtest: smp=2 timeout=300 bins=target/release/scx_express,/usr/bin/stress-ng
# vmtest: files=workloads/build:/opt/w tcg=single
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh

CPU1=/sys/devices/system/cpu/cpu1/online
[ -w "$CPU1" ] || fail "$CPU1 is not writable: no CPU hotplug in this kernel"
hotplug_seq() { cat "$SCX_SYSFS/hotplug_seq"; }
events=0

# guarded_ok's kernel lines of trouble, but for the sched_ext disable each
# event causes: restarts_ok counts those instead.
STALL_ERE='runnable task stall|sched_ext: .*error|rcu: .*detected stall|self-detected stall'

# restarts_ok WHEN: one sched_ext disable per event so far, each a hotplug
# restart, and as many re-attaches in the daemon's log.
restarts_ok() {
    n=$(dmesg | grep -cE 'sched_ext: .*disabled')
    h=$(dmesg | grep -cE 'sched_ext: .*disabled \(unregistered from the main kernel\)')
    [ "$n" = "$events" ] && [ "$h" = "$events" ] ||
        fail_logs "$1: $n sched_ext disables ($h of them hotplug restarts) for $events events"
    r=$(grep -c 'asked for a restart; re-attaching' "$SCX_LOG")
    [ "$r" = "$events" ] || fail_logs "$1: the daemon re-attached $r times for $events events"
}

echo "$AGENT_RULE_TOML" >/tmp/scx.toml
start_guarded /tmp/scx.log --config /tmp/scx.toml

start_standins 150
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
    es=$(enable_seq)
    log "cpu1 going $2 (hotplug_seq $hs, enable_seq $es)"
    echo "$1" >"$CPU1" &
    w=$!
    wait_until 60 sh -c "! kill -0 $w 2>/dev/null" ||
        fail_logs "writing $1 to $CPU1 did not finish in 60 s"
    wait "$w" || fail_logs "cannot write $1 to $CPU1"
    [ "$(cat "$CPU1")" = "$1" ] || fail_logs "cpu1/online reads $(cat "$CPU1"), not $1"
    [ "$(hotplug_seq)" -gt "$hs" ] || fail_logs "hotplug_seq did not move: the kernel saw no event"
    events=$((events + 1))
    wait_until 60 sh -c "[ \$(cat $SCX_SYSFS/enable_seq) -gt $es ] && grep -qx enabled $SCX_SYSFS/state" ||
        fail_logs "cpu1 $2: scx_express did not attach again within 60 s"
    # Room for a second restart to show: the daemon sees one within a
    # second and re-attaches in one or two more (docs/operations.md).
    sleep 3
    [ "$(enable_seq)" = $((es + 1)) ] ||
        fail_logs "cpu1 $2: enable_seq $es -> $(enable_seq): more than one restart for one event"
    # From here on, the new attachment is the one guarded_ok holds to.
    SCX_SEQ0=$(enable_seq)
    guarded_ok "cpu1 $2"
    restarts_ok "cpu1 $2"
    tracked_progressed "cpu1 $2"
    echo "ok: cpu1 $2: re-attached once (enable_seq $(enable_seq)), no stall, every task progressed"
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
restarts_ok "end"
stop_scx
