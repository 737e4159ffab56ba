#!/bin/sh
# A tight cgroup v2 cpu.max. Four hogs run in a cgroup limited to 10 ms of
# CPU per 100 ms (cpu.max "10000 100000"); the decode (gpu) and agent
# stand-ins run in another cgroup, two hogs in a third, unlimited one. A
# sched_ext scheduler that honours no bandwidth leaves the quota to the
# kernel; throttled tasks must not trip the watchdog nor starve anyone.
# For 20 s (two periods of the 10 s watchdog, guest-lib.sh), every 5 s:
# no ejection, no stall or sched_ext error in dmesg, every stand-in and
# hog (the capped ones too) got CPU time. The capped group's share of the machine is
# logged (not asserted: whether cpu.max binds sched_ext tasks is the
# kernel's and the scheduler's business, and scx_express does not
# implement ops.cgroup_set_bandwidth). SIGINT then detaches cleanly.
# vmtest: smp=2 timeout=300 bins=target/release/scx_express
# vmtest: files=workloads/build:/opt/w
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh

SECS=20
CG=/sys/fs/cgroup
grep -qw cpu "$CG/cgroup.controllers" || fail "no cpu controller in $CG/cgroup.controllers"
echo +cpu >"$CG/cgroup.subtree_control" || fail "cannot enable the cpu controller"
mkdir -p "$CG/capped" "$CG/express" "$CG/free"
echo "10000 100000" >"$CG/capped/cpu.max" || fail "cannot write cpu.max"
log "capped/cpu.max: $(cat "$CG/capped/cpu.max")"

# in_cgroup GROUP CMD...: run CMD in the background inside GROUP.
in_cgroup() {
    _g=$1
    shift
    sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$CG/$_g" "$@" &
}

start_loaded /tmp/scx.log
echo $$ >"$CG/express/cgroup.procs" # the stand-ins start from this shell
start_standins $((SECS + 20))
echo $$ >"$CG/cgroup.procs"
for i in 1 2 3 4; do
    in_cgroup capped /opt/w/hog --duration $((SECS + 20)) >/dev/null 2>&1
    track "capped$i" $!
done
for i in 1 2; do
    in_cgroup free /opt/w/hog --duration $((SECS + 20)) >/dev/null 2>&1
    track "free$i" $!
done
sleep 1
for g in capped express free; do
    log "$g: $(wc -l <"$CG/$g/cgroup.procs") processes"
done
[ "$(wc -l <"$CG/capped/cgroup.procs")" = 4 ] || fail "the capped hogs are not in the capped cgroup"
grep -q "^0::/express$" "/proc/$DEC/cgroup" || fail "decode is not in the express cgroup: $(cat "/proc/$DEC/cgroup")"

usage() { awk '/^usage_usec/ { print $2 }' "$CG/$1/cpu.stat"; }
u0=$(usage capped) s0=$(uptime_cs)
watch_guarded "$SECS" 5
u1=$(usage capped) s1=$(uptime_cs)
log "capped group: $(((u1 - u0) / 10000)) cs of CPU in $((s1 - s0)) cs on $VMTEST_SMP CPUs; nr_throttled $(awk '/^nr_throttled/ { print $2 }' "$CG/capped/cpu.stat")"
echo "ok: ${SECS}s beside a cpu.max-capped cgroup: no ejection, no stall, all progressed"
finish_standins
guarded_ok "end"
stop_scx
