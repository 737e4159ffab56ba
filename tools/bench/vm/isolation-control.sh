#!/bin/sh
# Benchmark (prints numbers, asserts nothing): a control for the agent
# criterion "its p99 under cpu4x is no worse than its clean p99". It asks
# what the best possible placement would get under TCG: the agent stand-in
# and its tool server on their own CPUs, every hog on the others, so that
# no hog ever shares a CPU with them. If the tail still grows there, the
# growth comes from the other vCPUs being busy (the emulation, shared
# kernel state), which no scheduler's placement can take back.
#
# Per round (REPS rounds, phases interleaved against host drift), DUR s
# each, under EEVDF:
#   clean         agent unpinned, no hogs
#   clean-pinned  agent and server pinned to A (the first quarter of the
#                 CPUs, at least one), no hogs
#   hogs-away     the same, 4 hogs per vCPU pinned to the other CPUs (B):
#                 the ideal placement
#   cpu4x         agent and hogs unpinned (the bench's cpu4x cell)
# then, for each express variant in VARIANTS (comma-separated; default:
# scx_express), that build attached, loop and server marked `agent`:
#   express-clean, express-cpu4x  (unpinned, as the bench)
#   express-away  (pinned as hogs-away: the lane given the ideal placement)
# and, with SPLIT=1, the ideal placement's two halves, to tell which one
# the lane's cpu4x cell misses:
#   express-agent-on-a  agent and server pinned to A, hogs anywhere (the
#                       lane must keep the hogs off A itself: holds)
#   express-hogs-on-b   agent and server anywhere, hogs pinned to B (the
#                       hogs' affinity keeps A free, the agent may roam)
# and, with MIRROR=1, the ideal placement on the last CPUs instead of the
# first (does it matter which vCPUs the agent has?):
#   express-away-last   agent and server on the last quarter, hogs on the rest
# and, with RESIDUE=1, the hogs' affinity changed at the first step, to
# tell what the hogs left on A before the steps (while the agent started
# and was marked) from what their affinity does while the steps run
# (agent and server anywhere, as hogs-on-b):
#   express-b-then-any  hogs start on B, may use every CPU from the first step
#   express-any-then-b  hogs start anywhere, are pinned to B at the first step
# (VARIANT-clean, ... for a variant other than scx_express)
# A variant is a binary's name (one added with bundle.sh's --bin runs in
# place of scx_express) with an optional @nohold (classes.agent.hold_us = 0),
# @whole (classes.agent.hold_whole = true, the default since 1af0c52),
# @windows (hold_whole = false: holds from the expected return only) or
# @shield (express.irq_shield = true, as the bench's net and disk runs).
# NOISE=net puts the bench's net noise in the hogs' place: loopback
# iperf3, one client and one server with 10 streams, both pinned where the
# hogs would be (its receive path runs in softirq on the sender's CPU,
# so pinning the pair keeps that work off A too). The phase names keep
# "cpu4x" and "hogs". With NICE=1 each EEVDF round adds
#   nice-on-a     agent and server pinned to A under nice -n -10, the
#                 noise anywhere: the bench's eevdf-nice
# so that the lane's phases can be read against nice's co-location.
# One line per run: p50/p99 of the local tail (us), the think step's CPU
# time (burst_us: fixed work, so a rise means the vCPU ran code slower),
# and of the steps over 1 ms those where the server's write took over half;
# a split: line with the tail's parts by means (send to the loop's
# epoll_wait return, then to its read; the server's write; run delays);
# for an express run, the agent class's lane counters over it (where its
# wakeups landed, its holds, its waits).
#
#   tests/vm/run.sh tools/bench/vm/isolation-control.sh              # 2 vCPUs
#   tools/bench/vm/bundle.sh .ic tools/bench/vm/isolation-control.sh --env REPS=3
#   .ic/runner.sh --smp 8 --jobs 1 OUT b1                            # GPU host
#   ... --env VARIANTS=scx_express,scx_express@nohold                # holds off too
#   ... --env SPLIT=1                                                # the two halves
#   ... --env EEVDF=0                              # the express phases only
#   ... --env MIRROR=1                             # the ideal placement mirrored
#   ... --env RESIDUE=1                            # hogs re-pinned at the first step
#   ... --env NOISE=net NICE=1 VARIANTS=scx_express@shield SPLIT=1   # net noise
# vmtest: smp=2 timeout=900 bins=target/release/scx_express,/usr/bin/stress-ng,/usr/bin/iperf3,/usr/bin/nice
# vmtest: files=workloads/build:/opt/w
# shellcheck source=../../../tests/vm/guest-lib.sh
. /lib/vmtest/guest-lib.sh

