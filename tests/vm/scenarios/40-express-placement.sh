#!/bin/sh
# Express placement. Warm: with idle CPUs, express wakeups of a sleeping gpu
# thread land on its previous CPU at least 80% of the time (from stats).
# IRQ-quiet: a CPU kept IRQ-hot by network softirq load steered to it gets
# far fewer express runs than the others, and the stats show the avoidance;
# a control run with avoidance off, under the same load, shows the cause.
# No quiet CPU: with every CPU IRQ-hot, express wakeups still take the lane
# on a hot CPU, or, with quiet_only, the fair path.
# vmtest: smp=4 timeout=300 bins=target/release/scx_express,/usr/bin/iperf3 files=workloads/build:/opt/w
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh

# irq_hot_pct = 2: the IRQ load below is a few percent of a CPU under TCG.
# quiet_only = true for the avoidance phase: by default a wakeup that finds
# the quiet CPU momentarily busy with an express task (placement step 5)
# takes the hot one, which the no-quiet-CPU phase below tests on its own.
# fair.mode = "userspace": this tests the express lane's placement, and
# the IRQ load comes from loopback iperf3 traffic, whose rate on a CPU
# swings between 5 and 25% from phase to phase under the default BPF fair
# path (a CPU meant to be hot then reads quiet for whole windows); under
# the userspace one it is steady. A steadier IRQ source, to run this under
# the default mode too, is an open item (docs/benchmarks.md, "Ordinary
# tasks").
F='[fair]\nmode = "userspace"\n'
printf '%b' "${F}[express]\nirq_hot_pct = 2\nquiet_only = true\n" >/tmp/avoid.toml
start_scx /tmp/scx.log --config /tmp/avoid.toml

PLACED="classes.gpu.prev classes.gpu.llc classes.gpu.any classes.gpu.preempt"

# --- Warm: an idle machine, one launcher that sleeps on every sync.
/opt/w/decode --duration 6 >/tmp/warm.out 2>&1 &
dec=$!
sleep 2 # classified, warmed up
# Compared counters must come from one stats snapshot (see guest-lib.sh).
stats_snapshot /tmp/s0
sleep 3
stats_snapshot /tmp/s1
p0=$(snap_sum /tmp/s0 classes.gpu.prev) t0=$(snap_sum /tmp/s0 "$PLACED")
p1=$(snap_sum /tmp/s1 classes.gpu.prev) t1=$(snap_sum /tmp/s1 "$PLACED")
wait $dec
dp=$((p1 - p0)) dt=$((t1 - t0))
log "express wakeups: $dt placed, $dp on the previous CPU"
[ "$dt" -ge 100 ] || fail "only $dt express wakeups in 3 s: launcher not in the express lane?"
[ $((dp * 100)) -ge $((dt * 80)) ] || fail "previous CPU got $dp of $dt express wakeups (< 80%)"
echo "ok: warm: $dp of $dt express wakeups ($((dp * 100 / dt))%) on the previous CPU"

# --- IRQ-quiet: the launcher may run on CPUs 2 and 3. Light loopback
# traffic pinned to CPU 3 keeps its NET_RX softirq busy while leaving it
# mostly idle; a CPU hog pinned to CPU 2 keeps that one busy. So the one
# idle CPU the launcher could take is the IRQ-hot one:
# - avoidance on: its wakeups skip CPU 3 and preempt the hog on CPU 2;
# - control, avoidance off (irq_hot_pct = 100), same load: they stay on
#   CPU 3, where the launcher starts in both. Only the knob differs, so the
#   difference is the avoidance.
HOT=3 QUIET=2
irq_phase() {
    taskset -c $QUIET sh -c 'while :; do :; done' &
    hog=$!
    taskset -c $HOT iperf3 -s -1 >/dev/null 2>&1 &
    sleep 0.5
    taskset -c $HOT iperf3 -c 127.0.0.1 -t 10 -b 60M -l 1400 >/tmp/iperf.log 2>&1 &
    ipf=$!
    sleep 2
    log "CPU $HOT IRQ load: $(scx_stat cpus.$HOT.irq_pct)% (CPU $QUIET: $(scx_stat cpus.$QUIET.irq_pct)%)"
    # The launcher starts on the IRQ-hot CPU and may then use both. Its
    # CPU is sticky (warm placement: the previous CPU, or preempting there,
    # beats moving), so where it happened to start would otherwise decide
    # the phase: avoidance has to move it off CPU $HOT, and without
    # avoidance nothing does.
    taskset -c $HOT /opt/w/decode --duration 6 >/tmp/irq.out 2>&1 &
    dec=$!
    wait_until 5 grep -q '^launcher_tid=' /tmp/irq.out || fail "decode did not start"
    taskset -a -p -c $QUIET,$HOT $dec >/dev/null
    stats_snapshot /tmp/i0
    wait $dec
    stats_snapshot /tmp/i1
    hot=$(snap_delta /tmp/i0 /tmp/i1 "cpus.$HOT.express_runs")
    quiet=$(snap_delta /tmp/i0 /tmp/i1 "cpus.$QUIET.express_runs")
    skips=$(snap_delta /tmp/i0 /tmp/i1 classes.gpu.irq_hot_skips)
    kill $hog
    wait $ipf
    sleep 1
    log "express runs: IRQ-loaded CPU $HOT: $hot, CPU $QUIET: $quiet; IRQ-hot skips: $skips"
}

