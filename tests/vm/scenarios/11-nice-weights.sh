#!/bin/sh
# Fair path honours nice, in both fair modes ("bpf", the default, then
# "userspace"): two CPU hogs pinned to CPU 1, at nice 0 and nice 5, split it
# about 3:1 (kernel weights 1024:335), within ±25%, read from
# /proc/PID/stat. And the split comes from charging their CPU time: the
# policy charged at least two thirds of it (fair_charged_ms), and its debt
# bound forgave under 10% of that (fair_forgiven_ms). Slice counting alone also gives 3:1 on an idle host,
# but not under steal time.
# vmtest: smp=2 timeout=300 bins=target/release/scx_express,workloads/build/hog
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh

W=10
split() {
    mode=$1
    printf '[fair]\nmode = "%s"\n' "$mode" >"/tmp/$mode.toml"
    start_scx "/tmp/scx-$mode.log" --config "/tmp/$mode.toml"
    wait_until 10 grep -q "fair.mode $mode" "/tmp/scx-$mode.log" ||
        { cat "/tmp/scx-$mode.log"; fail "$mode: the log does not name fair.mode $mode"; }

    # The hogs' --duration only bounds them: they are stopped below.
    hog --cpu 1 --nice 0 --duration 60 >/tmp/hog0.log &
    h0=$!
    hog --cpu 1 --nice 5 --duration 60 >/tmp/hog5.log &
    h5=$!
    # Skip start-up, then measure a W s window: W * 100 ticks of CPU 1.
    sleep 3
    a0=$(task_cputime $h0); a5=$(task_cputime $h5)
    stats_snapshot /tmp/s0
    sleep $W
    b0=$(task_cputime $h0); b5=$(task_cputime $h5)
    stats_snapshot /tmp/s1
    kill $h0 $h5
    d0=$((b0 - a0)); d5=$((b5 - a5))
    log "$mode: CPU ticks over $W s: nice0=$d0 nice5=$d5"
    [ "$d5" -gt 0 ] || fail "$mode: nice 5 hog got no CPU (starved)"
    # ratio x100, accepted 225..375 (3:1 ±25%)
    ratio=$((d0 * 100 / d5))
    [ "$ratio" -ge 225 ] && [ "$ratio" -le 375 ] || fail "$mode: nice 0 : nice 5 = $ratio/100, expected 3.0 ±25%"
    echo "ok: $mode: nice 0 : nice 5 split $ratio/100 (expected 3.0 ±25%)"
    [ $((d0 + d5)) -ge $((W * 80)) ] || fail "$mode: the two hogs got only $((d0 + d5)) of ~$((W * 100)) ticks of CPU 1"
    echo "ok: $mode: CPU 1 stayed busy ($((d0 + d5)) ticks of $((W * 100)))"
    charged=$(snap_delta /tmp/s0 /tmp/s1 fair_charged_ms)
    forgiven=$(snap_delta /tmp/s0 /tmp/s1 fair_forgiven_ms)
    log "$mode: fair policy: charged ${charged} ms, forgave ${forgiven} ms"
    [ $((charged * 3)) -ge $((W * 2000)) ] || fail "$mode: the policy charged only ${charged} ms of ~$((W * 1000)) ms of hog CPU time"
    [ $((forgiven * 10)) -le "$charged" ] || fail "$mode: the policy forgave ${forgiven} of ${charged} ms: CPU time is not what orders the hogs"
    echo "ok: $mode: the policy charged ${charged} ms and forgave ${forgiven} ms"

    wait $h0 $h5
    check "$mode: scheduler still attached" sched_state_is enabled
    stop_scx
}

split bpf
split userspace
