#!/bin/sh
# Classification: a CUDA launcher (stand-in libcuda.so.1 exporting the real
# symbols) becomes gpu within 1 s of its first launch and `scx_express ps`
# shows it; its sibling thread stays normal; it is normal again after
# idle_demote_ms; a new process of an already-probed library that only
# launches (no sync yet) gets a launch window and is classified too, one
# that syncs gets none; a late dlopen() is caught; a cgroup rule, the shipped
# marker and `scx_express mark` each classify an agent stand-in; a non-root
# `mark` is refused and changes nothing.
# vmtest: smp=2 timeout=300 bins=target/release/scx_express files=workloads/build:/opt/w
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh

cat >/tmp/cfg.toml <<'CFG'
[classify]
idle_demote_ms = 1500
# No periodic launch window during the test: only the ones opened for a
# new library or a new CUDA process.
launch_period_ms = 600000
[[classify.rules]]
class = "agent"
cgroup_prefix = "/agents"
CFG
scx_express --config /tmp/cfg.toml -v >/tmp/scx.log 2>&1 &
scx=$!
wait_sched_state enabled 60 || { cat /tmp/scx.log; fail "scheduler did not attach"; }

# class_of TID: "CLASS SOURCE" from `scx_express ps`, or "none".
class_of() {
    scx_express ps 2>/dev/null | awk -v t="$1" '$1 == t { print $4, $5; f = 1 } END { if (!f) print "none" }'
}
# wait_class TID CLASS TIMEOUT_S: poll ps until TID has CLASS.
wait_class() {
    _t=$1 _c=$2
    wait_until "$3" sh -c "scx_express ps | awk -v t=$_t -v c=$_c '\$1 == t && \$4 == c { f = 1 } END { exit !f }'"
}
# wait_unclassified TID TIMEOUT_S: poll ps until TID is normal or not listed.
wait_unclassified() {
    wait_until "$2" sh -c "scx_express ps | awk -v t=$1 '\$1 == t && \$4 != \"normal\" { f = 1 } END { exit f }'"
}
fail_with_logs() {
    scx_express ps
    tail -n 30 /tmp/scx.log
    fail "$@"
}

# 1. A launcher is classified within 1 s of its first launch.
/opt/w/decode --duration 4 --idle-after 4 --linger 8 >/tmp/decode.out 2>&1 &
dec=$!
tid=$(line_value /tmp/decode.out launcher_tid 10) || fail "decode did not start"
t0=$(uptime_cs)
wait_class "$tid" gpu 5 || fail_with_logs "launcher $tid not classified gpu within 5 s"
dt=$(($(uptime_cs) - t0))
log "launcher $tid classified gpu after ${dt}0 ms"
[ "$dt" -le 100 ] || fail_with_logs "launcher classified after ${dt}0 ms, expected <= 1000 ms"
echo "ok: launcher classified gpu within 1 s (${dt}0 ms)"
scx_express ps | grep -E "^ *(TID|$tid) "

# 2. Its sibling (the main thread) never launches and stays normal.
c=$(class_of "$dec")
case "$c" in none | normal*) echo "ok: sibling thread $dec stays normal ($c)" ;;
*) fail_with_logs "sibling thread $dec is '$c', expected normal" ;; esac

# 3. After it stops launching, idle_demote_ms (1.5 s) makes it normal again.
wait_until 10 grep -q '"tok_s"\|tok/s\|tokens' /tmp/decode.out
wait_unclassified "$tid" 8 || fail_with_logs "launcher $tid still gpu after going idle"
echo "ok: idle launcher demoted to normal"
kill "$dec" 2>/dev/null

# 3b. A new process of the library probed above whose launcher only
# launches (its first sync is 10^9 launches away): the sync probes cannot
# see it, and periodic windows are off here, so only the window opened for
# a new CUDA process can classify it.
/opt/w/decode --launches 1000000000 --warmup 0 --tokens 1 >/tmp/nosync.out 2>&1 &
ns=$!
tid=$(line_value /tmp/nosync.out launcher_tid 10) || fail "decode (no sync) did not start"
wait_class "$tid" gpu 5 || fail_with_logs "launch-only launcher $tid of a new process not classified within 5 s"
echo "ok: launch-only launcher of a new process classified gpu ($(class_of "$tid"))"
grep -q "new CUDA process $ns: launch window soon" /tmp/scx.log || fail_with_logs "no window was asked for process $ns"
kill "$ns" 2>/dev/null

