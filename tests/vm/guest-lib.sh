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

# start_scx LOG [ARGS...]: start scx_express in the background with its
# output in LOG, set $SCX_PID, and wait (up to 60 s) until it is attached.
# Fails the scenario at once if it exits first, showing its log.
start_scx() {
    _log=$1
    shift
    scx_express "$@" >"$_log" 2>&1 &
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
}

# stop_scx: SIGINT the scx_express started by start_scx; fail unless it
# exits 0 and sched_ext returns to disabled.
stop_scx() {
    kill -INT "$SCX_PID"
    wait "$SCX_PID"
    _rc=$?
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