REPS=${REPS:-3}
DUR=${DUR:-5}
VARIANTS=${VARIANTS:-scx_express}
SPLIT=${SPLIT:-0}
EEVDF=${EEVDF:-1}
MIRROR=${MIRROR:-0}
RESIDUE=${RESIDUE:-0}
NOISE=${NOISE:-cpu4x}
NICE=${NICE:-0}
N=$VMTEST_SMP
na=$((N / 4))
[ "$na" -ge 1 ] || na=1
A="0-$((na - 1))"
B="$na-$((N - 1))"
A_LAST="$((N - na))-$((N - 1))"
B_LAST="0-$((N - na - 1))"
[ "$N" -gt 1 ] || fail "needs 2 vCPUs or more (the hogs need CPUs of their own)"
case $NOISE in
cpu4x) ;;
net) [ "$RESIDUE" != 1 ] || fail "RESIDUE=1 re-pins stress-ng's workers: NOISE=cpu4x only" ;;
*) fail "NOISE=$NOISE: cpu4x or net" ;;
esac

# num KEY: KEY's number in the agent's JSON (guest-lib's json_num).
num() { json_num /tmp/agent.out "$1"; }

# hogs CPUS: the noise on CPUS ("" = anywhere) for one run plus its warmup
# and marking: 4 stress-ng CPU hogs per vCPU, or with NOISE=net an iperf3
# server (one test, -1) and its client. The pid to stop in $hp (the
# server ends with its client).
port=5300
hogs() {
    _pin=''
    [ -z "$1" ] || _pin="taskset -c $1"
    if [ "$NOISE" = net ]; then
        port=$((port + 1))
        $_pin iperf3 -s -1 -p "$port" >/dev/null 2>&1 &
        sleep 0.5
        $_pin iperf3 -c 127.0.0.1 -p "$port" -P 10 -t $((DUR + 8)) >/dev/null 2>&1 &
    else
        $_pin stress-ng --cpu $((4 * N)) --cpu-method fft -t $((DUR + 8)) >/dev/null 2>&1 &
    fi
    hp=$!
    sleep 1
}

# repin_hogs CPUS: the running hogs ($hp and its workers) moved to CPUS.
repin_hogs() {
    _n=0
    for _s in /proc/[0-9]*/stat; do
        read -r _pid _ _ _ppid _ <"$_s" 2>/dev/null || continue
        [ "$_pid" = "$hp" ] || [ "$_ppid" = "$hp" ] || continue
        taskset -p -c "$1" "$_pid" >/dev/null 2>&1 && _n=$((_n + 1))
    done
    echo "repin: hogs=$_n cpus=$1"
}

# go_hook: run by agent_once just before the first step. The lane counters
# start here (the warmup's included), not at the marking: the agent polls
# for its go file every 5 ms, each poll a sleep too long for a hold
# (hold_long) whose wakeup preempts a hog under cpu4x. The daemon refreshes
# its stats once a second, so the polls of the last second before the
# first step still count: preempt - hold_long is about what the steps
# themselves preempted. With $repin set, the hogs' affinity changes here.
# What each CPU did is counted from here too (cpu_snapshot).
go_hook() {
    [ "$mark" != 1 ] || stats_snapshot /tmp/lane.0
    [ -z "$repin" ] || repin_hogs "$repin"
    cpu_snapshot 0
}

