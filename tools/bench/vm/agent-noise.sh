#!/bin/sh
# Benchmark (prints numbers, asserts nothing): the socket agent stand-in's
# local tail beside disk noise (fio randwrite on the NVMe scratch disk, the
# bench's disk scenario) and then net noise (iperf3 over loopback, 10
# streams), in one boot, under one scheduler. A quick probe of one
# mechanism, not the bench: one cell per noise, 6 s each, no EEVDF phase.
#
#   tests/vm/run.sh tools/bench/vm/agent-noise.sh                   # both marked
#   tests/vm/run.sh tools/bench/vm/agent-noise.sh --env MARK_SERVER=0
#   tests/vm/run.sh tools/bench/vm/agent-noise.sh --env SCHED_ARGS="--config /etc/x.toml"
#   tests/vm/run.sh tools/bench/vm/agent-noise.sh --env SHIELD=1   # express.irq_shield on
#   tests/vm/run.sh tools/bench/vm/agent-noise.sh --bin ~/.cache/scx_express/peers/bin/scx_bpfland \
#       --env SCHED=scx_bpfland
#
# Under scx_express the agent loop is marked `agent` (as the bench does),
# and so is its tool-server process unless MARK_SERVER=0. Per noise, one
# line: "agent-noise: sched=S noise=N steps=.. p50_us=.. p99_us=..
# over_1ms=.. over_1ms_server=.." (over_1ms_server: of the steps over 1 ms,
# those where the server's write took over half: the sending side). TCG
# timings move with the host: compare runs of one machine, several boots.
# vmtest: smp=2 timeout=300 disk=1G bins=target/release/scx_express,/usr/bin/fio,/usr/bin/iperf3
# vmtest: files=workloads/build:/opt/w
# shellcheck source=../../../tests/vm/guest-lib.sh
. /lib/vmtest/guest-lib.sh

SCHED=${SCHED:-scx_express}
MARK_SERVER=${MARK_SERVER:-1}
# num KEY: KEY's number in the agent's JSON (guest-lib's json_num).
num() { json_num /tmp/agent.out "$1"; }
if [ "${SHIELD:-0}" = 1 ]; then
    printf '[express]\nirq_shield = true\n' >/tmp/shield.toml
    SCHED_ARGS="$SCHED_ARGS --config /tmp/shield.toml"
fi
# shellcheck disable=SC2086 # SCHED_ARGS is a word list
"$SCHED" $SCHED_ARGS >/tmp/sched.log 2>&1 &
wait_until 60 sched_state_is enabled || {
    tail -n 20 /tmp/sched.log
    fail "$SCHED did not attach"
}

for noise in disk net; do
    case $noise in
    disk)
        disk_noise 10 --filename="$VMTEST_DISK" --direct=1 >/tmp/fio.log 2>&1 &
        ;;
    net)
        iperf3 -s -p 5201 >/dev/null 2>&1 &
        sleep 0.5
        iperf3 -c 127.0.0.1 -p 5201 -P 10 -t 10 >/dev/null 2>&1 &
        ;;
    esac
    noise_pid=$!
    sleep 1
    rm -f /tmp/go /tmp/agent.out
    /opt/w/agent --duration 6 --warmup 200 --json --go-file /tmp/go >/tmp/agent.out 2>&1 &
    agent_pid=$!
    wait_until 20 grep -qs '^agent_tid=' /tmp/agent.out || fail "the agent did not start"
    [ "$SCHED" != scx_express ] || mark_agent_ids /tmp/agent.out "$MARK_SERVER"
    touch /tmp/go
    wait "$agent_pid" || fail "the agent exited $?"
    echo "agent-noise: sched=$SCHED noise=$noise steps=$(num steps)" \
        "p50_us=$(num tail_p50_us) p99_us=$(num tail_p99_us)" \
        "over_1ms=$(num tail_over_1ms) over_1ms_server=$(num tail_over_1ms_server)"
    wait "$noise_pid" 2>/dev/null
    pkill iperf3 2>/dev/null
    sleep 0.5
done
