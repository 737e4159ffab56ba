#!/bin/sh
# Express placement. Warm: with idle CPUs, express wakeups of a sleeping gpu
# thread land on its previous CPU at least 80% of the time (from stats).
# IRQ-quiet: a CPU kept IRQ-hot by network softirq load steered to it gets
# far fewer express runs than the others, and the stats show the avoidance.
# vmtest: smp=4 timeout=300 bins=target/release/scx_express,/usr/bin/iperf3 files=workloads/build:/opt/w
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh

# irq_hot_pct = 2: the IRQ load below is a few percent of a CPU under TCG.
printf '[express]\nirq_hot_pct = 2\n' >/tmp/avoid.toml
start_scx /tmp/scx.log --config /tmp/avoid.toml

PLACED="classes.gpu.prev classes.gpu.llc classes.gpu.any classes.gpu.preempt"

# --- Warm: an idle machine, one launcher that sleeps on every sync.
/opt/w/decode --duration 8 >/tmp/warm.out 2>&1 &
dec=$!
sleep 3 # classified, warmed up
stats_snapshot /tmp/s0
sleep 4
stats_snapshot /tmp/s1
p0=$(snap_sum /tmp/s0 classes.gpu.prev) t0=$(snap_sum /tmp/s0 "$PLACED")
p1=$(snap_sum /tmp/s1 classes.gpu.prev) t1=$(snap_sum /tmp/s1 "$PLACED")
wait $dec
dp=$((p1 - p0)) dt=$((t1 - t0))
log "express wakeups: $dt placed, $dp on the previous CPU"
[ "$dt" -ge 100 ] || fail "only $dt express wakeups in 4 s: launcher not in the express lane?"
[ $((dp * 100)) -ge $((dt * 80)) ] || fail "previous CPU got $dp of $dt express wakeups (< 80%)"
echo "ok: warm: $dp of $dt express wakeups ($((dp * 100 / dt))%) on the previous CPU"

# --- IRQ-quiet: light loopback traffic whose receive softirq is steered to
# CPU 3 (RPS) keeps it IRQ-loaded while leaving it otherwise idle. The launcher starts on CPU 3
# alone, then may run on CPUs 2 and 3: warm placement alone would keep it on
# CPU 3, its previous CPU. With IRQ avoidance its wakeups leave CPU 3; in a
# control run with avoidance off (irq_hot_pct = 100) they stay there.
HOT=3 QUIET=2
irq_phase() {
    # iperf3 itself runs on CPU 1; RPS steers the loopback receive softirq
    # (NET_RX) to CPU 3, which is otherwise idle.
    echo $((1 << HOT)) >/sys/class/net/lo/queues/rx-0/rps_cpus
    taskset -c 1 iperf3 -s -1 >/dev/null 2>&1 &
    sleep 0.5
    taskset -c 1 iperf3 -c 127.0.0.1 -t 12 -b 60M -l 1400 >/tmp/iperf.log 2>&1 &
    ipf=$!
    sleep 2
    log "CPU $HOT IRQ load: $(scx_stat cpus.$HOT.irq_pct)% (CPU $QUIET: $(scx_stat cpus.$QUIET.irq_pct)%)"
    stats_snapshot /tmp/i0
    taskset -c $HOT /opt/w/decode --duration 7 >/tmp/irq.out 2>&1 &
    _d=$!
    sleep 0.5
    taskset -a -p -c $QUIET,$HOT $_d >/dev/null
    wait $_d
    stats_snapshot /tmp/i1
    hot=$(($(snap_sum /tmp/i1 cpus.$HOT.express_runs) - $(snap_sum /tmp/i0 cpus.$HOT.express_runs)))
    quiet=$(($(snap_sum /tmp/i1 cpus.$QUIET.express_runs) - $(snap_sum /tmp/i0 cpus.$QUIET.express_runs)))
    skips=$(($(snap_sum /tmp/i1 classes.gpu.irq_hot_skips) - $(snap_sum /tmp/i0 classes.gpu.irq_hot_skips)))
    wait $ipf
    sleep 1
    log "express runs: IRQ-loaded CPU $HOT: $hot, CPU $QUIET: $quiet; IRQ-hot skips: $skips"
}

irq_phase
[ "$quiet" -ge 100 ] || fail "too few express runs ($quiet) to judge"
[ "$skips" -gt 0 ] || fail "stats show no IRQ-hot CPU skipped"
# Far fewer: under a fifth of what the quiet CPU got (typically 1-4%; the
# traffic is bursty, so some 20 ms windows of CPU 3 are quiet).
[ $((hot * 5)) -lt "$quiet" ] || fail "IRQ-hot CPU $HOT got $hot express runs vs $quiet on CPU $QUIET"
echo "ok: IRQ-hot CPU $HOT got $hot express runs vs $quiet on CPU $QUIET; $skips skips"
avoid_hot=$hot avoid_quiet=$quiet
stop_scx

printf '[express]\nirq_hot_pct = 100\n' >/tmp/control.toml
start_scx /tmp/scx2.log --config /tmp/control.toml
irq_phase
echo "control, IRQ avoidance off: CPU $HOT got $hot express runs vs $quiet on CPU $QUIET (avoidance on: $avoid_hot vs $avoid_quiet)"
[ "$skips" = 0 ] || fail "IRQ avoidance off, yet $skips skips counted"
# Without avoidance the launcher keeps coming back to its previous CPU, the
# loaded one (it moves only while a softirq occupies it): CPU 3's share of
# the express runs is at least 3x its share with avoidance on. So the
# difference above is the avoidance's doing, not warm placement's.
[ $((hot * (avoid_hot + avoid_quiet))) -ge $((3 * avoid_hot * (hot + quiet))) ] ||
    fail "control: CPU $HOT's share ($hot of $((hot + quiet))) is not 3x its share with avoidance ($avoid_hot of $((avoid_hot + avoid_quiet)))"
echo "ok: control: without avoidance CPU $HOT got $((hot * 100 / (hot + quiet)))% of the express runs, with it $((avoid_hot * 100 / (avoid_hot + avoid_quiet)))%"
stop_scx