# cpu_snapshot K: /proc/interrupts, /proc/stat and /proc/schedstat in
# /tmp/{irq,stat,sched}.K.
cpu_snapshot() {
    cat /proc/interrupts >"/tmp/irq.$1"
    cat /proc/stat >"/tmp/stat.$1"
    cat /proc/schedstat >"/tmp/sched.$1" 2>/dev/null || echo none >"/tmp/sched.$1"
}

# run PHASE AGENT_CPUS HOG_CPUS MARK [REPIN]: one agent run. CPUS "" =
# unpinned, HOG_CPUS "-" = no hogs; MARK=1 marks the loop and the server
# `agent`; REPIN: the hogs' CPUs from the first step on. $AGENT_NICE, if
# set, is the agent's nice value.
run() {
    hp=''
    [ "$3" = - ] || hogs "$3"
    cpus=$2
    [ -n "$cpus" ] || cpus="0-$((N - 1))"
    mark=$4 repin=${5:-}
    AGENT_GO_HOOK=go_hook
    if [ -n "${AGENT_NICE:-}" ]; then
        agent_once "$4" "$DUR" taskset -c "$cpus" nice -n "$AGENT_NICE"
    else
        agent_once "$4" "$DUR" taskset -c "$cpus"
    fi
    cpu_snapshot 1
    echo "isolation: phase=$1 steps=$(num steps) p50_us=$(num tail_p50_us)" \
        "p99_us=$(num tail_p99_us) burst_us=$(num burst_cpu_p50_us)" \
        "over_1ms=$(num tail_over_1ms) over_1ms_server=$(num tail_over_1ms_server)"
    # The local tail by means (they add up): the server's send to the
    # loop's epoll_wait return (ready), from there to its read done
    # (recv); the server's whole write; each side's run delay per step
    # (schedstats: runnable, not running).
    echo "split: phase=$1 mean_us=$(num tail_mean_us) ready_p50_us=$(num tail_ready_p50_us)" \
        "ready_mean_us=$(num tail_ready_mean_us) recv_p50_us=$(num tail_recv_p50_us)" \
        "recv_mean_us=$(num tail_recv_mean_us) write_p50_us=$(num server_write_p50_us)" \
        "write_mean_us=$(num server_write_mean_us) agent_delay_us=$(num agent_run_delay_per_step_us)" \
        "server_delay_us=$(num server_run_delay_per_step_us) agent_nivcsw=$(num agent_nivcsw)" \
        "agent_migr=$(num agent_migrations) server_migr=$(num server_migrations)" \
        "agent_run_ms=$(num agent_cpu_ms) server_run_ms=$(num server_run_ms)"
    # (agent_run_ms: the loop's agent_cpu_ms, its getrusage() over the
    # steps, the same sum_exec_runtime as the server's schedstat.)
    # What the loop's and the server's last CPUs did over the steps (from
    # the go file to the agent's exit): interrupts, IPIs, CPU time in
    # ticks, and the time tasks ran there (run_ms, against the loop's and
    # the server's own run_ms in the split: line) in how many slices.
    for w in agent server; do
        c=$(num "${w}_cpu")
        echo "cpu: phase=$1 who=$w cpu=$c $(cpu_activity "$c")"
    done
    [ "$4" != 1 ] || lane_line "$1"
    if [ -n "$hp" ]; then
        kill "$hp" 2>/dev/null
        wait "$hp" 2>/dev/null
    fi
}

# cpu_activity CPU: its local timer interrupts, rescheduling, function-call
# and TLB-shootdown IPIs, its user/system/softirq/idle ticks, and the time
# tasks other than idle ran there (ms) in how many slices, between
# snapshots 0 and 1 (cpu_snapshot). Ticks sample: a CPU that wakes from
# idle for a few hundred µs at a time is undercounted; run_ms is exact
# (the scheduler's own accounting, /proc/schedstat's rq_cpu_time).
cpu_activity() {
    case $1 in '' | -*) return ;; esac
    awk -v c="$1" 'FNR == 1 { f++ }
        f <= 2 && ($1 == "LOC:" || $1 == "RES:" || $1 == "CAL:" || $1 == "TLB:") {
            k = substr($1, 1, 3); v[k] += (f == 2 ? 1 : -1) * $(c + 2) }
        (f == 3 || f == 4) && $1 == "cpu" c {
            s = (f == 4 ? 1 : -1); v["user"] += s * ($2 + $3); v["sys"] += s * $4
            v["idle"] += s * $5; v["softirq"] += s * $8 }
        f > 4 && $1 == "cpu" c {
            s = (f == 6 ? 1 : -1); v["run"] += s * $8; v["slices"] += s * $10 }
        END { printf "LOC=%d RES=%d CAL=%d TLB=%d user=%d sys=%d softirq=%d idle=%d run_ms=%.1f slices=%d\n",
            v["LOC"], v["RES"], v["CAL"], v["TLB"], v["user"], v["sys"], v["softirq"], v["idle"],
            v["run"] / 1e6, v["slices"] }' \
        /tmp/irq.0 /tmp/irq.1 /tmp/stat.0 /tmp/stat.1 /tmp/sched.0 /tmp/sched.1
}

