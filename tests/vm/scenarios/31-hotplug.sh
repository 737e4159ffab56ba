#!/bin/sh
# CPU hotplug: scx_express has no cpu_online/cpu_offline callbacks, so the
# kernel ejects it on every hotplug event and asks for a restart. Twice,
# CPU 1 goes offline and comes back online under a light load; after each
# of the four events scx_express must re-attach by itself: the same process
# stays alive, sched_ext is enabled again with ops express*, enable_seq has
# moved past the previous value (a real re-attach, not an ejection we
# missed), its pins are back so `ps` works, and no stall is reported. The
# CPU is actually used again when it is back online. SIGINT then detaches
# it with exit code 0.
# vmtest: smp=2 timeout=300 bins=target/release/scx_express,workloads/build/hog tcg=single
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh

CPU1=/sys/devices/system/cpu/cpu1/online
[ -w "$CPU1" ] || fail "$CPU1 is not writable: no CPU hotplug in this kernel"

# reattached SEQ: enabled again, after enable_seq moved past SEQ.
reattached() {
    sched_state_is enabled && [ "$(enable_seq)" -gt "$1" ]
}
fail_with_logs() {
    tail -n 30 /tmp/scx.log
    dmesg | grep -E 'sched_ext|stall|CPU' | tail -n 20
    fail "$@"
}

scx_express >/tmp/scx.log 2>&1 &
scx=$!
wait_sched_state enabled 90 || fail_with_logs "scheduler did not attach"
log "attached: ops $(sched_ops_name), enable_seq $(enable_seq)"

# Some load on every CPU, so the events happen while tasks run everywhere.
hog --duration 600 >/dev/null &
h1=$!
hog --duration 600 >/dev/null &
h2=$!

# hotplug VALUE WHAT: write VALUE to cpu1/online, then wait for the
# re-attach and check everything.
hotplug() {
    seq=$(enable_seq)
    log "cpu1 $2 (enable_seq $seq)"
    echo "$1" >"$CPU1" || fail_with_logs "cannot write $1 to $CPU1"
    [ "$(cat "$CPU1")" = "$1" ] || fail_with_logs "cpu1/online reads $(cat "$CPU1"), not $1"
    if ! wait_until 120 reattached "$seq"; then
        fail_with_logs "scx_express did not re-attach within 120 s of cpu1 going $2 (state $(sched_state), enable_seq $(enable_seq))"
    fi
    log "re-attached after cpu1 $2: enable_seq $(enable_seq)"
    kill -0 "$scx" || fail_with_logs "scx_express exited after cpu1 went $2"
    ops=$(sched_ops_name)
    case "$ops" in
    express*) ;;
    *) fail_with_logs "after cpu1 went $2 the ops are '$ops', not express*" ;;
    esac
    # The pins come back with the new attach (ps opens them).
    wait_until 10 sh -c 'scx_express ps >/dev/null 2>&1' ||
        fail_with_logs "ps fails after the re-attach (pins not restored?)"
    if dmesg_has 'runnable task stall'; then
        fail_with_logs "the kernel reported a stall around cpu1 going $2"
    fi
    echo "ok: cpu1 $2: scx_express re-attached (pid $scx, ops $ops)"
}

for round in 1 2; do
    log "round $round"
    hotplug 0 offline
    hotplug 1 online
done

# CPU 1 runs tasks again: a hog pinned there gets CPU time.
hog --cpu 1 --duration 3 >/tmp/pinned.out 2>&1 || fail_with_logs "a hog pinned to cpu1 failed"
ms=$(sed -n 's/^cpu_ms=//p' /tmp/pinned.out)
log "hog pinned to cpu1: cpu_ms=$ms"
[ "${ms%.*}" -ge 1000 ] || fail_with_logs "a hog pinned to cpu1 got only ${ms} ms of CPU in 3 s"
echo "ok: cpu1 is scheduled again after coming back"

grep -c 're-attaching' /tmp/scx.log | while read -r n; do log "scx_express logged $n restart(s)"; done
kill "$h1" "$h2"
SCX_PID=$scx
stop_scx
tail -n 5 /tmp/scx.log
