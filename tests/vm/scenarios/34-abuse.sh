#!/bin/sh
# Abuse: the express lane's budget bounds a task that fakes GPU work.
#
# The abuser is `decode` with FAKECUDA_KERNEL_US=0 and 10 launches per
# token: its launcher thread calls cuLaunchKernel and cuStreamSynchronize of
# the stand-in libcuda.so.1 in a tight loop and never sleeps (the fake GPU
# is always idle, so every sync returns at once). It is classified gpu like
# a real launcher. It is pinned to CPU 1 beside `hog --cpu 1`, a plain CPU
# hog (class normal). CPU time of both is read with task_cputime over a
# window W after a warm-up.
#
# The bound, from configs/default.toml (the built-in config used here):
#   [classes.gpu] burst_ms = 20, rate = 0.9, max_share = 0.5;
#   [express] slice_us = 2000.
# The per-task bucket lets the abuser's express-lane time over W be at most
#   E = burst + rate * W + slice
# (a full bucket at the start of the window, the refill, and one express
# slice begun with tokens left when the window ends). The class cap,
# max_share x CPUs = 0.5 x 2 = 1 CPU here, is looser than rate for a single
# task, so it does not tighten E. The rest of CPU 1,
# W - E, is the fair path's, where two equal-weight tasks get half each. So
#   abuser <= E + (W - E) / 2 = W/2 + E/2
#   hog    >= (W - E) / 2     = W/2 - E/2
# With W = 20 s: E = 18.022 s, abuser <= 19.011 s, hog >= 0.989 s: the
# abuser gets at most its fair share (0.5) plus half of what its budget
# allows (0.45 of a CPU), and the hog at least its fair share minus that:
# never starved. (41-express-budget checks a tighter rate, 0.2.)
# In clock ticks (100/s) the test allows 2 ticks of sampling skew on each
# side, and 2% of W for others that run on CPU 1 (kworkers, scx_express's
# own threads) on the hog's side. Also: the abuser really was gpu (ps) and
# took the express lane; CPU 1 was busy (abuser + hog >= 90% of W);
# nothing stalled, the scheduler was never ejected (enable_seq unchanged)
# and still runs.
# vmtest: smp=2 timeout=240 bins=target/release/scx_express,workloads/build/hog
# vmtest: files=workloads/build:/opt/w
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh

# Config values of the bound (configs/default.toml, built in).
BURST_MS=20 RATE_PPM=900000 SLICE_US=2000
WARMUP_S=6 W_S=20

# gpu_express: express-lane dispatches of the gpu class, all placements.
gpu_express() {
    _n=0
    for _k in prev llc any preempt requeue; do
        _n=$((_n + $(scx_stat "classes.gpu.$_k")))
    done
    echo "$_n"
}
fail_with_logs() {
    scx_express ps 2>&1 | head -n 20
    tail -n 20 /tmp/scx.log
    dmesg | grep -E 'sched_ext|stall' | tail -n 20
    fail "$@"
}

scx_express >/tmp/scx.log 2>&1 &
scx=$!
wait_sched_state enabled 90 || { cat /tmp/scx.log; fail "scheduler did not attach"; }
seq0=$(enable_seq)
log "attached: ops $(sched_ops_name)"

# Room for a slow start; both are stopped once the window is measured.
total=$((WARMUP_S + W_S + 15))
FAKECUDA_KERNEL_US=0 taskset -c 1 /opt/w/decode --launches 10 --duration "$total" \
    >/tmp/abuser.out 2>&1 &
ab=$!
hog --cpu 1 --duration "$total" >/tmp/hog.out 2>&1 &
hg=$!
wait_until 10 grep -q '^launcher_tid=' /tmp/abuser.out || fail "the abuser did not start"
ltid=$(sed -n 's/^launcher_tid=//p' /tmp/abuser.out)
log "abuser pid $ab (launcher $ltid), hog pid $hg, both on CPU 1"

