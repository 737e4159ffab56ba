#!/bin/sh
# IRQ shielding (express.irq_shield = true, irq_shield_cpus = 1 on 2 CPUs:
# CPU 1 is shielded). While it runs, every device IRQ whose affinity still
# includes CPU 1 is one the log names as not movable, the IRQs that changed
# are the ones the log names as moved, they all left CPU 1, and at least
# one moved (else the test proves nothing). The express lane prefers the
# shielded CPU: an agent-class loop, on an idle machine, gets at least
# 75% of its express runs there (a control run without the shield is
# printed). Every affinity is exactly as before after SIGINT; after
# `kill -9` the affinities stay shielded, and the next start restores them
# from the state file: a start with the shield off leaves them exactly as
# before, a start with it on shields them again, and its SIGINT restores
# them exactly. A SIGHUP that turns the shield on moves nothing and says it
# takes effect at the next start. The guest kernel puts its device IRQs on
# CPU 0 alone; the test spreads them over both CPUs before the first start.
# vmtest: smp=2 timeout=400 bins=target/release/scx_express files=workloads/build:/opt/w
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh

SHIELD=1
STATE=/run/scx_express/irq_shield.state
printf '[express]\nirq_shield = true\nirq_shield_cpus = 1\n' >/tmp/shield.toml

# snapshot FILE: "IRQ AFFINITY_LIST" for every IRQ.
snapshot() {
    for _d in /proc/irq/[0-9]*; do
        printf '%s %s\n' "${_d##*/}" "$(cat "$_d/smp_affinity_list")"
    done >"$1"
}

# has_cpu LIST CPU: does cpulist LIST (0-3,5) include CPU?
has_cpu() {
    _ifs=$IFS
    IFS=,
    for _p in $1; do
        case $_p in
        *-*) [ "$2" -ge "${_p%-*}" ] && [ "$2" -le "${_p#*-}" ] && { IFS=$_ifs; return 0; } ;;
        *) [ "$_p" = "$2" ] && { IFS=$_ifs; return 0; } ;;
        esac
    done
    IFS=$_ifs
    return 1
}

# has_handler IRQ: a device uses it (a handler directory under /proc/irq/IRQ).
has_handler() {
    for _h in /proc/irq/"$1"/*; do
        [ -d "$_h" ] && return 0
    done
    return 1
}

# same_as_before WHAT: every affinity is exactly as in /tmp/before.
same_as_before() {
    snapshot /tmp/now
    if ! cmp -s /tmp/before /tmp/now; then
        diff /tmp/before /tmp/now
        fail "$1: IRQ affinities differ from before the first start"
    fi
    echo "ok: $1: every IRQ affinity is exactly as before"
}

# shield_ok WHAT LOG: the shield, as described at the top, per LOG.
shield_ok() {
    moved=$(sed -n 's/.*moved [0-9]* IRQs off them (IRQs \([0-9 ]*\)).*/\1/p' "$2" | tail -n 1)
    unmovable=$(grep 'not movable' "$2" | tail -n 1)
    log "$1: moved: '$moved'; $unmovable"
    [ -n "$moved" ] || { cat "$2"; fail "$1: the log names no moved IRQ: nothing to check"; }
    snapshot /tmp/now
    while read -r irq list; do
        old=$(awk -v i="$irq" '$1 == i { print $2 }' /tmp/before)
        case " $moved " in
        *" $irq "*)
            has_cpu "$list" $SHIELD && fail "$1: IRQ $irq, named moved, is on CPU $SHIELD ($list)"
            has_cpu "$old" $SHIELD || fail "$1: IRQ $irq named moved but was not on CPU $SHIELD ($old)"
            [ "$old" != "$list" ] || fail "$1: IRQ $irq named moved but unchanged"
            continue
            ;;
        esac
        [ "$old" = "$list" ] || fail "$1: IRQ $irq changed ($old -> $list) but the log does not name it moved"
        has_cpu "$list" $SHIELD || continue
        has_handler "$irq" || continue
        case "$unmovable" in
        *"IRQ $irq ("*) ;;
        *) fail "$1: device IRQ $irq is on CPU $SHIELD ($list), neither moved nor named not movable" ;;
        esac
    done </tmp/now
    echo "ok: $1: IRQs $moved left CPU $SHIELD; every other device IRQ on it is named not movable"
    [ -s "$STATE" ] || fail "$1: no state file $STATE while shielding"
    for irq in $moved; do
        grep -q "^$irq " "$STATE" || fail "$1: the state file does not list moved IRQ $irq"
    done
    echo "ok: $1: the state file lists every moved IRQ"
}

