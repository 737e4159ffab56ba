#!/bin/sh
# Benchmark (prints numbers, asserts nothing): where the agent stand-in's
# time goes under loopback network load (iperf3, 10 streams; or disk
# noise, NOISE=disk below), EEVDF, then scx_express, then EEVDF again,
# in one boot. The loop is class agent by a comm rule (AGENT_RULE_TOML),
# for the scheduler and for `scx_express trace` alike; each phase prints
# the agent's own summary (local-tail p50/p99, the think step's CPU
# time) and trace's per-step breakdown (run, runqueue wait, hard and
# soft IRQ time inside the step). The guest kernel has
# CONFIG_IRQ_TIME_ACCOUNTING off, so softirq work run while the loop runs
# counts as its CPU time: trace's softirq row says how much of a slower
# think step that is.
# NOISE=disk: the bench's disk noise instead (fio randwrite, 4 jobs at
# iodepth 32 on the VM's scratch NVMe disk), for the disk cells.
# SHIELD=1: scx_express with express.irq_shield on, as an operator who
# turns it on runs it. PEER=NAME: then a phase under that sched_ext
# scheduler (added with --bin) and EEVDF once more, the same trace
# (PEER_FIRST=1: those two before scx_express's phase).
#   tests/vm/run.sh tools/bench/vm/agent-net-trace.sh [--env NOISE=disk] [--env SHIELD=1] \
#       [--bin ~/.cache/scx_express/peers/bin/scx_bpfland --env PEER=scx_bpfland]
# vmtest: smp=2 timeout=600 disk=1G bins=target/release/scx_express,/usr/bin/iperf3,/usr/bin/fio
# vmtest: files=workloads/build:/opt/w
# shellcheck source=../../../tests/vm/guest-lib.sh
. /lib/vmtest/guest-lib.sh

STEPS=${STEPS:-1500}
printf '%s\n' "$AGENT_RULE_TOML" >/tmp/cfg.toml
# HOLD=off: no holds for the agent class (its CPU is not kept idle while
# it waits on the tool server), to tell the holds' cost from the lane's.
[ "${HOLD:-on}" = on ] || printf '[classes.agent]\nhold_us = 0\nhold_whole = false\n' >>/tmp/cfg.toml
[ "${SHIELD:-0}" = 0 ] || printf '[express]\nirq_shield = true\n' >>/tmp/cfg.toml
# noise: the phase's load, in the foreground (exec: run with & its pid is
# the load's own, for the kill at the phase's end).
case ${NOISE:-net} in
    net)
        iperf3 -s -D >/dev/null 2>&1 && sleep 1
        noise() { exec iperf3 -c 127.0.0.1 -P 10 -t 120; }
        ;;
    disk) noise() { disk_noise 120 --filename="$VMTEST_DISK" --direct=1; } ;;
    *) fail "NOISE=$NOISE: expected net or disk" ;;
esac

# phase NAME: one agent run of STEPS steps beside the noise, traced.
phase() {
    rm -f /tmp/go
    noise >/dev/null 2>&1 &
    _noise=$!
    /opt/w/agent --steps "$STEPS" --go-file /tmp/go >"/tmp/a-$1.out" 2>&1 &
    _ag=$!
    wait_until 20 grep -qs '^agent_tid=' "/tmp/a-$1.out" || fail "$1: agent did not start"
    # MARK_SERVER=1: the tool server process marked agent too, as the bench does.
    if [ "${MARK_SERVER:-0}" = 1 ] && [ "$1" = express ]; then
        scx_express mark --pid "$(sed -n 's/^tool_server_pid=//p' "/tmp/a-$1.out")" --class agent >/dev/null ||
            fail "$1: mark the tool server"
    fi
    scx_express --config /tmp/cfg.toml trace >"/tmp/t-$1.out" 2>"/tmp/t-$1.err" &
    _tr=$!
    wait_until 60 grep -q 'tracing with' "/tmp/t-$1.err" || {
        cat "/tmp/t-$1.err"
        fail "$1: trace did not start"
    }
    sleep 2
    [ "$1" != express ] || scx_express stats --flat >/tmp/s0 2>/dev/null
    touch /tmp/go
    wait "$_ag"
    if [ "$1" = express ]; then
        scx_express stats --flat >/tmp/s1 2>/dev/null
        # The agent class's holds over the run: counter increases.
        awk 'NR == FNR { a[$1] = $2; next } $1 ~ /^classes\.agent\.(hold|held)/ { print $1, $2 - a[$1] }' \
            /tmp/s0 /tmp/s1 | sed "s/^/$1: /"
    fi
    kill -TERM "$_tr"
    wait "$_tr"
    kill "$_noise" 2>/dev/null
    wait "$_noise" 2>/dev/null
    for k in steps_per_s tail_p50_us tail_p99_us rtt_p50_us rtt_p99_us burst_cpu_p50_us server_write_p99_us agent_nivcsw; do
        echo "$1: $k $(sed -n "s/^$k=//p" "/tmp/a-$1.out")"
    done
    sed -n '/^agent steps/,/^p99 /p' "/tmp/t-$1.out" | sed "s/^/$1: /"
    # With the tool server marked, each thread's own parts (trace prints
    # them when more than one thread has steps).
    awk '/^by thread/ { on = 1; print; next } on && NF == 7 { print; next } on { exit }' \
        "/tmp/t-$1.out" | sed "s/^/$1: /"
}

# peer_phase: PEER's phase, then EEVDF again as eevdf$1.
peer_phase() {
    SCHED=$PEER
    start_sched /tmp/peer.log
    phase "$PEER"
    stop_sched
    phase "eevdf$1"
}

phase eevdf1
# PEER_FIRST=1: the peer's phase before scx_express's, so that nothing
# scx_express did can carry over into it.
[ -z "${PEER:-}" ] || [ "${PEER_FIRST:-0}" = 0 ] || peer_phase 2
start_scx /tmp/scx.log --config /tmp/cfg.toml
phase express
stop_scx
if [ -n "${PEER:-}" ] && [ "${PEER_FIRST:-0}" = 1 ]; then
    phase eevdf3
else
    phase eevdf2
    [ -z "${PEER:-}" ] || peer_phase 3
fi