# The abuser must be in the express lane's class, or this tests nothing.
if ! wait_until 10 sh -c "scx_express ps | awk -v t=$ltid '\$1 == t && \$4 == \"gpu\" { f = 1 } END { exit !f }'"; then
    fail_with_logs "the abuser's launcher $ltid was not classified gpu"
fi
scx_express ps | grep -E "^ *(TID|$ltid) "
echo "ok: the abuser's launcher is gpu"

sleep "$WARMUP_S"
x0=$(gpu_express)
nt0=$(scx_stat classes.gpu.no_tokens)
cap0=$(scx_stat classes.gpu.class_cap)
t0=$(uptime_cs)
a0=$(task_cputime "$ab")
h0=$(task_cputime "$hg")
sleep "$W_S"
a1=$(task_cputime "$ab")
h1=$(task_cputime "$hg")
t1=$(uptime_cs)
express=$(($(gpu_express) - x0))
no_tokens=$(($(scx_stat classes.gpu.no_tokens) - nt0))
class_cap=$(($(scx_stat classes.gpu.class_cap) - cap0))
scx_express ps | grep -E "^ *(TID|$ltid) "

w=$((t1 - t0))
a=$((a1 - a0))
h=$((h1 - h0))
# All in ticks (1/100 s). E = burst + rate * W + slice.
e=$((BURST_MS / 10 + RATE_PPM * w / 1000000 + SLICE_US / 10000))
e_x10=$((BURST_MS + RATE_PPM * w / 100000 + SLICE_US / 1000)) # tenths of ticks
a_max=$(((w * 10 + e_x10) / 20 + 2))
h_min=$(((w * 10 - e_x10) / 20 - 2 - w / 50))
log "window ${w} ticks: abuser ${a} ticks ($((a * 100 / w))%), hog ${h} ticks ($((h * 100 / w))%)"
log "budget E = ${e} ticks; bound: abuser <= ${a_max}, hog >= ${h_min}"
log "gpu class during the window: $express express dispatches, $no_tokens out of tokens, $class_cap over max_share"

alive_and_attached() { kill -0 "$scx" && sched_state_is enabled; }
expect "abuser took $a <= $a_max ticks (fair share + half its budget)" \
    "abuser took $a ticks of CPU 1 in $w, above the budget's bound $a_max" \
    [ "$a" -le "$a_max" ]
expect "hog kept $h >= $h_min ticks (fair share - half the abuser's budget)" \
    "hog got $h ticks of CPU 1 in $w, below the bound $h_min" \
    [ "$h" -ge "$h_min" ]
expect "CPU 1 was busy ($((a + h)) of $w ticks)" \
    "abuser + hog got only $((a + h)) of $w ticks: the measurement is not valid" \
    [ $((a + h)) -ge $((w * 9 / 10)) ]
expect "the express lane was used ($express dispatches)" \
    "no express dispatches during the window: the budget was not exercised" \
    [ "$express" -gt 0 ]

kill "$hg"                # the hog reports and exits 0 on SIGTERM
kill -USR1 "$ab"          # the abuser ends its run (workloads/common.h)
wait "$hg" || bad "hog exited $?"
wait "$ab" || bad "the abuser exited $?"
grep -E '^(tokens|tok_per_s|launcher_cpu_ms|launcher_nivcsw)=' /tmp/abuser.out | tr '\n' ' '
echo
grep -E '^(cpu_ms|iters)=' /tmp/hog.out | tr '\n' ' '
echo
if dmesg_has 'runnable task stall|sched_ext: .*(error|disabled)'; then
    dmesg | grep -E 'sched_ext|stall' | tail -20
    bad "the kernel reported a stall or a sched_ext error"
else
    echo "ok: no stall or sched_ext error in dmesg"
fi
expect "never ejected (enable_seq $seq0)" \
    "the scheduler was ejected and re-attached (enable_seq $seq0 -> $(enable_seq))" \
    [ "$(enable_seq)" = "$seq0" ]
expect "scheduler still attached" \
    "the scheduler is gone (state $(sched_state))" \
    alive_and_attached
[ "$errors" = 0 ] || fail_with_logs "$errors check(s) failed"

SCX_PID=$scx
stop_scx
