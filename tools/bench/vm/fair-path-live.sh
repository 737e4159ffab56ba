#!/bin/sh
# The fair path stays live while CUDA probes come and go under load, in
# fair.mode = "userspace" (in the default "bpf" mode no task waits for
# userspace, and this has nothing to measure).
#
# The userspace scheduler serves every fair-path task. If its loop blocks in
# the kernel, BPF only rescues each queued task after fair.rescue_ms, so the
# machine keeps running but every wakeup pays that delay. Attaching and
# detaching uprobes waits for RCU/SRCU grace periods, and those grace
# periods need tasks that the blocked loop should schedule.
#
# Load: the soak's stress-ng --aggressive -c N -f N, plus `decode`, whose
# stand-in libcuda.so.1 gets sync probes at once and launch probes attached
# and detached every launch_period_ms (10 s; window 200 ms). For 40 s,
# every second:
# - `scx_express stats --flat`: user_dispatched must grow between samples
#   taken >= 2 s apart (the scheduler loop refreshes it every second); a
#   frozen counter means the loop was stuck for that long;
# - a shell loop of `sleep 0.5` records how late each wakeup is: the worst
#   must stay under 2 s, and at least 20 wakeups must happen (under the
#   same load in this VM: EEVDF 47 wakeups, worst 0.7 s late; scx_express
#   with no probed library 43 wakeups, worst 1.3 s late);
# and the scheduler main thread's state and wchan are sampled (printed as
# a diagnosis, not asserted).
# vmtest: smp=2 timeout=240 bins=target/release/scx_express,/usr/bin/stress-ng
# vmtest: files=workloads/build:/opt/w,tools/bench/vm/userspace.toml:/etc/u.toml
# shellcheck source=../../../tests/vm/guest-lib.sh
. /lib/vmtest/guest-lib.sh

LOAD_S=40
N=$VMTEST_SMP

scx_express --config /etc/u.toml >/tmp/scx.log 2>&1 &
scx=$!
wait_sched_state enabled 90 || { cat /tmp/scx.log; fail "scheduler did not attach"; }
log "attached: ops $(sched_ops_name)"

/opt/w/decode --duration $((LOAD_S + 10)) >/tmp/decode.out 2>&1 &
dec=$!
wait_until 10 grep -q '^launcher_tid=' /tmp/decode.out || fail "decode did not start"
probed() { [ "$(scx_stat probed_libraries)" -ge 1 ]; }
wait_until 10 probed ||
    { tail /tmp/scx.log; fail "the stand-in libcuda was not probed"; }
log "libcuda probed; starting the load"

stress-ng --aggressive -c "$N" -f "$N" --timeout "${LOAD_S}s" >/tmp/stress.log 2>&1 &
stress=$!

# Sleeper: how late is each 0.5 s sleep? (centiseconds)
(
    while kill -0 "$stress" 2>/dev/null; do
        t0=$(uptime_cs)
        sleep 0.5
        echo $(($(uptime_cs) - t0 - 50))
    done
) >/tmp/late.txt &
sleeper=$!

# Main-thread sampler (diagnosis).
(
    while kill -0 "$stress" 2>/dev/null; do
        st=$(cat /proc/$scx/stat 2>/dev/null) || break
        st=${st##*") "}
        echo "${st%% *} $(cat /proc/$scx/wchan 2>/dev/null)"
        sleep 0.5
    done
) >/tmp/main.txt &
sampler=$!

# Stats sampler: "uptime_cs user_dispatched" per line.
: >/tmp/disp.txt
while kill -0 "$stress" 2>/dev/null; do
    echo "$(uptime_cs) $(scx_stat user_dispatched)" >>/tmp/disp.txt
    sleep 1
done
wait "$stress"
wait "$sleeper" "$sampler" 2>/dev/null

log "main thread samples (state wchan: count):"
sort /tmp/main.txt | uniq -c | sort -rn | head -n 8
worst_late=$(sort -n /tmp/late.txt | tail -n 1)
n_late=$(wc -l </tmp/late.txt)
log "sleeper: $n_late wakeups, worst ${worst_late}0 ms late"
# Longest time the dispatch counter stood still.
frozen=$(awk 'NR > 1 && $2 == pd { if ($1 - pt > m) m = $1 - pt; next } { pt = $1; pd = $2 } END { print m + 0 }' /tmp/disp.txt)
log "longest stretch without a userspace dispatch: ${frozen}0 ms ($(wc -l </tmp/disp.txt) samples)"

expect "the userspace scheduler kept dispatching (longest pause ${frozen}0 ms)" \
    "the userspace scheduler dispatched nothing for ${frozen}0 ms under load" \
    [ "$frozen" -lt 200 ]
expect "worst sleeper wakeup ${worst_late}0 ms late" \
    "a 0.5 s sleep woke ${worst_late}0 ms late" \
    [ "${worst_late:-999}" -lt 200 ]
expect "the sleeper woke $n_late times in ${LOAD_S} s" \
    "the sleeper woke only $n_late times in ${LOAD_S} s" \
    [ "$n_late" -ge 20 ]

if ! kill -0 "$scx" || ! sched_state_is enabled; then
    bad "the scheduler is gone (state $(sched_state))"
fi
if dmesg_has 'runnable task stall|sched_ext: .*(error|disabled)'; then
    dmesg | grep -E 'sched_ext|stall' | tail -n 10
    bad "the kernel reported a stall or a sched_ext error"
fi
kill "$dec" 2>/dev/null
[ "$errors" = 0 ] || { tail -n 20 /tmp/scx.log; fail "$errors check(s) failed"; }

kill -INT "$scx"
wait "$scx" || fail "scx_express exited $? after SIGINT"
echo "ok: detached"