# express_split WHAT: run an agent-class loop (mark_demo: one thread that
# sleeps 2 ms, then bursts; nothing else runs) on the idle machine, first
# on CPU 0; set
# $shielded_runs and $all_runs to the express runs on the shielded CPU and
# on both, over 4 s.
express_split() {
    # Started on CPU 0 and then allowed both: without the shield the loop
    # stays on its previous CPU, 0; with it, it moves to the shielded one.
    taskset 1 /opt/w/mark_demo agent 12 >/tmp/mark.out 2>&1 &
    _mk=$!
    wait_until 10 grep -q '^tid=' /tmp/mark.out || fail "$1: mark_demo did not start"
    _tid=$(sed -n 's/^tid=//p' /tmp/mark.out)
    wait_until 10 classified_as "$_tid" agent || fail "$1: mark_demo's thread is not agent"
    taskset -p 3 "$_tid" >/dev/null || fail "$1: cannot allow CPUs 0-1 to thread $_tid"
    stats_snapshot /tmp/s0
    sleep 4
    stats_snapshot /tmp/s1
    kill "$_mk"
    wait "$_mk"
    _d() { echo $(($(snap_sum /tmp/s1 "$1") - $(snap_sum /tmp/s0 "$1"))); }
    shielded_runs=$(_d cpus.$SHIELD.express_runs)
    all_runs=$(_d "cpus.0.express_runs cpus.1.express_runs")
    log "$1: express runs on CPU $SHIELD: $shielded_runs of $all_runs"
    [ "$all_runs" -ge 20 ] || fail "$1: only $all_runs express runs: mark_demo not in the lane?"
}

kill9() {
    kill -9 "$SCX_PID"
    wait "$SCX_PID"
    _rc=$?
    [ "$_rc" = 137 ] || fail "exit status $_rc after kill -9, expected 137"
    wait_sched_state disabled 30 || fail "state did not return to disabled after kill -9"
    [ -s "$STATE" ] || fail "kill -9 left no state file: the recovery below would test nothing"
    shield_ok "after kill -9 (nothing restored yet)" "$1"
}

recovered() {
    grep -q 'did not exit cleanly; restored' "$1" || { cat "$1"; fail "$2: the start did not say it restored from $STATE"; }
    echo "ok: $2: the start restored from the state file"
}

cat /proc/interrupts
# The guest's kernel leaves its few device IRQs (i8042, ttyS0, rtc, acpi)
# on CPU 0 alone, where there is nothing to move: spread them over both
# CPUs first, as on a machine where IRQs may go anywhere. Best effort:
# shield_ok below fails if none could be spread.
for d in /proc/irq/[0-9]*; do
    has_handler "${d##*/}" && echo 0-1 >"$d/smp_affinity_list" 2>/dev/null
done
snapshot /tmp/before
cat /tmp/before

# --- shield, SIGINT ------------------------------------------------------
start_scx /tmp/scx1.log --config /tmp/shield.toml
grep irq_shield /tmp/scx1.log
grep -q 'irqbalance' /tmp/scx1.log || fail "no irqbalance advice in the log"
shield_ok "first start" /tmp/scx1.log
express_split "shielded"
# Placement step 0 takes the shielded CPU whenever it is idle, which on
# this idle machine is nearly always (90-95% in local runs). The control
# below, without the shield, is printed, not asserted: the loop drifts
# between the CPUs (35-88% on CPU 1 in local runs).
[ $((shielded_runs * 100)) -ge $((all_runs * 75)) ] ||
    fail "express wakeups do not prefer the shielded CPU $SHIELD ($shielded_runs of $all_runs runs)"
echo "ok: express wakeups prefer the shielded CPU ($shielded_runs of $all_runs runs)"
stop_scx
same_as_before "after SIGINT"
[ ! -e "$STATE" ] || fail "the state file is left after a clean exit"

# --- kill -9, restart with the shield off ----------------------------------
start_scx /tmp/scx2.log --config /tmp/shield.toml
shield_ok "second start" /tmp/scx2.log
kill9 /tmp/scx2.log
printf '[express]\nirq_shield = false\n' >/tmp/reload.toml
start_scx /tmp/scx3.log --config /tmp/reload.toml
recovered /tmp/scx3.log "restart, shield off"
same_as_before "restart with the shield off"
express_split "control, no shield"
# A reload that turns the shield on changes nothing until the next start.
cp /tmp/shield.toml /tmp/reload.toml
kill -HUP "$SCX_PID"
wait_until 10 grep -q 'irq_shield.*take effect at the next start' /tmp/scx3.log ||
    { cat /tmp/scx3.log; fail "SIGHUP with irq_shield toggled: no 'next start' warning"; }
echo "ok: SIGHUP with irq_shield toggled says it takes effect at the next start"
same_as_before "after the SIGHUP"
[ ! -e "$STATE" ] || fail "the state file is left after recovery with the shield off"
stop_scx
same_as_before "after SIGINT of the unshielded restart"

# --- kill -9, restart with the shield on -----------------------------------
start_scx /tmp/scx4.log --config /tmp/shield.toml
kill9 /tmp/scx4.log
start_scx /tmp/scx5.log --config /tmp/shield.toml
grep irq_shield /tmp/scx5.log
recovered /tmp/scx5.log "restart, shield on"
shield_ok "restart, shield on" /tmp/scx5.log
stop_scx
same_as_before "after the final SIGINT"
[ ! -e "$STATE" ] || fail "the state file is left after the final clean exit"
