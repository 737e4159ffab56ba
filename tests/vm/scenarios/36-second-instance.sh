#!/bin/sh
# A second `scx_express` started while one runs (a double start by an
# operator, a unit and a DaemonSet on the same node, a restart racing the
# old process) must fail promptly with a clear message and leave the
# running one intact: still attached with the same pid, enable_seq
# unchanged, its pins under /sys/fs/bpf/scx_express still in place (same
# inodes) so `ps` and `mark` keep working, and `--monitor` still reaching
# its stats server. The running one then detaches cleanly.
# vmtest: smp=2 timeout=180 bins=target/release/scx_express
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh

PINS=/sys/fs/bpf/scx_express

# monitor_ok: `--monitor` prints at least one stats line within 6 s.
monitor_ok() {
    timeout 6 scx_express --monitor 1 >/tmp/monitor.out 2>&1
    grep -qE '^\[(fair|express)\]' /tmp/monitor.out
}

scx_express >/tmp/scx1.log 2>&1 &
scx=$!
wait_sched_state enabled 90 || { cat /tmp/scx1.log; fail "scheduler did not attach"; }
log "first instance attached: ops $(sched_ops_name)"
# shellcheck disable=SC2012 # inode numbers, of names bpffs fixes
pins_before=$(ls -i "$PINS" | sort)
check "--monitor reaches the first instance" monitor_ok
seq1=$(enable_seq)

timeout 60 scx_express >/tmp/dup.log 2>&1
rc=$?
cat /tmp/dup.log
log "second instance: rc=$rc"
[ "$rc" != 0 ] || fail "a second instance exited 0"
[ "$rc" != 124 ] || fail "a second instance did not exit within 60 s"
grep -qiE 'already|another sched_ext scheduler' /tmp/dup.log ||
    fail "the second instance's error does not say a scheduler is already running"
echo "ok: a second instance fails with a clear message (rc=$rc)"

# Every check below runs, so one boot reports everything that broke.
expect "first instance still attached" \
    "state is $(sched_state)" \
    sched_state_is enabled
expect "first instance alive" \
    "first instance died" \
    kill -0 "$scx"
expect "enable_seq unchanged" \
    "enable_seq moved: the second instance replaced the first" \
    [ "$(enable_seq)" = "$seq1" ]
# shellcheck disable=SC2012 # as for pins_before
pins_after=$(ls -i "$PINS" 2>&1 | sort)
if [ "$pins_after" = "$pins_before" ]; then
    echo "ok: the first instance's pins are untouched"
else
    echo "pins before: $pins_before" | tr '\n' ' '; echo
    echo "pins after:  $pins_after" | tr '\n' ' '; echo
    bad "the second instance removed or replaced the first instance's pins"
fi
if scx_express ps >/tmp/ps.out 2>&1; then echo "ok: ps still works"; else
    cat /tmp/ps.out; bad "ps fails after the second instance"; fi
if monitor_ok; then echo "ok: --monitor still reaches the first instance"; else
    cat /tmp/monitor.out; bad "--monitor no longer reaches the first instance"; fi
[ "$errors" = 0 ] || fail "$errors check(s) failed after a second instance"

SCX_PID=$scx
stop_scx
[ ! -e "$PINS" ] || fail "pins left behind after a clean exit"
echo "ok: no pins left behind"
