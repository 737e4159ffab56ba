#!/bin/sh
# A synchronous fair wakeup (a pipe reply) waits on its waker's CPU only
# when its deadline puts it first in line (fair.bpf.c, section 4):
# - a ping-pong pair over two FIFOs, alone, takes that path
#   (fair_sync_waker rises by at least one per ten round trips);
# - the same pair at nice 19 beside four nice 0 hogs does not use it to
#   pass the queue: over 10 s it gets under 5% of the CPU time of the
#   pair and the hogs together (its weight share is 0.7%: 2 x 15
#   against 4 x 1024; a placement that let every reply skip the queue,
#   tried before, gave it 8%), and the hogs are not starved either way.
# vmtest: smp=2 timeout=300 bins=target/release/scx_express,workloads/build/hog
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh

# pingpong NICE: starts a pair at NICE bouncing a line over /tmp/ping and
# /tmp/pong until killed; their PIDs in $PA and $PB. The echoing side
# writes its count of round trips to /tmp/trips every 500.
# shellcheck disable=SC2016 # the pair's scripts expand in their own shells
pingpong() {
    rm -f /tmp/ping /tmp/pong /tmp/trips
    mkfifo /tmp/ping /tmp/pong
    # The guest's busybox has renice but no nice.
    sh -c '
        renice -n "$0" -p $$ >/dev/null
        exec 3</tmp/ping 4>/tmp/pong
        n=0
        while read -r x <&3; do
            echo "$x" >&4
            n=$((n + 1))
            [ $((n % 500)) -ne 0 ] || echo $n >/tmp/trips
        done
    ' "$1" >/dev/null 2>&1 &
    PA=$!
    sh -c '
        renice -n "$0" -p $$ >/dev/null
        exec 3>/tmp/ping 4</tmp/pong
        echo x >&3
        while read -r x <&4; do echo x >&3; done
    ' "$1" >/dev/null 2>&1 &
    PB=$!
}

start_scx /tmp/scx.log

# 1. Alone: replies wait on the waker's CPU.
pingpong 0
sleep 3
stats_snapshot /tmp/s0
t0=$(cat /tmp/trips 2>/dev/null || echo 0)
sleep 5
stats_snapshot /tmp/s1
t1=$(cat /tmp/trips 2>/dev/null || echo 0)
kill "$PA" "$PB" 2>/dev/null
wait "$PA" "$PB" 2>/dev/null
trips=$((t1 - t0))
sync_waker=$(snap_delta /tmp/s0 /tmp/s1 fair_sync_waker)
log "alone: $trips round trips in 5 s, fair_sync_waker $sync_waker"
[ "$trips" -ge 500 ] || fail "alone: the pair made only $trips round trips in 5 s"
[ $((sync_waker * 10)) -ge "$trips" ] ||
    fail "alone: only $sync_waker of $trips round trips' replies waited on the waker's CPU"
echo "ok: alone: $sync_waker wakeups on the waker's CPU over $trips round trips"

# 2. At nice 19 beside nice 0 hogs: no passing the queue.
hogs=''
for _ in 1 2 3 4; do
    hog --duration 30 >/dev/null &
    hogs="$hogs $!"
done
pingpong 19
sleep 1
nice_a=$(task_stat "$PA" | awk '{ print $17 }')
[ "$nice_a" = 19 ] || fail "beside hogs: the pair runs at nice ${nice_a:-?}, not 19"
# ticks PID...: their CPU time, summed (clock ticks).
ticks() {
    _t=0
    for _p in "$@"; do _t=$((_t + $(task_cputime "$_p"))); done
    echo "$_t"
}
sleep 5
# shellcheck disable=SC2086 # $hogs is a list of PIDs
p0=$(ticks "$PA" "$PB") h0=$(ticks $hogs)
sleep 10
# shellcheck disable=SC2086
p1=$(ticks "$PA" "$PB") h1=$(ticks $hogs)
pair=$((p1 - p0))
all=$((pair + h1 - h0))
log "beside hogs: pair $pair ticks, pair and hogs $all ticks over 10 s"
[ "$all" -ge 1600 ] || fail "beside hogs: the CPUs ran only $all of ~2000 ticks of these tasks"
[ $((pair * 20)) -lt "$all" ] ||
    fail "beside hogs: the nice 19 pair took $pair of $all ticks (>= 5%): its replies passed the hogs"
[ $((all - pair)) -ge 1000 ] || fail "beside hogs: the hogs got only $((all - pair)) ticks"
echo "ok: beside hogs: nice 19 pair $pair of $all ticks"
# shellcheck disable=SC2086
kill "$PA" "$PB" $hogs 2>/dev/null
# shellcheck disable=SC2086
wait "$PA" "$PB" $hogs 2>/dev/null

check "scheduler still attached" sched_state_is enabled
stop_scx
