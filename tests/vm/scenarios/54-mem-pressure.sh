#!/bin/sh
# Memory pressure. The scheduler runs from an ext2 disk (so its code pages
# are file pages that reclaim could evict, as on a real host) in
# fair.mode = "userspace", where its main thread decides for every fair
# task; stress-ng --vm fills the guest's memory (no swap, so reclaim takes
# file pages) for 20 s (two periods of the 10 s watchdog, guest-lib.sh)
# while the decode (gpu) and agent stand-ins run.
# Reclaim must have run (pgsteal grew), or the test shows nothing; a hog
# run from the same disk is a control whose major faults are logged (its
# few hot code pages are evicted only now and then). The scheduler locked
# its memory (VmLck) and is exempt from the OOM killer
# (oom_score_adj -1000), so it takes no major fault of its own. Every 5 s:
# no ejection, no stall or sched_ext error in dmesg, both stand-ins got CPU
# time. At the end the scheduler is alive and SIGINT detaches cleanly.
#
# Sizing the load. kswapd wakes only when free memory falls below the low
# watermark and stops once it is back above the high one; with THP on, the
# kernel raises min_free_kbytes to 44 MiB on this 1 GiB guest, so the
# watermarks (sums over the zones of /proc/zoneinfo) are about 54 MB (low)
# and 66 MB (high). Free memory is MemFree plus the pages cached on the
# per-CPU free lists, which MemFree leaves out: up to 52 MB here (zoneinfo's
# pageset "count:"). stress-ng 0.15's --vm-bytes 95% means 95% of MemFree
# (_SC_AVPHYS_PAGES, not MemTotal) shared by all the workers: of ~690 MB it
# left ~35 MB plus the per-CPU pages free, so whether free memory fell
# below the low watermark depended on how full those lists were (4203
# pages reclaimed in one boot, none in one CI run). MemAvailable - 24 MiB
# was worse: MemAvailable subtracts the high watermark but adds half the
# file cache back, so that load left more than the low watermark free and
# nothing was reclaimed. So the load is MemFree + per-CPU pages - high
# watermark + 32 MiB, mapped populated (--vm-populate: resident at once,
# whatever the speed of the vm methods under TCG): free memory falls
# 32 MiB below the high watermark (~20 MB below the low one) and kswapd
# has to evict ~8000 pages or more (10090 to 11625 in five boots) of the
# 64 MiB of clean cached file pages to bring it back; anonymous memory
# cannot be reclaimed without swap, so the load itself stays resident.
# vmtest: smp=2 mem=1G timeout=300 disk=256M bins=target/release/scx_express,/usr/bin/stress-ng
# vmtest: files=workloads/build:/opt/w
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh

SECS=20
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
# Pages reclaimed: every reclaimed page is counted once by who reclaimed it
# (pgsteal_kswapd, _direct, ...) and once more by its type (pgsteal_anon,
# _file), so sum only the former.
reclaimed() { vmstat_sum '^pgsteal_(kswapd|direct|khugepaged|proactive)$'; }
meminfo_kb() { awk -v k="$1:" '$1 == k { print $2 }' /proc/meminfo; }
# mem_diag: the numbers that show whether reclaim ran, and who did it.
mem_diag() {
    log "meminfo: $(awk '$1 ~ /^(MemFree|MemAvailable|Inactive\(file\)|Active\(file\)|AnonPages|Mlocked):$/ { printf "%s %s ", $1, $2 }' /proc/meminfo)kB; vmstat: $(awk '$1 ~ /^(pgscan|pgsteal|allocstall|oom_kill)/ && $2 > 0 { printf "%s %s ", $1, $2 }' /proc/vmstat)"
}

start_loaded /tmp/scx.log 'mode = "userspace"'
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
# The load (see the header), from numbers read just before it starts:
# free memory (MemFree and the per-CPU lists' pages of 4 KiB) above the
# zones' high watermarks, plus 32 MiB that must come out of the cache.
high_kb=$(awk '$1 == "high" { s += $2 } END { print s * 4 }' /proc/zoneinfo)
pcp_kb=$(awk '$1 == "count:" { s += $2 } END { print s * 4 }' /proc/zoneinfo)
free_kb=$(meminfo_kb MemFree)
load_kb=$((free_kb + pcp_kb - high_kb + 32768))
[ "$high_kb" -gt 0 ] && [ "$load_kb" -gt 65536 ] || fail "cannot size the load: MemFree $free_kb kB, high watermark $high_kb kB"
mem_diag
f0=$(majflt "$SCX_PID") c0=$(majflt "$control") r0=$(reclaimed)
stress-ng --vm 2 --vm-bytes "${load_kb}k" --vm-populate --vm-keep --timeout "${SECS}s" >/tmp/stress.log 2>&1 &
stress=$!
log "stress-ng --vm 2 --vm-bytes ${load_kb}k for ${SECS}s: MemFree $free_kb kB + per-cpu lists $pcp_kb kB - high watermark $high_kb kB + 32 MiB"
while kill -0 "$stress" 2>/dev/null; do
    sleep 5
    kill -0 "$stress" 2>/dev/null || break
    mem_diag
    log "reclaimed $(($(reclaimed) - r0)) pages, scx majflt $(($(majflt "$SCX_PID") - f0)), control majflt $(($(majflt "$control") - c0))"
    guarded_ok "pressure"
    tracked_progressed "pressure"
done
wait "$stress"
log "stress-ng exited $?: $(grep -E 'successful|fail' /tmp/stress.log | tail -n 2 | tr '\n' ' ')"
f1=$(majflt "$SCX_PID") c1=$(majflt "$control") r1=$(reclaimed)
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
