#!/bin/sh
# Benchmark (prints numbers, asserts nothing): what scx_express's BPF costs
# on a wakeup's path, and what the agent stand-in's local tail pays for
# it, in one boot. Phases, each REPS runs of the agent (DUR s):
#   eevdf        no sched_ext scheduler
#   eevdf-scale  the same, beside one decode launcher per two vCPUs (no
#                probes: nothing attached)
#   fair         scx_express attached, agent and tool server unmarked
#   express      both marked `agent` (the express lane)
#   scale        both marked, beside the launchers (class gpu through the
#                CUDA uprobes), as the bench's scale cell
#   scale-fair   the same, the launchers marked `normal` (fair path): what
#                serving them costs the agent. Their probes still fire, and
#                launch windows reopen for them (the CLI took their class)
#   eevdf-cpu4x  no sched_ext scheduler, beside 4 stress-ng CPU hogs per vCPU
#   cpu4x-fair   scx_express, beside the hogs, agent and server unmarked
#   cpu4x        both marked, beside the hogs
#   cpu4x-nohold both marked, beside the hogs, holds off (hold_us = 0;
#                the built-in config only)
# Per run: the local tail's p50/p99 (us), the think step's CPU time
# (burst_us: fixed work, so a rise means the vCPU ran code slower), and
# the agent loop's whole CPU time per step (loop_us: the think step, its
# syscalls, and under TCG the emulated cost of being switched in, which
# the software TLB makes grow with the switches) with its involuntary
# switches (nivcsw, preemptions by other tasks). Per
# scx_express phase, with kernel.bpf_stats_enabled: each BPF program's
# runs on the whole machine (sched_ext callbacks, the IRQ and idle
# tracepoints, the CUDA uprobes; the hogs' and launchers' too) divided by
# the agent's steps, and its mean cost (ns; under TCG tens of times a
# native CPU's, so compare the programs with each other and the phases
# with each other).
#
#   tests/vm/run.sh tools/bench/vm/wakeup-cost.sh                    # 2 vCPUs
#   tests/vm/run.sh tools/bench/vm/wakeup-cost.sh --smp 8 --env REPS=3
#   ... --env SCX_CONFIG=/opt/w/FILE.toml   # a config from workloads/build
# vmtest: smp=2 timeout=600 bins=target/release/scx_express,/usr/bin/stress-ng
# vmtest: files=workloads/build:/opt/w
# shellcheck source=../../../tests/vm/guest-lib.sh
. /lib/vmtest/guest-lib.sh

REPS=${REPS:-2}
DUR=${DUR:-5}
N=$VMTEST_SMP

# num KEY: KEY's number in the agent's JSON (guest-lib's json_num).
num() { json_num /tmp/agent.out "$1"; }

# agent_run PHASE MARK: one agent run; MARK=1 marks the loop and its server.
agent_run() {
    agent_once "$2" "$DUR"
    echo "wakeup-cost: phase=$1 steps=$(num steps) p50_us=$(num tail_p50_us)" \
        "p99_us=$(num tail_p99_us) burst_us=$(num burst_cpu_p50_us)" \
        "loop_us=$(awk -v c="$(num agent_cpu_ms)" -v n="$(num steps)" 'BEGIN { printf "%.0f", n ? c * 1000 / n : 0 }')" \
        "nivcsw=$(num agent_nivcsw)"
    steps=$((steps + $(num steps)))
}

# phase NAME MARK: REPS runs; with scx_express, the callbacks' cost over them.
phase() {
    steps=0
    case $1 in eevdf*) ;; *) /opt/w/bpfstat >/tmp/b0 ;; esac
    i=0
    while [ "$i" -lt "$REPS" ]; do
        agent_run "$1" "$2"
        i=$((i + 1))
    done
    case $1 in eevdf*) return ;; esac
    /opt/w/bpfstat >/tmp/b1
    # Every program that ran: runs per agent step, mean ns.
    awk -v phase="$1" -v steps="$steps" '
        NR == FNR { c[$1] = $2; t[$1] = $3; next }
        $2 > c[$1] {
            n = $2 - c[$1]
            printf "wakeup-cost: phase=%s prog=%s per_step=%.2f mean_ns=%.0f\n",
                phase, $1, n / steps, ($3 - t[$1]) / n
        }' /tmp/b0 /tmp/b1
}

# launchers SECONDS: one decode launcher per two vCPUs (at least one), as
# the bench's scale cell, running SECONDS (past the phases they serve).
launchers() {
    lpids=''
    _n=$((N / 2))
    [ "$_n" -ge 1 ] || _n=1
    _i=0
    while [ "$_i" -lt "$_n" ]; do
        /opt/w/decode --duration "$1" >/dev/null 2>&1 &
        lpids="$lpids $!"
        _i=$((_i + 1))
    done
    sleep 1
}
launchers_stop() {
    # shellcheck disable=SC2086 # a list of pids
    kill $lpids 2>/dev/null
    # shellcheck disable=SC2086
    wait $lpids 2>/dev/null
}
per_phase=$((REPS * (DUR + 5) + 5))

phase eevdf 0
launchers "$per_phase"
phase eevdf-scale 0
launchers_stop
# hogs SECONDS: 4 stress-ng CPU hogs per vCPU for SECONDS, pid in $hogs.
hogs() {
    stress-ng --cpu $((4 * N)) --cpu-method fft -t "$1" >/dev/null 2>&1 &
    hogs=$!
    sleep 1
}
hogs_stop() {
    kill "$hogs" 2>/dev/null
    wait "$hogs" 2>/dev/null
}
hogs "$per_phase"
phase eevdf-cpu4x 0
hogs_stop
start_scx /tmp/sched.log ${SCX_CONFIG:+--config "$SCX_CONFIG"}
sysctl -qw kernel.bpf_stats_enabled=1
phase fair 0
phase express 1
launchers $((2 * per_phase))
phase scale 1
for l in $lpids; do scx_express mark --pid "$l" --class normal >/dev/null 2>&1; done
phase scale-fair 1
launchers_stop
hogs $((3 * per_phase + 20))
phase cpu4x-fair 0
phase cpu4x 1
stop_scx
# The built-in config with holds off (with SCX_CONFIG, which may have its
# own [classes.agent], this phase is left out).
if [ -z "${SCX_CONFIG:-}" ]; then
    printf '[classes.agent]\nhold_us = 0\n' >/tmp/nohold.toml
    start_scx /tmp/sched.log --config /tmp/nohold.toml
    sysctl -qw kernel.bpf_stats_enabled=1
    phase cpu4x-nohold 1
    stop_scx
fi
hogs_stop
