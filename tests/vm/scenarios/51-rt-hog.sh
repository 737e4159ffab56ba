#!/bin/sh
# RT tasks hog the CPUs. A SCHED_FIFO busy loop runs for 20 s on every CPU
# but CPU 0, with RT throttling off (sched_rt_runtime_us = -1), so nothing
# but the kernel's ext deadline server (kernel/sched/ext.c, ext_server: on
# each CPU, sched_ext tasks get `runtime` ns every `period` ns even while
# RT tasks would take it all; 50 ms per 1 s by default, read from
# /sys/kernel/debug/sched/ext_server/) gives sched_ext tasks on those CPUs
# any time. Beside them: a hog pinned to each RT-hogged CPU (it can go
# nowhere else), the decode (gpu) and agent stand-ins and two unpinned hogs.
# Every 5 s of the window, and at its end: no ejection, no stall or
# sched_ext error in dmesg, and every task, the pinned hogs included, got
# CPU time; over the window each pinned hog got at least half of what the
# server guarantees (runtime/period of 20 s). SIGINT then detaches cleanly.
# vmtest: smp=2 timeout=300 bins=target/release/scx_express,/usr/bin/chrt
# vmtest: files=workloads/build:/opt/w
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh

RT_SECS=20
N=$VMTEST_SMP
[ "$N" -ge 2 ] || fail "needs 2 or more vCPUs"
SRV=/sys/kernel/debug/sched/ext_server
[ -r "$SRV/cpu1/runtime" ] || fail "no ext deadline server in this kernel ($SRV)"

echo "$AGENT_RULE_TOML" >/tmp/scx.toml
start_guarded /tmp/scx.log --config /tmp/scx.toml
# The server's parameters are set while a scheduler is attached.
runtime=$(cat "$SRV/cpu1/runtime")
period=$(cat "$SRV/cpu1/period")
log "ext_server on cpu1: runtime ${runtime} ns per period ${period} ns"
[ "$runtime" -gt 0 ] && [ "$period" -gt 0 ] || fail "the ext deadline server is off on cpu1"
start_standins $((RT_SECS + 30))
for i in 1 2; do
    /opt/w/hog --duration $((RT_SECS + 30)) >/dev/null 2>&1 &
    track "hog$i" $!
done
cpu=1
while [ "$cpu" -lt "$N" ]; do
    /opt/w/hog --cpu "$cpu" --duration $((RT_SECS + 30)) >"/tmp/pinned$cpu.out" 2>&1 &
    track "pinned_cpu$cpu" $!
    eval "pinned$cpu=$!"
    cpu=$((cpu + 1))
done
sleep 3
tracked_progressed "before the RT hogs"

rt_runtime=$(cat /proc/sys/kernel/sched_rt_runtime_us)
echo -1 >/proc/sys/kernel/sched_rt_runtime_us || fail "cannot turn RT throttling off"
log "RT throttling off (sched_rt_runtime_us was $rt_runtime of $(cat /proc/sys/kernel/sched_rt_period_us))"
cpu=1 rts=''
while [ "$cpu" -lt "$N" ]; do
    eval "p0_$cpu=\$(thread_cputime \$pinned$cpu)"
    chrt -f 50 /opt/w/hog --cpu "$cpu" --duration "$RT_SECS" >"/tmp/rt$cpu.out" 2>&1 &
    rts="$rts $!"
    cpu=$((cpu + 1))
done
sleep 1
for p in $rts; do
    chrt -p "$p" | grep -q SCHED_FIFO || fail "RT hog $p is not SCHED_FIFO: $(chrt -p "$p")"
done
log "SCHED_FIFO busy loops on CPUs 1-$((N - 1)) for ${RT_SECS}s"
t=0
while [ "$t" -lt "$RT_SECS" ]; do
    sleep 5
    t=$((t + 5))
    guarded_ok "RT t=${t}s"
    tracked_progressed "RT t=${t}s"
done
for p in $rts; do wait "$p" || fail "an RT hog exited $?"; done
echo "$rt_runtime" >/proc/sys/kernel/sched_rt_runtime_us
echo "ok: no ejection, no stall, every task ran while RT hogs held CPUs 1-$((N - 1))"

# What the server guarantees: runtime/period of the window, in ticks.
want=$((RT_SECS * VMTEST_CLK_TCK * runtime / period / 2))
cpu=1
while [ "$cpu" -lt "$N" ]; do
    eval "got=\$((\$(thread_cputime \$pinned$cpu) - \$p0_$cpu))"
    log "cpu$cpu: pinned hog got $got ticks in the ${RT_SECS}s window (RT hog: $(sed -n 's/^cpu_ms=//p' /tmp/rt$cpu.out) ms)"
    [ "$got" -ge "$want" ] ||
        fail_logs "the hog pinned to cpu$cpu got $got ticks under the RT hog, under half the server's guarantee ($want)"
    cpu=$((cpu + 1))
done
echo "ok: the ext deadline server kept the pinned hogs running (at least $want ticks each)"

finish_standins
guarded_ok "end"
stop_scx
