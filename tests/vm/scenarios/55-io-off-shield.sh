#!/bin/sh
# Block I/O off the shielded CPUs (express.irq_shield = true,
# irq_shield_cpus = 1 on 2 CPUs: CPU 1 is shielded). An NVMe queue's
# completion IRQ is managed (irq_shield cannot move it) and serves the CPU
# that submitted the I/O, so the per-CPU columns of the nvme lines in
# /proc/interrupts say where fio submitted. With no express task, fio (4
# jobs of random writes) uses both CPUs: the shield keeps no CPU idle for
# nothing. With the decode stand-in's launcher (gpu class) on CPU 1, fio is
# kept off it: CPU 1 gets under 10% of the completions, the stats count
# io_kept_off, and the launcher's express runs stay on CPU 1. Network
# senders count too: a loopback iperf3 pair (its receive path is softirq
# work on the sender's CPU, counted as NET_RX in /proc/softirqs) spreads
# over both CPUs with no express task and is kept off CPU 1 beside the
# launcher.
# vmtest: smp=2 timeout=300 disk=256M bins=target/release/scx_express,/usr/bin/fio,/usr/bin/iperf3
# vmtest: files=workloads/build:/opt/w
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh

# nvme_irqs CPU: completions so far on CPU's column of the nvme I/O queues.
nvme_irqs() {
    awk -v c=$(($1 + 2)) '$NF ~ /^nvme[0-9]+q[1-9]/ { s += $c } END { print s + 0 }' /proc/interrupts
}
# net_rx CPU: NET_RX softirqs so far on CPU.
net_rx() {
    awk -v c=$(($1 + 2)) '$1 == "NET_RX:" { print $c }' /proc/softirqs
}
# iperf_on_cpus SECS: loopback iperf3 (one server, one client, 4 streams)
# for SECS s; prints "CPU0 CPU1" NET_RX softirqs during it.
port=5400
iperf_on_cpus() {
    port=$((port + 1))
    iperf3 -s -1 -p "$port" >/tmp/iperf-s.log 2>&1 &
    _s=$!
    wait_until 10 sh -c "netstat -ltn 2>/dev/null | grep -q ':$port '" || fail_logs "iperf3 server not listening"
    _a0=$(net_rx 0)
    _a1=$(net_rx 1)
    iperf3 -c 127.0.0.1 -p "$port" -P 4 -t "$1" >/tmp/iperf-c.log 2>&1 ||
        { cat /tmp/iperf-c.log; fail_logs "iperf3 failed"; }
    echo "$(($(net_rx 0) - _a0)) $(($(net_rx 1) - _a1))"
    wait "$_s"
}
# fio_on_cpus SECS: runs the disk noise for SECS s; prints "CPU0 CPU1"
# completions during it.
fio_on_cpus() {
    _a0=$(nvme_irqs 0)
    _a1=$(nvme_irqs 1)
    disk_noise "$1" --filename="$VMTEST_DISK" --direct=1 >/tmp/fio.log 2>&1 &
    wait $! || { cat /tmp/fio.log; fail_logs "fio failed"; }
    echo "$(($(nvme_irqs 0) - _a0)) $(($(nvme_irqs 1) - _a1))"
}

printf '[express]\nirq_shield = true\nirq_shield_cpus = 1\n' >/tmp/shield.toml
start_scx /tmp/scx.log --config /tmp/shield.toml

# shellcheck disable=SC2046 # two numbers, split on purpose
set -- $(fio_on_cpus 4)
log "no express task: completions on CPU 0: $1, CPU 1: $2"
[ "$1" -gt 0 ] && [ "$2" -gt 0 ] ||
    fail_logs "with no express task, fio should use both CPUs (CPU 0: $1, CPU 1: $2)"
echo "ok: with no express task, the shielded CPU takes I/O tasks ($2 of $(($1 + $2)) completions)"
# shellcheck disable=SC2046
set -- $(iperf_on_cpus 3)
log "no express task: NET_RX on CPU 0: $1, CPU 1: $2"
[ "$1" -gt 0 ] && [ "$2" -gt 0 ] ||
    fail_logs "with no express task, iperf3 should use both CPUs (CPU 0: $1, CPU 1: $2)"
echo "ok: with no express task, the shielded CPU takes network senders ($2 of $(($1 + $2)) NET_RX)"

/opt/w/decode --duration 18 >/tmp/decode.out 2>&1 &
DEC=$!
wait_until 20 grep -q '^launcher_tid=' /tmp/decode.out || fail_logs "decode did not start"
LTID=$(sed -n 's/^launcher_tid=//p' /tmp/decode.out | head -n 1)
wait_until 30 classified_as "$LTID" gpu || fail_logs "the launcher $LTID was not classified gpu"
sleep 1
stats_snapshot /tmp/s0
# shellcheck disable=SC2046
set -- $(fio_on_cpus 4)
stats_snapshot /tmp/s1
kept=$(($(snap_sum /tmp/s1 io_kept_off) - $(snap_sum /tmp/s0 io_kept_off)))
runs1=$(($(snap_sum /tmp/s1 cpus.1.express_runs) - $(snap_sum /tmp/s0 cpus.1.express_runs)))
runs=$((runs1 + $(snap_sum /tmp/s1 cpus.0.express_runs) - $(snap_sum /tmp/s0 cpus.0.express_runs)))
log "launcher on CPU 1: completions on CPU 0: $1, CPU 1: $2; io_kept_off +$kept; express runs on CPU 1: $runs1 of $runs"
# At least two thirds: 74-88% in five runs on the 2-core development
# machine, the lowest under a clean-clone CI's load (3/4, the bound
# before, failed there once).
[ "$runs" -gt 0 ] && [ $((runs1 * 3)) -ge $((runs * 2)) ] ||
    fail_logs "the launcher's express runs should stay on the shielded CPU 1 ($runs1 of $runs)"
[ $(($1 + $2)) -gt 100 ] || fail_logs "fio completed too little I/O to tell ($1 + $2)"
[ $(($2 * 10)) -lt $(($1 + $2)) ] ||
    fail_logs "fio should be kept off the launcher's shielded CPU 1: it got $2 of $(($1 + $2)) completions"
[ "$kept" -gt 0 ] || fail_logs "io_kept_off did not count"
echo "ok: with the launcher on the shielded CPU, fio kept off it ($2 of $(($1 + $2)) completions there)"
stats_snapshot /tmp/s0
# shellcheck disable=SC2046
set -- $(iperf_on_cpus 3)
stats_snapshot /tmp/s1
kept=$(snap_delta /tmp/s0 /tmp/s1 io_kept_off)
log "launcher on CPU 1: NET_RX on CPU 0: $1, CPU 1: $2; io_kept_off +$kept"
[ $(($1 + $2)) -gt 100 ] || fail_logs "iperf3 raised too few NET_RX softirqs to tell ($1 + $2)"
[ $(($2 * 10)) -lt $(($1 + $2)) ] ||
    fail_logs "iperf3 should be kept off the launcher's shielded CPU 1: it got $2 of $(($1 + $2)) NET_RX there"
[ "$kept" -gt 0 ] || fail_logs "io_kept_off did not count for the network senders"
echo "ok: with the launcher on the shielded CPU, iperf3 kept off it ($2 of $(($1 + $2)) NET_RX there)"
wait "$DEC" || fail_logs "decode exited $?"
stop_scx