# lane_line PHASE: the agent class's lane counters over the run just made
# (the agent loop and its tool server together).
lane_line() {
    stats_snapshot /tmp/lane.1
    _l=''
    for k in wakeups prev llc any preempt preempt_waker behind fallback slice_fallback \
        no_tokens class_cap holds hold_back hold_early hold_taken hold_spare hold_whole \
        hold_irregular hold_no_quota hold_partner hold_pinned hold_long hold_last_cpu \
        held_us wait_us waits_over_1ms lost_cpu cut_short; do
        _l="$_l $k=$(snap_delta /tmp/lane.0 /tmp/lane.1 "classes.agent.$k")"
    done
    echo "lane: phase=$1$_l"
}

log "isolation: $N vCPUs, agent CPUs A=$A, hog CPUs B=$B, noise $NOISE, $REPS rounds of $DUR s"
r=0
[ "$EEVDF" = 1 ] || r=$REPS
while [ "$r" -lt "$REPS" ]; do
    run clean '' - 0
    run clean-pinned "$A" - 0
    run hogs-away "$A" "$B" 0
    run cpu4x '' '' 0
    [ "$NICE" != 1 ] || AGENT_NICE=-10 run nice-on-a "$A" '' 0
    r=$((r + 1))
done
# A variant runs through start_scx's SCX_BIN; `scx_express stats` reads
# whichever build runs.
for variant in $(echo "$VARIANTS" | tr , " "); do
    SCX_BIN=${variant%@*}
    path=$(command -v "$SCX_BIN") || fail "no binary $SCX_BIN (bundle.sh --bin)"
    : >/tmp/variant.toml
    case $variant in
    *@nohold) printf '[classes.agent]\nhold_us = 0\n' >/tmp/variant.toml ;;
    *@whole) printf '[classes.agent]\nhold_whole = true\n' >/tmp/variant.toml ;;
    *@windows) printf '[classes.agent]\nhold_whole = false\n' >/tmp/variant.toml ;;
    *@shield) printf '[express]\nirq_shield = true\n' >/tmp/variant.toml ;;
    *@*) fail "unknown variant option in $variant" ;;
    esac
    # Phase names: express-clean for the default build, else VARIANT-clean.
    tag=$variant
    [ "$tag" != scx_express ] || tag=express
    log "isolation: variant $variant: $(sha256sum "$path" | cut -c1-12)"
    start_scx /tmp/sched.log --config /tmp/variant.toml
    r=0
    while [ "$r" -lt "$REPS" ]; do
        run "$tag-clean" '' - 1
        run "$tag-cpu4x" '' '' 1
        run "$tag-away" "$A" "$B" 1
        if [ "$SPLIT" = 1 ]; then
            run "$tag-agent-on-a" "$A" '' 1
            run "$tag-hogs-on-b" '' "$B" 1
        fi
        [ "$MIRROR" != 1 ] || run "$tag-away-last" "$A_LAST" "$B_LAST" 1
        if [ "$RESIDUE" = 1 ]; then
            run "$tag-b-then-any" '' "$B" 1 "0-$((N - 1))"
            run "$tag-any-then-b" '' '' 1 "$B"
        fi
        r=$((r + 1))
    done
    stop_scx
done
