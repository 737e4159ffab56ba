#!/bin/sh
# Privilege: with the root service running from a root-owned 0644 config in
# /etc/scx_express/, the unprivileged user nobody cannot start a scheduler
# (error says it needs root; with or without --config), cannot `mark` nor
# `ps` (error says root), cannot list or read /sys/fs/bpf/scx_express/*,
# cannot signal the scheduler, and cannot append to, truncate, replace,
# delete or add a file next to the config. Afterwards nothing has changed:
# same scheduler pid, still attached, enable_seq and dmesg scheduler lines
# unchanged, a thread's class unchanged, pins and config byte-identical.
# vmtest: smp=2 timeout=240 bins=target/release/scx_express
# vmtest: files=workloads/build:/opt/w
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh

PINS=/sys/fs/bpf/scx_express
CFG=/etc/scx_express/config.toml

nr_sched_msgs() { dmesg | grep -c 'sched_ext: BPF scheduler'; }
class_of() {
    scx_express ps 2>/dev/null | awk -v t="$1" '$1 == t { print $4, $5; f = 1 } END { if (!f) print "none" }'
}
# denied DESC CMD: CMD, run as nobody, must fail; its output is kept in
# /tmp/denied.out.
denied() {
    if as_nobody "$2" >/tmp/denied.out 2>&1; then
        cat /tmp/denied.out
        fail "nobody could $1 ($2)"
    fi
    log "nobody cannot $1: $(head -c 240 /tmp/denied.out | tr '\n' ' ')"
}
says_root() {
    grep -qi 'root' /tmp/denied.out || fail "the error for '$1' does not say it needs root"
    echo "ok: nobody cannot $1, and is told it needs root"
}

# The service's config, as a package would install it (a short one, so the
# test does not follow every new key of configs/default.toml).
mkdir -p /etc/scx_express
cat >"$CFG" <<'TOML'
[fair]
rescue_ms = 50
[classes.gpu]
burst_ms = 20
rate = 0.5
TOML
chown -R 0:0 /etc/scx_express
chmod 0755 /etc/scx_express
chmod 0644 "$CFG"
check "the service config is valid" scx_express check-config "$CFG"

scx_express --config "$CFG" >/tmp/scx.log 2>&1 &
scx=$!
wait_sched_state enabled 90 || { cat /tmp/scx.log; fail "scheduler did not attach"; }
log "attached: ops $(sched_ops_name)"

# A marked thread whose class nobody will try to change.
/opt/w/mark_demo none 120 >/tmp/mark.out &
mk=$!
wait_until 10 grep -q '^tid=' /tmp/mark.out || fail "mark_demo did not start"
tid=$(sed -n 's/^tid=//p' /tmp/mark.out)
scx_express mark --tid "$tid" --class agent >/dev/null || fail "root mark failed"
wait_until 5 sh -c "scx_express ps | awk -v t=$tid '\$1 == t && \$4 == \"agent\" { f = 1 } END { exit !f }'" ||
    fail "root mark did not classify $tid"

# Everything that must not change.
snapshot() {
    {
        echo "pid-alive $(kill -0 "$scx" && echo yes)"
        echo "state $(sched_state)"
        echo "ops $(sched_ops_name)"
        echo "enable_seq $(enable_seq)"
        echo "sched-msgs $(nr_sched_msgs)"
        echo "class $tid $(class_of "$tid")"
        ls -li "$PINS"
        ls -lin /etc/scx_express
        md5sum "$CFG"
    } 2>&1
}
snapshot >/tmp/before
cat /tmp/before

check "the checks below really run as nobody" test "$(as_nobody id -u)" = 65534

# Scheduler, mark, ps.
denied "run the scheduler" "scx_express"
says_root "run the scheduler"
denied "run the scheduler with the service config" "scx_express --config $CFG"
says_root "run the scheduler with --config"
denied "mark a thread" "scx_express mark --tid $tid --class gpu"
says_root "mark"
denied "clear a mark" "scx_express mark --tid $tid --clear"
says_root "mark --clear"
denied "mark a process" "scx_express mark --pid $mk --class normal"
says_root "mark --pid"
denied "list classes" "scx_express ps"
says_root "ps"

# Pinned maps: the directory is root-only (0700).
denied "list $PINS" "ls $PINS"
for m in task_class task_ctxs proc_class; do
    denied "read $PINS/$m" "cat $PINS/$m"
    denied "remove $PINS/$m" "rm -f $PINS/$m"
done
echo "ok: nobody cannot list, read or remove the pins"

# Signals.
denied "signal the scheduler" "kill -TERM $scx"
denied "stop the scheduler" "kill -STOP $scx"
echo "ok: nobody cannot signal the scheduler"

# The service's config: root-owned 0644 in a root-owned 0755 directory.
denied "append to the config" "echo '[fair]' >>$CFG"
denied "truncate the config" ": >$CFG"
denied "replace the config" "echo x >/tmp/evil.toml && mv -f /tmp/evil.toml $CFG"
denied "delete the config" "rm -f $CFG"
denied "add a file to /etc/scx_express" "echo x >/etc/scx_express/evil.toml"
denied "change the config's mode" "chmod 0666 $CFG"
echo "ok: nobody cannot modify the config"
# Reading it is fine (0644); check-config needs no privilege.
check "nobody may validate the config" as_nobody "scx_express check-config $CFG"

# Observed, not asserted: statistics are read-only; say whether nobody can
# read them.
as_nobody "timeout 4 scx_express --monitor 1" >/tmp/monitor.out 2>&1
log "nobody --monitor: $(grep -cE '^\[(fair|express)\]' /tmp/monitor.out) stats line(s); $(grep -vE '^\[' /tmp/monitor.out | head -c 200 | tr '\n' ' ')"

# Nothing changed.
sleep 1
snapshot >/tmp/after
if ! diff /tmp/before /tmp/after; then
    fail "state changed after the unprivileged attempts (diff above)"
fi
echo "ok: nothing changed (scheduler, class of $tid, pins, config)"
[ ! -e /etc/scx_express/evil.toml ] || fail "a file appeared in /etc/scx_express"
if dmesg_has 'runnable task stall|sched_ext: .*(error|disabled)'; then
    dmesg | grep -E 'sched_ext|stall' | tail -20
    fail "the kernel reported a stall or a sched_ext error"
fi

kill "$mk"
SCX_PID=$scx
stop_scx
