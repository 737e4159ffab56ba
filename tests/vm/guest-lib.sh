# shellcheck shell=sh
# Helpers for VM test scenarios (busybox ash / POSIX sh). In a scenario:
#   . /lib/vmtest/guest-lib.sh
# fail and check exit the calling shell: call them from the scenario's main
# shell, not from a subshell or pipeline, or only that subshell exits.

SCX_SYSFS=/sys/kernel/sched_ext

# _now_cs: set $_now to the guest uptime in centiseconds, without forking.
_now_cs() {
    read -r _up _ </proc/uptime
    _f=${_up#*.}
    _now=$((${_up%.*} * 100 + ${_f#0}))
}

# uptime_cs: print the guest uptime in centiseconds.
uptime_cs() {
    _now_cs
    echo "$_now"
}

# log MSG...: a line on the console, stamped with the guest uptime.
log() {
    _now_cs
    printf '[%d.%02d] %s\n' $((_now / 100)) $((_now % 100)) "$*"
}

# fail MSG...: report a failure and end the scenario with rc 1.
fail() {
    echo "FAIL: $*"
    exit 1
}

# check DESC CMD [ARGS...]: run CMD; fail the scenario unless it exits 0.
check() {
    _desc=$1
    shift
    if "$@"; then
        echo "ok: $_desc"
    else
        fail "$_desc (rc=$?: $*)"
    fi
}

# wait_until TIMEOUT_S CMD [ARGS...]: poll CMD every 0.1 s until it exits 0
# (return 0) or TIMEOUT_S seconds pass (return 1).
wait_until() {
    _now_cs
    _deadline=$((_now + $1 * 100))
    shift
    while ! "$@"; do
        _now_cs
        [ "$_now" -lt "$_deadline" ] || return 1
        sleep 0.1
    done
}

# sched_state: print the sched_ext state (enabled, disabled, enabling, ...).
sched_state() {
    cat "$SCX_SYSFS/state" 2>/dev/null || echo unavailable
}

# sched_state_is STATE: true if sched_ext is in STATE now (no fork).
sched_state_is() {
    read -r _st 2>/dev/null <"$SCX_SYSFS/state" && [ "$_st" = "$1" ]
}
_sched_state_is() { sched_state_is "$@"; } # older name

# wait_sched_state STATE TIMEOUT_S: wait until sched_ext is in STATE (e.g.
# enabled, disabled). Returns 1 and logs the actual state on timeout.
wait_sched_state() {
    if wait_until "$2" sched_state_is "$1"; then return 0; fi
    log "sched_ext state is '$(sched_state)', not '$1', after $2 s"
    return 1
}

# sched_ops_name: print the loaded BPF scheduler's name; returns 1 if none.
# Falls back to the last "BPF scheduler "NAME" enabled" kernel message.
sched_ops_name() {
    if [ -r "$SCX_SYSFS/root/ops" ]; then
        cat "$SCX_SYSFS/root/ops"
        return 0
    fi
    [ "$(sched_state)" = enabled ] || return 1
    _name=$(dmesg | sed -n 's/.*sched_ext: BPF scheduler "\([^"]*\)" enabled.*/\1/p' | tail -n 1)
    [ -n "$_name" ] || return 1
    echo "$_name"
}

# dmesg_has PATTERN: true if the kernel log matches the extended regex.
dmesg_has() {
    dmesg | grep -qE -- "$1"
}

# task_stat PID: the fields of /proc/PID/stat from field 3 (state) on.
# comm (field 2) may hold spaces and parentheses, so cut after its last ')'.
task_stat() {
    _stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    echo "${_stat##*") "}"
}

# task_cputime PID: utime+stime of a task in clock ticks ($VMTEST_CLK_TCK,
# 100 per second): fields 14 and 15 of /proc/PID/stat, the 12th and 13th
# that task_stat prints.
task_cputime() {
    _fields=$(task_stat "$1") || return 1
    echo "$_fields" | awk '{ print $12 + $13 }'
}

# boot_arg NAME: the value of NAME=VALUE on the kernel command line (the
# last one given), empty if absent. Bundled benchmarks take per-boot
# choices this way (runner.sh --append NAME=VALUE).
boot_arg() {
    _val=
    read -r _line </proc/cmdline
    for _arg in $_line; do
        case $_arg in "$1"=*) _val=${_arg#*=} ;; esac
    done
    echo "$_val"
}

# export_file PATH [NAME]: send a guest file to the host through the console.
# run.sh --out-dir DIR saves it as DIR/NAME (default: basename of PATH).
export_file() {
    _name=${2:-$(basename "$1")}
    [ -f "$1" ] || { log "export_file: no such file: $1"; return 1; }
    echo "@@VMTEST-FILE name=$_name md5=$(md5sum <"$1" | cut -d' ' -f1)@@"
    base64 <"$1"
    echo "@@VMTEST-FILE-END@@"
}

# as_nobody CMD...: run a shell command line as the unprivileged user nobody
# (uid 65534), creating the account on first use.
as_nobody() {
    grep -q '^nobody:' /etc/passwd 2>/dev/null ||
        echo 'nobody:x:65534:65534:nobody:/:/bin/sh' >>/etc/passwd
    grep -q '^nogroup:' /etc/group 2>/dev/null ||
        echo 'nogroup:x:65534:' >>/etc/group
    su -s /bin/sh nobody -c "$*"
}

# scx_stat KEY: one counter of the running scx_express (e.g. classes.gpu.prev).
scx_stat() {
    scx_express stats --flat 2>/dev/null | awk -v k="$1" '$1 == k { print $2; f = 1 } END { if (!f) print 0 }'
}

# Stats are snapshots taken once a second: values that are compared with
# each other must come from one snapshot, or a refresh between two reads
# skews them. stats_snapshot FILE saves one; snap_sum FILE KEY... prints the
# sum of KEYs in it (0 for a missing key).
stats_snapshot() {
    scx_express stats --flat >"$1" 2>/dev/null
}
snap_sum() {
    _f=$1
    shift
    awk -v keys="$*" 'BEGIN { n = split(keys, k, " "); for (i = 1; i <= n; i++) want[k[i]] = 1 }
        ($1 in want) { s += $2 } END { print s + 0 }' "$_f"
}
# snap_delta FROM TO KEY...: how much the sum of KEYs grew from snapshot FROM
# to snapshot TO.
snap_delta() {
    _from=$1 _to=$2
    shift 2
    echo $(($(snap_sum "$_to" "$@") - $(snap_sum "$_from" "$@")))
}

# hold_summary FROM TO CLASS: one line of CLASS's holds between two
# snapshots: taken back, each reason a hold was refused or cut short, the
# time held and where its wakeups landed (tests 46 and 56 print it).
hold_summary() {
    _d() { snap_delta "$1" "$2" "classes.$3.$4"; }
    printf 'holds %s (%s whole-sleep; taken back %s; refused %s for quota, %s irregular; ' \
        "$(_d "$@" holds)" "$(_d "$@" hold_whole)" "$(_d "$@" hold_back)" "$(_d "$@" hold_no_quota)" \
        "$(_d "$@" hold_irregular)"
    printf '%s taken by others, %s back before the window), held %s us; wakeups: prev %s, preempt %s\n' \
        "$(_d "$@" hold_taken)" "$(_d "$@" hold_early)" "$(_d "$@" held_us)" "$(_d "$@" prev)" "$(_d "$@" preempt)"
}

# start_scx LOG [ARGS...]: start scx_express (or the build named by
# $SCX_BIN, one added with --bin) in the background with its output in
# LOG, set $SCX_PID, and wait (up to 60 s) until it is attached.
# Fails the scenario at once if it exits first, showing its log.
# `scx_express stats`, `ps` and `mark` talk to whichever build runs.
start_scx() {
    _log=$1
    shift
    _seq_before=$(enable_seq)
    "${SCX_BIN:-scx_express}" "$@" >"$_log" 2>&1 &
    SCX_PID=$!
    _now_cs
    _deadline=$((_now + 6000))
    while ! sched_state_is enabled; do
        if ! kill -0 "$SCX_PID" 2>/dev/null; then
            cat "$_log"
            fail "scx_express exited before attaching"
        fi
        _now_cs
        [ "$_now" -lt "$_deadline" ] || { cat "$_log"; fail "scx_express did not attach in 60 s"; }
        sleep 0.1
    done
    # The kernel counts an enable (enable_seq) only after it has set the
    # state to enabled and logged it: read at once, the count can still be
    # the old one (CI caught it under TCG), and a test comparing counts
    # would take the late increment for an ejection.
    wait_until 10 _enable_seq_above "$_seq_before" || {
        cat "$_log"
        fail "enable_seq stayed $_seq_before after the attach"
    }
}
_enable_seq_above() { [ "$(enable_seq)" -gt "$1" ]; }

# stop_scx: SIGINT the scx_express started by start_scx; fail unless it
# exits 0 and sched_ext returns to disabled.
# stuck_dump WHY: what a hang needs: each CPU's run-queue length, current
# and queued tasks (the kernel's sched debug file), the sched_ext state dump
# (sysrq D: the kernel writes it only to its sched_ext_dump trace event) and
# the kernel's last messages.
stuck_dump() {
    echo "STUCK: $*"
    if [ -r /sys/kernel/debug/sched/debug ]; then
        grep -E '^cpu#|  \.nr_running|  \.curr->pid|^runnable tasks|^ *[>RSD] ' /sys/kernel/debug/sched/debug | head -n 120
    fi
    [ -e /sys/kernel/tracing/trace ] || mount -t tracefs none /sys/kernel/tracing 2>/dev/null
    echo 1 >/sys/kernel/tracing/events/sched_ext/sched_ext_dump/enable 2>/dev/null
    echo D >/proc/sysrq-trigger 2>/dev/null
    sleep 1
    grep -v '^#' /sys/kernel/tracing/trace 2>/dev/null | sed 's/^.*sched_ext_dump: //' | tail -n 80
    dmesg -s 1048576 | tail -n 200
}

stop_scx() {
    kill -INT "$SCX_PID"
    # A detach that hangs (uprobe removal waits for RCU) shows why.
    (sleep 30; alive "$SCX_PID" && stuck_dump "scx_express still running 30 s after SIGINT") &
    _dw=$!
    wait "$SCX_PID"
    _rc=$?
    kill "$_dw" 2>/dev/null
    [ "$_rc" = 0 ] || fail "scx_express exited $_rc after SIGINT"
    wait_sched_state disabled 10 || fail "sched_ext did not return to disabled"
    echo "ok: scx_express detached (exit 0, state disabled)"
}

# enable_seq: how many times a sched_ext scheduler has been enabled since
# boot; unchanged across a test means no ejection and no re-attach.
enable_seq() {
    if [ -r "$SCX_SYSFS/enable_seq" ]; then
        cat "$SCX_SYSFS/enable_seq"
    else
        dmesg | grep -c 'sched_ext: BPF scheduler ".*" enabled'
    fi
}

# Checks that all run, so one boot reports everything that broke:
#   expect OK_MSG BAD_MSG CMD...  prints "ok: OK_MSG" if CMD succeeds, else
#                                 "FAIL: BAD_MSG" and counts it in $errors;
#   bad MSG                       counts a failure found otherwise.
# The scenario ends with: [ "$errors" = 0 ] || fail "..."
errors=0
bad() { echo "FAIL: $*"; errors=$((errors + 1)); }
expect() {
    _okm=$1 _badm=$2
    shift 2
    if "$@"; then echo "ok: $_okm"; else bad "$_badm"; fi
}

# ---- Hostile conditions: the scheduler must stay attached --------------
# A scenario starts the scheduler with start_guarded, starts the stand-ins
# with start_standins and its own load, registers every task that must keep
# running with track, then checks with guarded_ok and tracked_progressed as
# often as it likes and ends with finish_standins and stop_scx.

# A config whose comm rule makes the agent stand-in's loop thread agent
# (the decode stand-in is classified gpu by its CUDA calls).
# shellcheck disable=SC2034 # used by the scenarios that source this file
AGENT_RULE_TOML='[[classify.rules]]
class = "agent"
comm = "agent-loop"'

# The hostile-load scenarios (50-54) run their load for two watchdog
# periods with the kernel's watchdog at 10 s (fair.watchdog_ms), a third of
# the default 30 s: a task left runnable for 10 s ejects the scheduler, so
# 20 s of load shows what 40 s showed at the default, in half the time.
WATCHDOG_MS=10000
# start_loaded LOG [LINE...]: start_guarded such a scenario's scheduler,
# logging to LOG, with /tmp/scx.toml: AGENT_RULE_TOML and a [fair] table
# with watchdog_ms = WATCHDOG_MS and the LINEs; its log must show that
# watchdog in force.
start_loaded() {
    _sl_log=$1
    shift
    printf '%s\n[fair]\nwatchdog_ms = %s\n' "$AGENT_RULE_TOML" "$WATCHDOG_MS" >/tmp/scx.toml
    for _l in "$@"; do echo "$_l" >>/tmp/scx.toml; done
    start_guarded "$_sl_log" --config /tmp/scx.toml
    wait_until 10 grep -q "attached (.*watchdog $WATCHDOG_MS ms)" "$_sl_log" ||
        fail_sl_logs "the scheduler's log does not show watchdog $WATCHDOG_MS ms"
}

# dump_scx_logs: what a failure needs: classified threads, the scheduler's
# exit dump (runnable tasks, their DSQs and deadlines) or its log's end,
# and the kernel's sched_ext, stall and OOM lines.
dump_scx_logs() {
    scx_express ps 2>&1 | head -n 20
    # The guards that move a task by themselves, since the start.
    scx_express stats --flat 2>/dev/null | grep -E '^(fair_starved|fair_kept_local|rescued) ' | tr '\n' ' '
    echo
    if grep -q 'DEBUG DUMP' "$SCX_LOG" 2>/dev/null; then
        sed -n '/DEBUG DUMP/,$p' "$SCX_LOG" | head -n 300
    else
        tail -n 30 "$SCX_LOG" 2>/dev/null
    fi
    dmesg | grep -E 'sched_ext|stall|oom|Out of memory|CPU[0-9]' | tail -n 20
}
# fail_logs MSG: dump_scx_logs, then fail.
fail_logs() {
    dump_scx_logs
    fail "$@"
}

# start_guarded LOG [ARGS...]: start_scx, then remember its log ($SCX_LOG)
# and enable_seq ($SCX_SEQ0) for guarded_ok.
start_guarded() {
    SCX_LOG=$1
    start_scx "$@"
    SCX_SEQ0=$(enable_seq)
    log "attached: ops $(sched_ops_name), enable_seq $SCX_SEQ0"
}

# Kernel lines that mean a task starved or the scheduler erred: the
# sched_ext watchdog, a sched_ext error or disable, an RCU stall.
STALL_ERE='runnable task stall|sched_ext: .*(error|disabled)|rcu: .*detected stall|self-detected stall'

# guarded_ok WHEN: the scheduler process lives, sched_ext is enabled with
# ops express*, it was never ejected (enable_seq unchanged: not even an
# ejection that the restart loop hid), and dmesg has no STALL_ERE line.
guarded_ok() {
    kill -0 "$SCX_PID" 2>/dev/null || fail_logs "$1: scx_express is gone"
    sched_state_is enabled || fail_logs "$1: sched_ext state is $(sched_state)"
    case "$(sched_ops_name)" in
    express*) ;;
    *) fail_logs "$1: ops are '$(sched_ops_name)', not express*" ;;
    esac
    [ "$(enable_seq)" = "$SCX_SEQ0" ] ||
        fail_logs "$1: the scheduler was ejected (enable_seq $SCX_SEQ0 -> $(enable_seq))"
    if dmesg_has "$STALL_ERE"; then
        dmesg | grep -E "$STALL_ERE" | head -n 5
        fail_logs "$1: the kernel reported a stall or a sched_ext error"
    fi
}

# thread_cputime TID: CPU ticks of one thread (its /proc/TID/stat), -1 if gone.
thread_cputime() { task_cputime "$1" || echo -1; }
# alive PID: the process exists and has not exited (a zombie has).
alive() {
    _st=$(task_stat "$1") || return 1
    [ "${_st%% *}" != Z ]
}

# track NAME TID [PID]: tracked_progressed checks that thread TID's CPU
# time grows while it exists. PID is its process (default TID): once that
# has ended (a zombie), its thread is excused too.
_tracked=''
track() {
    _tracked="$_tracked $1"
    eval "_tid_$1=$2 _pid_$1=${3:-$2} _ct_$1=$(thread_cputime "$2")"
}
# untrack NAME: stop watching NAME (a task the scenario ends itself).
untrack() {
    _l=''
    for _n in $_tracked; do [ "$_n" = "$1" ] || _l="$_l $_n"; done
    _tracked=$_l
}
# tracked_progressed WHEN: every tracked thread got CPU time since the last
# call (or track); logs each one's gain in ticks.
# shellcheck disable=SC2154 # _t, _p and _b are set by the eval
tracked_progressed() {
    _gains=''
    for _n in $_tracked; do
        eval "_t=\$_tid_$_n _p=\$_pid_$_n _b=\$_ct_$_n"
        _a=$(thread_cputime "$_t")
        # A thread that has exited did not stall (how its process ended is
        # the scenario's to check); a stalled one is still there.
        if [ "$_a" = -1 ]; then
            _gains="$_gains $_n:ended"
            untrack "$_n"
            continue
        fi
        if [ "$_a" -le "$_b" ] && alive "$_p"; then
            # R: runnable, waiting for a CPU (the scheduler's); S or D:
            # asleep, waiting on something else; the CPU it last ran on.
            _st=$(task_stat "/$_p/task/$_t" | awk '{ print $1, "last on CPU", $37 }')
            fail_logs "$1: $_n (tid $_t) made no progress (CPU ticks $_b -> $_a; state ${_st:-?}, wchan $(cat "/proc/$_p/task/$_t/wchan" 2>/dev/null))"
        fi
        eval "_ct_$_n=$_a"
        _gains="$_gains $_n+$((_a - _b))"
    done
    log "$1: CPU ticks gained:$_gains"
}

# watch_guarded SECS INTERVAL: for SECS seconds of guest time, every INTERVAL
# seconds: guarded_ok and tracked_progressed.
watch_guarded() {
    _now_cs
    _wend=$((_now + $1 * 100))
    _w0=$_now
    while [ "$_now" -lt "$_wend" ]; do
        sleep "$2"
        _now_cs
        guarded_ok "t=$(((_now - _w0) / 100))s"
        tracked_progressed "t=$(((_now - _w0) / 100))s"
        _now_cs
    done
}

# start_standins SECS [PREFIX]: the decode (gpu) and agent stand-ins for
# up to SECS seconds (finish_standins ends them sooner), PREFIX (e.g. "taskset -c 1") before each; sets DEC, AGT
# (pids), LTID, ATID (their launcher and agent-loop threads), waits until
# scx_express has classified both, and tracks both threads. Needs a
# scheduler started with AGENT_RULE_TOML in its config.
start_standins() {
    $2 /opt/w/decode --duration "$1" >/tmp/decode.out 2>&1 &
    DEC=$!
    $2 /opt/w/agent --duration "$1" >/tmp/agent.out 2>&1 &
    AGT=$!
    wait_until 20 grep -q '^launcher_tid=' /tmp/decode.out || fail_logs "decode did not start"
    wait_until 20 grep -q '^agent_tid=' /tmp/agent.out || fail_logs "agent did not start"
    LTID=$(sed -n 's/^launcher_tid=//p' /tmp/decode.out | head -n 1)
    ATID=$(sed -n 's/^agent_tid=//p' /tmp/agent.out | head -n 1)
    wait_until 30 classified_as "$LTID" gpu ||
        fail_logs "the decode launcher $LTID was not classified gpu"
    wait_until 30 classified_as "$ATID" agent ||
        fail_logs "the agent loop $ATID was not classified agent"
    log "stand-ins: decode launcher $LTID (gpu), agent loop $ATID (agent)"
    track launcher "$LTID" "$DEC"
    track agent_loop "$ATID" "$AGT"
}
# classified_as TID CLASS: scx_express ps lists thread TID with CLASS.
classified_as() {
    scx_express ps 2>/dev/null | awk -v t="$1" -v c="$2" '$1 == t && $4 == c { f = 1 } END { exit !f }'
}

# finish_standins: end both stand-ins' runs now (SIGUSR1: each reports what
# it measured so far, workloads/common.h) and wait for them; each must exit
# 0 and report work (at least one token, one agent step). A scenario gives
# start_standins a run with room for a slow start; this spares waiting
# out that room once its checks are done.
finish_standins() {
    kill -USR1 "$DEC" "$AGT" 2>/dev/null
    wait "$DEC" || fail_logs "decode exited $?"
    wait "$AGT" || fail_logs "agent exited $?"
    untrack launcher
    untrack agent_loop
    _tokens=$(sed -n 's/^tokens=//p' /tmp/decode.out)
    _steps=$(sed -n 's/^steps=//p' /tmp/agent.out)
    log "decode: tokens=$_tokens tok/s=$(sed -n 's/^tok_per_s=//p' /tmp/decode.out); agent: steps=$_steps tail_p99_us=$(sed -n 's/^tail_p99_us=//p' /tmp/agent.out)"
    [ "${_tokens:-0}" -ge 1 ] || fail_logs "decode did no token"
    [ "${_steps:-0}" -ge 1 ] || fail_logs "agent did no step"
    echo "ok: the stand-ins finished their run (decode $_tokens tokens, agent $_steps steps)"
}

# bench_disk_jobs: how many fio jobs the bench's disk noise runs in this
# guest, 2 per vCPU: the noise grows with the guest, as the CPU hogs do
# (tools/bench/src/guest.sh). Probes that measure what the bench measures
# export DISK_NOISE_JOBS=$(bench_disk_jobs).
bench_disk_jobs() { echo $((2 * VMTEST_SMP)); }

# disk_noise SECS FIO_ARGS... &: the bench's disk noise, fio random 4 KiB
# writes, 4 jobs ($DISK_NOISE_JOBS if set, e.g. bench_disk_jobs) at
# iodepth 32 through libaio, for SECS s. Always start it
# with &: it execs fio, so $! is fio's pid, to wait for or kill. FIO_ARGS
# name the target and the output (e.g. --filename=$VMTEST_DISK --direct=1);
# $DISK_NOISE_PREFIX, if set, goes before fio (e.g. "taskset -c 1"). The
# bench (tools/bench/src/guest.sh) and the probes in tools/bench/vm/ all
# call this one, so that a probe keeps measuring what the bench measures.
disk_noise() {
    _secs=$1
    shift
    # shellcheck disable=SC2086 # DISK_NOISE_PREFIX is a word list
    exec $DISK_NOISE_PREFIX fio --name=noise "$@" --rw=randwrite --bs=4k --iodepth=32 \
        --numjobs="${DISK_NOISE_JOBS:-4}" --ioengine=libaio --time_based --runtime="$_secs"
}

# hackbench_once: the seconds of one `hackbench -g 8 -l 400`, the workload
# the ordinary-task benchmarks (tools/bench/vm) share: 8 groups of 20
# senders and 20 receivers, each sender 400 messages to each receiver,
# HACKBENCH_MSGS in all.
# shellcheck disable=SC2034 # read by the scripts that source this file
HACKBENCH_MSGS=1280000
hackbench_once() { hackbench -g 8 -l 400 2>&1 | sed -n 's/^Time: *//p'; }

# median: the median of the numbers on stdin, one per line (the mean of the
# middle two for an even count).
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# json_num FILE KEY: KEY's number in the JSON that FILE holds (the first).
json_num() { grep -o "\"$2\":[0-9.]*" "$1" | head -n 1 | cut -d: -f2; }

# line_value FILE KEY TIMEOUT_S: wait (up to TIMEOUT_S) for a whole
# "KEY=<number>" line in FILE (ids, or a decimal such as 12.5; a line still
# being written does not count) and print the number; status 1 if none came.
# The file may not exist yet: its writer starts in the background.
_line_num() { sed -n "s/^$2=\([0-9][0-9.]*\)\$/\1/p" "$1" 2>/dev/null | head -n 1; }
_has_line_num() { [ -n "$(_line_num "$1" "$2")" ]; }
line_value() {
    wait_until "$3" _has_line_num "$1" "$2" || return 1
    _line_num "$1" "$2"
}

# mark_agent_ids OUT [SERVER]: once the agent stand-in writing OUT (a file
# removed before it started, so that no old ids are read) has printed its
# ids (up to 10 s each), mark its loop thread `agent` and, unless SERVER is
# 0, its tool-server process. Fails the scenario if either mark fails: an
# unmarked server changes what is measured.
mark_agent_ids() {
    _tid=$(line_value "$1" agent_tid 10) || fail "the agent printed no agent_tid"
    scx_express mark --tid "$_tid" --class agent >/dev/null || fail "marking the agent loop failed"
    [ "${2:-1}" = 0 ] && return 0
    _srv=$(line_value "$1" tool_server_pid 10) || fail "the agent printed no tool_server_pid"
    scx_express mark --pid "$_srv" --class agent >/dev/null || fail "marking the tool server failed"
}

# agent_once MARK SECS [PREFIX...]: one run of the agent stand-in
# (/opt/w/agent) measuring SECS s after its warmup (200 steps, at most
# 2 s), its output in /tmp/agent.out, run under PREFIX (e.g. taskset -c 0)
# if given. MARK: 1 marks its loop and tool server `agent` before the
# first step (mark_agent_ids), 0 marks nothing. AGENT_GO_HOOK, if set,
# runs just before the first step (e.g. a stats snapshot taken after the
# marking; the daemon refreshes its stats once a second, so the agent's
# 5 ms polls for the go file in that last second still count).
agent_once() {
    _mark=$1 _secs=$2
    shift 2
    rm -f /tmp/go /tmp/agent.out
    "$@" /opt/w/agent --duration "$_secs" --warmup 200 --warmup-max-s 2 --json \
        --go-file /tmp/go >/tmp/agent.out 2>&1 &
    _ap=$!
    wait_until 20 grep -qs '^agent_tid=' /tmp/agent.out || fail "the agent did not start"
    [ "$_mark" != 1 ] || mark_agent_ids /tmp/agent.out
    [ -z "${AGENT_GO_HOOK:-}" ] || $AGENT_GO_HOOK
    touch /tmp/go
    wait "$_ap" || fail "the agent exited $?"
}

# start_sched LOG / stop_sched: attach and detach $SCHED, a build of
# scx_express (scx_express*: start_scx, stop_scx) or any other sched_ext
# scheduler (a peer from --bin), with $SCHED_ARGS split into words; its pid
# in SCX_PID.
start_sched() {
    case $SCHED in
    scx_express*)
        SCX_BIN=$SCHED
        # shellcheck disable=SC2086 # SCHED_ARGS is a word list
        start_scx "$1" $SCHED_ARGS
        return
        ;;
    esac
    # shellcheck disable=SC2086
    $SCHED $SCHED_ARGS >"$1" 2>&1 &
    SCX_PID=$!
    wait_sched_state enabled 120 || { tail "$1"; fail "$SCHED did not attach"; }
}
stop_sched() {
    case $SCHED in
    scx_express*)
        stop_scx
        return
        ;;
    esac
    kill -INT "$SCX_PID"
    wait "$SCX_PID"
    wait_sched_state disabled 20 || fail "$SCHED did not detach"
}
