#!/bin/sh
# Memory pressure. The scheduler runs from an ext2 disk (so its code pages
# are file pages that reclaim could evict, as on a real host) in
# fair.mode = "userspace", where its main thread decides for every fair
# task; stress-ng --vm fills the guest's memory (no swap, so reclaim takes
# file pages) for 40 s while the decode (gpu) and agent stand-ins run.
# Reclaim must have run (pgsteal grew), or the test shows nothing; a hog
# run from the same disk is a control whose major faults are logged (its
# few hot code pages are evicted only now and then). The scheduler locked
# its memory (VmLck) and is exempt from the OOM killer
# (oom_score_adj -1000), so it takes no major fault of its own. Every 10 s:
# no ejection, no stall or sched_ext error in dmesg, both stand-ins got CPU
# time. At the end the scheduler is alive and SIGINT detaches cleanly.
# vmtest: smp=2 mem=1G timeout=300 disk=256M bins=target/release/scx_express,/usr/bin/stress-ng
# vmtest: files=workloads/build:/opt/w
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh

SECS=40
mke2fs -q "$VMTEST_DISK" >/dev/null || fail "mke2fs failed"
mkdir -p /mnt && mount -t ext2 "$VMTEST_DISK" /mnt || fail "cannot mount the scratch disk"
mkdir /mnt/bin
cp /bin/scx_express /opt/w/hog /mnt/bin/ || fail "cannot copy the binaries to the disk"
sync
echo 3 >/proc/sys/vm/drop_caches
PATH=/mnt/bin:$PATH

# majflt PID: major page faults of a process (field 12 of /proc/PID/stat).
majflt() { task_stat "$1" | awk '{ print $10 }'; }
vmstat_sum() { awk -v re="$1" '$1 ~ re { s += $2 } END { print s + 0 }' /proc/vmstat; }

printf '%s\n[fair]\nmode = "userspace"\n' "$AGENT_RULE_TOML" >/tmp/scx.toml
start_guarded /tmp/scx.log --config /tmp/scx.toml
log "scx_express: $(readlink "/proc/$SCX_PID/exe"), $(grep VmLck "/proc/$SCX_PID/status" | tr -s ' \t' ' '), oom_score_adj $(cat "/proc/$SCX_PID/oom_score_adj")"
locked_kb=$(awk '/^VmLck:/ { print $2 }' "/proc/$SCX_PID/status")
[ "${locked_kb:-0}" -gt 0 ] || fail_logs "scx_express locked no memory (VmLck 0)"
[ "$(cat "/proc/$SCX_PID/oom_score_adj")" = -1000 ] || fail_logs "scx_express is not exempt from the OOM killer"
start_standins $((SECS + 25))
/mnt/bin/hog --duration $((SECS + 25)) >/dev/null 2>&1 &
control=$!
track control_hog "$control"
sleep 2

# Clean file pages for reclaim to take (64 MiB, on the disk, cached):
# without them it found next to nothing to evict (a few hundred pages, and
# none in one CI run), and the test showed nothing.
dd if=/dev/zero of=/mnt/cache.dat bs=1M count=64 2>/dev/null && sync || fail "cannot fill the page cache"
cat /mnt/cache.dat >/dev/null
f0=$(majflt "$SCX_PID") c0=$(majflt "$control") r0=$(vmstat_sum '^pgsteal_')
stress-ng --vm 2 --vm-bytes 95% --vm-keep --timeout "${SECS}s" >/tmp/stress.log 2>&1 &
stress=$!
log "stress-ng --vm 2 --vm-bytes 95% for ${SECS}s; MemAvailable $(awk '/^MemAvailable/ { print $2 }' /proc/meminfo) kB"
while kill -0 "$stress" 2>/dev/null; do
    sleep 10
    kill -0 "$stress" 2>/dev/null || break
    log "MemAvailable $(awk '/^MemAvailable/ { print $2 }' /proc/meminfo) kB, scx majflt $(($(majflt "$SCX_PID") - f0)), control majflt $(($(majflt "$control") - c0))"
    guarded_ok "pressure"
    tracked_progressed "pressure"
done
wait "$stress"
log "stress-ng exited $?: $(grep -E 'successful|fail' /tmp/stress.log | tail -n 2 | tr '\n' ' ')"
f1=$(majflt "$SCX_PID") c1=$(majflt "$control") r1=$(vmstat_sum '^pgsteal_')
log "pages reclaimed $((r1 - r0)); major faults: scx_express $((f1 - f0)), control hog $((c1 - c0))"
dmesg | grep -E 'Out of memory|Killed process' | tail -n 3
[ $((r1 - r0)) -gt 0 ] || fail_logs "no page was reclaimed: no real memory pressure, the test shows nothing"
[ "$f1" = "$f0" ] || fail_logs "scx_express took $((f1 - f0)) major faults under memory pressure"
echo "ok: under memory pressure ($((r1 - r0)) pages reclaimed) scx_express took no major fault"
kill -0 "$SCX_PID" || fail_logs "scx_express is gone"
untrack control_hog
kill "$control"
finish_standins
guarded_ok "end"
stop_scx
