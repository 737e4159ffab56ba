#!/bin/sh
# Benchmark (prints numbers, asserts no timing): how much of its clean tok/s
# does the decode stand-in keep beside 4x CPU hogs, under EEVDF and under
# scx_express, in one boot? Prints the express-lane counters of the loaded
# run, the launcher's CPU time and context switches, so a gap can be traced
# to its cause (budget, class cap, fair-path fallback, placement).
#   tests/vm/run.sh tools/bench/vm/decode-retention.sh [--env DUR=10] [--env CFG=...]
#   [--env HELPERS=2] (the mixed workload: CPU-bound sibling threads)
#   [--env FAKECUDA_SYNC=spin] (syncs spin, as CUDA's default mode does)
# vmtest: smp=2 timeout=420 bins=target/release/scx_express,/usr/bin/stress-ng
# vmtest: files=workloads/build:/opt/w,configs:/etc/scx_express
# shellcheck source=../../../tests/vm/guest-lib.sh
. /lib/vmtest/guest-lib.sh

DUR=${DUR:-8}
CFG=${CFG:-/etc/scx_express/default.toml}
HOGS=$(($(nproc) * 4))

# decode: one run; also logs the launcher's run delay (runnable but not
# running, from /proc/.../schedstat) per token over the middle of the run.
decode() {
    rm -f /tmp/dec.out
    /opt/w/decode --duration "$DUR" ${HELPERS:+--helpers "$HELPERS"} --json >/tmp/dec.out 2>/dev/null &
    _d=$!
    wait_until 10 grep -q "^launcher_tid=" /tmp/dec.out
    _tid=$(sed -n "s/^launcher_tid=//p" /tmp/dec.out)
    _pid=$_d
    sleep 1
    # schedstat's three fields become $1 $2 $3.
    # shellcheck disable=SC2046
    set -- $(cat "/proc/$_pid/task/$_tid/schedstat")
    _r0=$1 _w0=$2 _n0=$3
    sleep $((DUR - 2))
    # shellcheck disable=SC2046
    set -- $(cat "/proc/$_pid/task/$_tid/schedstat")
    log "  launcher over $((DUR - 2)) s: ran $((($1 - _r0) / 1000000)) ms, waited runnable $((($2 - _w0) / 1000000)) ms in $(($3 - _n0)) runs" >&2
    wait $_d
    tail -n 1 /tmp/dec.out
}
field() { echo "$1" | sed -n "s/.*\"$2\":\([0-9.]*\).*/\1/p"; }
show() { log "$1: tok/s $(field "$2" tok_per_s) p50 $(field "$2" p50_us) p99 $(field "$2" p99_us) cpu_ms $(field "$2" launcher_cpu_ms) nvcsw $(field "$2" launcher_nvcsw) nivcsw $(field "$2" launcher_nivcsw)"; }
hogs() { stress-ng --cpu "$HOGS" --cpu-method fft --timeout $((DUR + 2))s --metrics-brief >/tmp/hogs.out 2>&1 & hog=$!; sleep 1; }
hog_ops() { awk '$4 == "cpu" { print int($9) }' /tmp/hogs.out; }

e_clean=$(decode); show "eevdf clean" "$e_clean"
hogs; e_load=$(decode); wait "$hog"; e_hog=$(hog_ops); show "eevdf cpu4x" "$e_load"

start_scx /tmp/scx.log --config "$CFG"
x_clean=$(decode); show "express clean" "$x_clean"
scx_express stats --flat >/tmp/s0
hogs; x_load=$(decode); wait "$hog"; x_hog=$(hog_ops); show "express cpu4x" "$x_load"
scx_express stats --flat >/tmp/s1
awk 'NR == FNR { a[$1] = $2; next } $1 ~ /^classes.gpu|^(user_|direct|fallback|rescued)/ { printf "  %s +%s\n", $1, $2 - a[$1] }' /tmp/s0 /tmp/s1
stop_scx

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
echo "RESULT decode-retention: eevdf $(ratio "$(field "$e_load" tok_per_s)" "$(field "$e_clean" tok_per_s)")" \
    "express $(ratio "$(field "$x_load" tok_per_s)" "$(field "$x_clean" tok_per_s)") (goal >= 0.95);" \
    "hogs under express at $(ratio "$x_hog" "$e_hog") of EEVDF's"