# 3c. A new process whose launcher syncs every token is classified by the
# sync probes, so it is not given a launch window (and its launches stay
# unprobed).
/opt/w/decode --duration 4 >/tmp/sync.out 2>&1 &
sy=$!
tid=$(line_value /tmp/sync.out launcher_tid 10) || fail "decode (syncing) did not start"
wait_class "$tid" gpu 5 || fail_with_logs "syncing launcher $tid of a new process not classified"
wait_until 5 grep -q "new CUDA process $sy: classified by its syncs, no window" /tmp/scx.log ||
    fail_with_logs "no decision logged for the syncing process $sy"
! grep -q "new CUDA process $sy: launch window soon" /tmp/scx.log ||
    fail_with_logs "the syncing process $sy was given a launch window"
echo "ok: a new process classified by its syncs gets no launch window"
kill "$sy" 2>/dev/null

# 4. A program that dlopen()s libcuda after the scheduler started.
/opt/w/decode --dlopen --dlopen-delay-ms 1500 --duration 4 >/tmp/dl.out 2>&1 &
dl=$!
tid=$(line_value /tmp/dl.out launcher_tid 10) || fail "decode --dlopen did not start"
line_value /tmp/dl.out dlopen_done_ms 10 >/dev/null || fail "decode --dlopen never loaded libcuda"
wait_class "$tid" gpu 5 || fail_with_logs "dlopen launcher $tid not classified"
echo "ok: dlopen()ed library found and launcher $tid classified gpu"
kill "$dl" 2>/dev/null

# 5. The shipped marker: express_mark_agent() from libexpress_mark.so.
/opt/w/mark_demo agent 20 >/tmp/mark.out &
mk=$!
tid=$(line_value /tmp/mark.out tid 10) || fail "mark_demo did not start"
wait_class "$tid" agent 5 || fail_with_logs "marker thread $tid not classified agent"
echo "ok: marker classified $tid agent ($(class_of "$tid"))"
kill "$mk"

# 6. A cgroup rule: moving a process into /agents makes it agent; out, normal.
mkdir -p /sys/fs/cgroup/agents
/opt/w/mark_demo none 20 >/tmp/cg.out &
cg=$!
tid=$(line_value /tmp/cg.out tid 10) || fail "mark_demo did not start"
sleep 1
c=$(class_of "$tid")
case "$c" in none | normal*) ;; *) fail_with_logs "unmarked thread is '$c' before the move" ;; esac
echo "$cg" >/sys/fs/cgroup/agents/cgroup.procs
wait_class "$tid" agent 5 || fail_with_logs "thread in /agents not classified agent by the rule"
echo "ok: cgroup rule classified $tid ($(class_of "$tid"))"
echo "$cg" >/sys/fs/cgroup/cgroup.procs
wait_unclassified "$tid" 5 || fail_with_logs "thread moved out of /agents still agent"
echo "ok: leaving the cgroup drops the rule's class"

# 7. `scx_express mark`, and 8. a non-root caller is refused.
scx_express mark --tid "$tid" --class agent || fail "mark failed"
wait_class "$tid" agent 2 || fail_with_logs "mark --tid did not classify $tid"
echo "ok: mark --tid classified $tid ($(class_of "$tid"))"
if as_nobody "scx_express mark --tid $tid --class gpu" >/tmp/nonroot.out 2>&1; then
    fail "non-root mark succeeded"
fi
cat /tmp/nonroot.out
grep -q root /tmp/nonroot.out || fail "non-root mark error does not say it needs root"
[ "$(class_of "$tid" | cut -d' ' -f1)" = agent ] || fail "non-root mark changed the class"
echo "ok: non-root mark refused, class unchanged"
check "the check below runs as nobody" test "$(as_nobody id -u)" = 65534
if as_nobody "cat /sys/fs/bpf/scx_express/task_class" >/dev/null 2>&1; then
    fail "non-root can open the pinned class map"
fi
echo "ok: non-root cannot open the pinned class map"
scx_express mark --pid "$cg" --class gpu || fail "mark --pid failed"
wait_class "$tid" gpu 2 || fail_with_logs "mark --pid did not classify $tid"
echo "ok: mark --pid classified the process's thread gpu"
kill "$cg"

SCX_PID=$scx
stop_scx
[ ! -e /sys/fs/bpf/scx_express ] || fail "pinned maps left behind after exit"
echo "ok: pins removed"