irq_phase
[ "$quiet" -ge 100 ] || fail "too few express runs ($quiet) to judge"
[ "$skips" -gt 0 ] || fail "stats show no IRQ-hot CPU skipped"
# Far fewer: under a tenth of what the quiet CPU got.
[ $((hot * 10)) -lt "$quiet" ] || fail "IRQ-hot CPU $HOT got $hot express runs vs $quiet on CPU $QUIET"
echo "ok: IRQ-hot CPU $HOT got $hot express runs vs $quiet on CPU $QUIET; $skips skips"
avoid_hot=$hot avoid_quiet=$quiet

# --- No quiet CPU (placement step 5): a loopback iperf3 pair pinned to
# each of CPUs 2 and 3 makes both IRQ-hot, busy or idle. The launcher's
# wakeups still take the lane, on a hot CPU (`not_quiet`), instead of the
# fair path; with `quiet_only` (set by a reload) they take the fair path.
all_hot_phase() {
    for c in $QUIET $HOT; do
        taskset -c "$c" iperf3 -s -1 -p "520$c" >/dev/null 2>&1 &
    done
    sleep 0.5
    ipfs=''
    for c in $QUIET $HOT; do
        taskset -c "$c" iperf3 -c 127.0.0.1 -p "520$c" -t 8 -b 60M -l 1400 >/dev/null 2>&1 &
        ipfs="$ipfs $!"
    done
    sleep 2
    log "IRQ load: CPU $QUIET $(scx_stat cpus.$QUIET.irq_pct)%, CPU $HOT $(scx_stat cpus.$HOT.irq_pct)%"
    stats_snapshot /tmp/h0
    taskset -c $QUIET,$HOT /opt/w/decode --duration 4 >/tmp/hot.out 2>&1
    stats_snapshot /tmp/h1
    # shellcheck disable=SC2086
    wait $ipfs
    sleep 1
    d() { snap_delta /tmp/h0 /tmp/h1 "$@"; }
    nq=$(d classes.gpu.not_quiet) fb=$(d classes.gpu.fallback) placed=$(d "$PLACED")
    log "every CPU IRQ-hot: $placed express wakeups, $nq on a hot CPU, $fb to the fair path"
}

# reload N CONFIG_TEXT: replace the config and wait for the Nth reload.
reload() {
    printf '%b' "$F$2" >/tmp/avoid.toml
    kill -HUP "$SCX_PID"
    wait_until 10 sh -c "[ \$(grep -c 'reloaded /tmp/avoid.toml' /tmp/scx.log) -ge $1 ]" ||
        fail "reload $1 not logged"
}

reload 1 '[express]\nirq_hot_pct = 2\n'
all_hot_phase
[ "$placed" -ge 100 ] || fail "too few express wakeups ($placed) with every CPU IRQ-hot"
# A third, not all: a loopback pair's softirq load swings from second to
# second, so for part of the window a hot CPU reads under irq_hot_pct
# and counts as quiet (a check at half failed 1 CI run in 3: 598 of 1324).
[ $((nq * 3)) -ge "$placed" ] || fail "with every CPU IRQ-hot only $nq of $placed express wakeups counted not_quiet"
[ $((fb * 20)) -le "$placed" ] || fail "with every CPU IRQ-hot $fb express wakeups took the fair path ($placed placed)"
echo "ok: every CPU IRQ-hot: $nq of $placed express wakeups on a hot CPU, $fb to the fair path"
lane_nq=$nq lane_fb=$fb

reload 2 '[express]\nirq_hot_pct = 2\nquiet_only = true\n'
all_hot_phase
[ "$nq" = 0 ] || fail "quiet_only, yet $nq express wakeups on a hot CPU"
[ "$fb" -gt $((lane_fb + 20)) ] || fail "quiet_only: only $fb express wakeups took the fair path (lane: $lane_fb)"
echo "ok: quiet_only: $fb wakeups took the fair path instead ($nq on a hot CPU; without it $lane_nq and $lane_fb)"
stop_scx

printf '%b' "${F}[express]\nirq_hot_pct = 100\n" >/tmp/control.toml
start_scx /tmp/scx2.log --config /tmp/control.toml
irq_phase
[ "$skips" = 0 ] || fail "IRQ avoidance off, yet $skips skips counted"
[ "$hot" -gt "$quiet" ] ||
    fail "control: without avoidance CPU $HOT got only $hot express runs vs $quiet on CPU $QUIET"
echo "ok: control, IRQ avoidance off: CPU $HOT got $hot express runs vs $quiet on CPU $QUIET (avoidance on: $avoid_hot vs $avoid_quiet)"
stop_scx
