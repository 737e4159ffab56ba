#!/bin/sh
# RT tasks hog the CPUs. A SCHED_FIFO busy loop runs for 20 s on every CPU
# but the last, with RT throttling off (sched_rt_runtime_us = -1), so
# nothing but the kernel's ext deadline server (kernel/sched/ext.c,
# ext_server: on each CPU, sched_ext tasks get `runtime` ns every `period`
# ns even while RT tasks would take it all; 50 ms per 1 s by default, read
# from /sys/kernel/debug/sched/ext_server/) gives sched_ext tasks on those
# CPUs any time. Beside them: a hog pinned to each RT-hogged CPU (it can go
# nowhere else), the decode (gpu) and agent stand-ins and two unpinned
# hogs; this shell stays on the last CPU so its checks run on time. Every
# 5 s of the window: no ejection, no stall or sched_ext error in dmesg, and
# every task, the pinned hogs included, got CPU time. Over the window, on
# each RT-held CPU, the time the RT hog waited (what the CPU gave everyone
# else) is at least half of what the server promises (runtime/period of
# the window), and the pinned hog ran for at least a third of it. SIGINT
# then detaches cleanly.
# Why not the pinned hog against the promise itself: the server's 5% also
# pays for the CPU's kworkers and, under TCG, for interrupt time, so the
# pinned hog runs for about two thirds of the granted time, 3-4% of the
# window; a check at half of 5%, in ticks read one process at a time,
# failed now and then (docs/operations.md, "What the hostile-conditions
# tests found"). What matters is whom the granted time goes to: when it
# went to tasks from the shared DSQ (before express_cpu_release and the
# RT-aware dispatch), the pinned hog got a small fraction of it.
# On 7.2.13 only the boot CPU has live servers: CPUs onlined later (the
# guest boots with maxcpus=1) read runtime 0 for both the fair and the ext
# server, and a sched_ext task pinned under an RT hog there gets nothing.
# So the RT hogs go on CPUs 0..N-2 and the test needs a live server there.
# vmtest: smp=2 timeout=300 bins=target/release/scx_express,/usr/bin/chrt
# vmtest: files=workloads/build:/opt/w
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh

RT_SECS=20
N=$VMTEST_SMP
[ "$N" -ge 2 ] || fail "needs 2 or more vCPUs"
SRV=/sys/kernel/debug/sched/ext_server
[ -r "$SRV/cpu0/runtime" ] || fail "no ext deadline server in this kernel ($SRV)"
LAST=$((N - 1))

echo "$AGENT_RULE_TOML" >/tmp/scx.toml
start_guarded /tmp/scx.log --config /tmp/scx.toml
for f in "$SRV"/cpu*/runtime; do
    c=${f%/runtime}
    log "ext_server ${c##*/}: runtime $(cat "$f") ns per period $(cat "$c/period") ns"
done
runtime=$(cat "$SRV/cpu0/runtime")
period=$(cat "$SRV/cpu0/period")
cpu=0
while [ "$cpu" -lt "$LAST" ]; do
    [ "$(cat "$SRV/cpu$cpu/runtime")" = "$runtime" ] && [ "$(cat "$SRV/cpu$cpu/period")" = "$period" ] ||
        fail "cpu$cpu's ext server differs from cpu0's: the guarantee below would be wrong"
    cpu=$((cpu + 1))
done
[ "$runtime" -gt 0 ] && [ "$period" -gt 0 ] || fail "the ext deadline server is off on cpu0"
start_standins $((RT_SECS + 30))
for i in 1 2; do
    /opt/w/hog --duration $((RT_SECS + 30)) >/dev/null 2>&1 &
    track "hog$i" $!
done
cpu=0
while [ "$cpu" -lt "$LAST" ]; do
    /opt/w/hog --cpu "$cpu" --duration $((RT_SECS + 30)) >"/tmp/pinned$cpu.out" 2>&1 &
    track "pinned_cpu$cpu" $!
    eval "pinned$cpu=$!"
    cpu=$((cpu + 1))
done
sleep 3
tracked_progressed "before the RT hogs"

