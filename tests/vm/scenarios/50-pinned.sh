#!/bin/sh
# Many tasks pinned to one CPU. With `taskset`, the decode (gpu) and agent
# stand-ins and 8 hogs are all pinned to CPU 1, while 2 unpinned hogs run
# anywhere. Pinned tasks wait in CPU 1's own fair DSQ and compete there
# with the shared DSQ's tasks, which is where schedulers starve them. For
# 20 s (two periods of the 10 s watchdog, guest-lib.sh), every 5 s: no
# ejection (enable_seq unchanged, ops express*), no stall or sched_ext
# error in dmesg, and every one of the 12 tasks got CPU time since the
# last check.
# The stand-ins finish their run and SIGINT detaches cleanly.
# vmtest: smp=2 timeout=300 bins=target/release/scx_express
# vmtest: files=workloads/build:/opt/w
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh

SECS=20
start_loaded /tmp/scx.log
start_standins $((SECS + 20)) "taskset 2"
for t in "$LTID" "$ATID"; do
    taskset -p "$t" | grep -q 'mask: 2$' || fail "thread $t is not pinned to cpu1: $(taskset -p "$t")"
done
for i in 1 2 3 4 5 6 7 8; do
    /opt/w/hog --cpu 1 --duration $((SECS + 20)) >/dev/null 2>&1 &
    track "pinned$i" $!
done
for i in 1 2; do
    /opt/w/hog --duration $((SECS + 20)) >/dev/null 2>&1 &
    track "free$i" $!
done
log "decode, agent and 8 hogs pinned to cpu1; 2 unpinned hogs"

watch_guarded "$SECS" 5
echo "ok: ${SECS}s with 10 tasks pinned to cpu1: no ejection, no stall, all progressed"
finish_standins
guarded_ok "end"
stop_scx
