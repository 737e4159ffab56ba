#!/bin/sh
# Crash recovery. (1) SIGSTOP the running scheduler for 10 s under CPU load
# with the decode stand-in (classified gpu) running,
# in the default fair mode (BPF schedules everything; userspace is not
# needed) and, on the second start, in fair.mode = "userspace" (BPF rescues
# the tasks userspace no longer serves): a command still completes, the
# express launcher keeps getting CPU, nothing
# stalls and the scheduler stays attached; SIGCONT resumes it. (2) `kill -9` it: the kernel falls back by itself (state
# disabled within 30 s, no stall) and the pins under /sys/fs/bpf/scx_express
# stay behind, stale. (3) A new start copes: it attaches, says it removed
# the stale pins, and `ps` reads the new scheduler's maps (a marker thread
# classified by the live BPF shows up as agent); SIGINT then detaches it
# and removes the pins.
# vmtest: smp=2 timeout=300 bins=target/release/scx_express,/usr/bin/stress-ng
# vmtest: files=workloads/build:/opt/w
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh

PINS=/sys/fs/bpf/scx_express

no_stall() {
    if dmesg_has 'runnable task stall|sched_ext: .*(error|watchdog)'; then
        dmesg | grep -E 'sched_ext|stall' | tail -20
        fail "$1: the kernel reported a stall or a sched_ext error"
    fi
}
pins_present() {
    for _m in task_class task_ctxs proc_class; do
        [ -e "$PINS/$_m" ] || return 1
    done
}
expect_express() {
    _ops=$(sched_ops_name)
    case "$_ops" in
    express*) echo "ok: $1: attached, ops '$_ops'" ;;
    *) fail "$1: ops name '$_ops' does not start with express" ;;
    esac
}

# --- first instance ------------------------------------------------------
scx_express >/tmp/scx1.log 2>&1 &
scx=$!
wait_sched_state enabled 90 || { cat /tmp/scx1.log; fail "scheduler did not attach"; }
expect_express "first start"
check "pins created" pins_present
check "ps works" sh -c 'scx_express ps >/dev/null'

# --- (1) SIGSTOP: BPF keeps the machine running without userspace ---------
sigstop_check() {
    # An express task too: the decode stand-in, classified gpu before the stop.
    /opt/w/decode --duration 40 >/tmp/decode.out 2>&1 &
    dec=$!
    wait_until 20 grep -q '^launcher_tid=' /tmp/decode.out || fail "$1: decode did not start"
    ltid=$(sed -n 's/^launcher_tid=//p' /tmp/decode.out | head -n 1)
    wait_until 30 classified_as "$ltid" gpu || fail "$1: the decode launcher was not classified gpu"
    # Past the stop below (3 s, the probe, 8 s) by a few seconds.
    stress-ng --cpu 4 --timeout 16s >/tmp/stress.log 2>&1 &
    stress=$!
    sleep 3
    track launcher "$ltid" "$dec"
    kill -STOP "$scx"
    log "$1: scheduler stopped (SIGSTOP) under stress-ng --cpu 4"
    t0=$(uptime_cs)
    # A short-lived task must still get CPU while userspace is frozen.
    # shellcheck disable=SC2016 # the inner sh expands it
    timeout 10 sh -c 'i=0; while [ $i -lt 2000 ]; do i=$((i + 1)); done; echo done' >/tmp/probe.out 2>&1
    rc=$?
    dt=$(($(uptime_cs) - t0))
    [ "$rc" = 0 ] || fail "$1: a shell loop did not complete within 10 s while the scheduler was stopped (rc=$rc)"
    echo "ok: $1: a shell loop completed in ${dt}0 ms with the scheduler stopped"
    sleep 8
    check "$1: still attached while stopped" sched_state_is enabled
    tracked_progressed "$1: while stopped"
    untrack launcher
    kill -CONT "$scx"
    log "$1: scheduler resumed (SIGCONT)"
    wait "$stress" || fail "$1: stress-ng exited $? (tasks starved while the scheduler was stopped?)"
    echo "ok: $1: stress-ng completed"
    check "$1: still attached after SIGCONT" sched_state_is enabled
    check "$1: scheduler alive after SIGCONT" kill -0 "$scx"
    no_stall "$1: SIGSTOP"
    echo "ok: $1: no stall while userspace was stopped; the express launcher ran"
    kill "$dec" 2>/dev/null
    wait "$dec"
}
SCX_LOG=/tmp/scx1.log
sigstop_check "fair.mode bpf"

# --- (2) kill -9 ---------------------------------------------------------
seq1=$(enable_seq)
kill -9 "$scx"
wait "$scx"
rc=$?
log "kill -9: scx_express rc=$rc"
[ "$rc" = 137 ] || fail "scx_express exit status $rc after kill -9, expected 137"
wait_sched_state disabled 30 || fail "state did not return to disabled after kill -9"
echo "ok: kernel fell back to the default scheduler (state disabled)"
dmesg | grep 'sched_ext' | tail -n 3
no_stall "kill -9"
pins_present || fail "kill -9 left no pins: the stale-pin case below would test nothing"
# shellcheck disable=SC2012 # a listing to read, of names bpffs fixes
echo "ok: kill -9 left stale pins: $(ls "$PINS" | tr '\n' ' ')"
# Observed, not asserted: what mark/ps do with stale pins and no scheduler.
sleep 60 &
victim=$!
scx_express mark --tid "$victim" --class agent >/tmp/stale-mark.out 2>&1
log "mark with stale pins and no scheduler: rc=$? $(tr '\n' ' ' </tmp/stale-mark.out)"
scx_express ps >/tmp/stale-ps.out 2>&1
log "ps with stale pins and no scheduler: rc=$? $(head -c 200 /tmp/stale-ps.out | tr '\n' ' ')"
kill "$victim"

# --- (3) a new start over stale pins -------------------------------------
printf '[fair]\nmode = "userspace"\n' >/tmp/user.toml
scx_express --config /tmp/user.toml >/tmp/scx2.log 2>&1 &
scx=$!
wait_sched_state enabled 90 || { cat /tmp/scx2.log; fail "second start did not attach over stale pins"; }
expect_express "second start"
[ "$(enable_seq)" -gt "$seq1" ] || fail "enable_seq did not move on the second start"
grep 'stale pin' /tmp/scx2.log
grep -q 'removing stale pin' /tmp/scx2.log || fail "second start did not report removing the stale pins"
echo "ok: second start removed the stale pins"
check "pins re-created" pins_present

# The pins must now lead to the live scheduler's maps: a marker hit is
# written by the new BPF programs, and ps must see it.
/opt/w/mark_demo agent 30 >/tmp/mark.out &
mk=$!
wait_until 10 grep -q '^tid=' /tmp/mark.out || fail "mark_demo did not start"
tid=$(sed -n 's/^tid=//p' /tmp/mark.out)
if ! wait_until 10 sh -c "scx_express ps | awk -v t=$tid '\$1 == t && \$4 == \"agent\" { f = 1 } END { exit !f }'"; then
    scx_express ps
    tail -n 20 /tmp/scx2.log
    fail "ps does not show the marker thread $tid as agent: pins do not lead to the live maps"
fi
echo "ok: ps reads the live maps (marker thread $tid is agent)"
kill "$mk"
check "second instance alive" kill -0 "$scx"
no_stall "second start"
SCX_LOG=/tmp/scx2.log
sigstop_check "fair.mode userspace"

SCX_PID=$scx
stop_scx
[ ! -e "$PINS" ] || fail "pins left behind after a clean exit"
echo "ok: pins removed"