# Only now (its children so far run anywhere): this shell to the last CPU.
taskset -p $((1 << LAST)) $$ >/dev/null || fail "cannot move this shell to cpu$LAST"
rt_runtime=$(cat /proc/sys/kernel/sched_rt_runtime_us)
echo -1 >/proc/sys/kernel/sched_rt_runtime_us || fail "cannot turn RT throttling off"
log "RT throttling off (sched_rt_runtime_us was $rt_runtime of $(cat /proc/sys/kernel/sched_rt_period_us))"
cpu=0 rts=''
while [ "$cpu" -lt "$LAST" ]; do
    chrt -f 50 /opt/w/hog --cpu "$cpu" --duration "$RT_SECS" >"/tmp/rt$cpu.out" 2>&1 &
    rts="$rts $!"
    cpu=$((cpu + 1))
done
sleep 1 # chrt sets the policy, then execs the hog
for p in $rts; do
    chrt -p "$p" | grep -q SCHED_FIFO || fail "RT hog $p is not SCHED_FIFO: $(chrt -p "$p")"
done
log "SCHED_FIFO busy loops on CPUs 0-$((LAST - 1)) for ${RT_SECS}s"
# rt_running: every RT hog still runs.
rt_running() {
    for p in $rts; do alive "$p" || return 1; done
}
# sample VAR: the uptime (ms) into VAR_t; from /proc/PID/schedstat, each
# pinned hog's run time (ms) into VAR_<cpu>, and how long its CPU's RT hog
# waited (ms) into VAR_rt<cpu>: the RT hog is always runnable, so its wait
# is the time its CPU gave everyone else, on the scheduler's own clock
# (against the uptime clock, its run time drifted by a few % of the window
# under TCG, the size of the server's share). One awk reads them all, so
# that they agree (this shell's CPU is crowded: read one by one, the
# readings spread over up to a second). Fails, setting nothing, if a task
# has gone.
sample() {
    _var=$1 _files=/proc/uptime _n=1 cpu=0
    for p in $rts; do
        eval "_files=\"\$_files /proc/\$pinned$cpu/schedstat /proc/$p/schedstat\""
        _n=$((_n + 2)) cpu=$((cpu + 1))
    done
    # shellcheck disable=SC2086 # the file list splits on purpose
    _vals=$(awk 'FNR == 1 { f++; printf "%d ", (f == 1 ? $1 * 1000 : (f % 2 ? $2 : $1) / 1e6) }' \
        $_files 2>/dev/null) || return 1
    # shellcheck disable=SC2086
    set -- $_vals
    [ $# -eq "$_n" ] || return 1
    eval "${_var}_t=$1"
    shift
    cpu=0
    while [ $# -ge 2 ]; do
        eval "${_var}_$cpu=$1 ${_var}_rt$cpu=$2"
        shift 2
        cpu=$((cpu + 1))
    done
}
# The guarantee is checked over the part of the window that samples
# taken while every RT hog still ran cover.
sample s0 || fail "cannot read the hogs' run times"
while rt_running; do
    sleep 5
    if rt_running; then
        sample s1 || true
    fi
    guarded_ok "under RT"
    tracked_progressed "under RT"
done
for p in $rts; do wait "$p" || fail "an RT hog exited $?"; done
echo "$rt_runtime" >/proc/sys/kernel/sched_rt_runtime_us
echo "ok: no ejection, no stall, every task ran while RT hogs held CPUs 0-$((LAST - 1))"

# What the server promises over the sampled window, in ms.
[ -n "${s1_t:-}" ] || fail "no sample was taken under the RT hogs"
# shellcheck disable=SC2154 # sample sets s0_t and s1_t through eval
span=$((s1_t - s0_t))
promised=$((span * runtime / period))
[ "$promised" -ge 100 ] || fail "the sampled window (${span} ms) is too short to check the guarantee"
cpu=0
while [ "$cpu" -lt "$LAST" ]; do
    eval "got=\$((s1_$cpu - s0_$cpu)) granted=\$((s1_rt$cpu - s0_rt$cpu))"
    # shellcheck disable=SC2154 # got and granted: set by the eval above
    log "cpu$cpu: in ${span} ms under the RT hog, the RT hog waited $granted ms (the server promises sched_ext $promised); the pinned hog ran $got ms"
    [ "$granted" -ge $((promised / 2)) ] ||
        fail_logs "cpu$cpu: the RT hog left sched_ext only $granted ms of ${span}, under half the server's $promised"
    [ "$got" -ge $((granted / 3)) ] ||
        fail_logs "the hog pinned to cpu$cpu ran $got of the $granted ms its CPU's RT hog left: under a third, so the rest went elsewhere"
    cpu=$((cpu + 1))
done
echo "ok: the ext deadline server's time on each RT-held CPU went mostly to the hog pinned there"

finish_standins
guarded_ok "end"
stop_scx
