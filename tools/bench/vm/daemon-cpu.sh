#!/bin/sh
# Benchmark (prints numbers, asserts nothing): the CPU time the scx_express
# daemon spends with nothing to do (no express task, no stats reader), per
# thread: what it costs a machine just by running. Each build in BINS runs
# REPS times, the builds alternating; each run attaches, waits WARM s
# (loading and attaching cost seconds of CPU that are not the idle cost),
# then counts each thread's utime+stime over DUR s. The kernel samples
# them at its tick, so a count is a sample: compare builds over the runs.
#   tests/vm/run.sh tools/bench/vm/daemon-cpu.sh
#   tests/vm/run.sh tools/bench/vm/daemon-cpu.sh --bin OLD/scx_express:/bin/scx_old \
#       --env BINS="scx_express scx_old"
# vmtest: smp=2 timeout=900 bins=target/release/scx_express
# vmtest: files=configs:/etc/scx_express
# shellcheck source=../../../tests/vm/guest-lib.sh
. /lib/vmtest/guest-lib.sh

BINS=${BINS:-scx_express}
REPS=${REPS:-3}
DUR=${DUR:-30}
WARM=${WARM:-5}
CFG=${CFG:-/etc/scx_express/default.toml}
# threads PID: "comm ticks" per thread.
threads() {
    for _t in /proc/"$1"/task/*; do
        # The task/ entry: /proc/TID/stat would be the whole process's.
        _k=$(task_cputime "${_t#/proc/}") || continue
        echo "$(cat "$_t/comm") $_k"
    done
}

for _r in $(seq "$REPS"); do
    for _b in $BINS; do
        SCX_BIN=$_b start_scx "/tmp/$_b.log" --config "$CFG"
        sleep "$WARM"
        threads "$SCX_PID" >/tmp/t0
        _p0=$(task_cputime "$SCX_PID")
        sleep "$DUR"
        threads "$SCX_PID" >/tmp/t1
        _p1=$(task_cputime "$SCX_PID")
        # Per thread name (the stats server's threads share one): ticks
        # over DUR; their total as % of one CPU; the process's own count
        # (/proc/PID/stat, what top and the bench show), which also holds
        # threads that ended within DUR.
        _line=$(awk -v hz="$VMTEST_CLK_TCK" -v dur="$DUR" '
            NR == FNR { a[$1] += $2; next }
            { b[$1] += $2 }
            END {
                for (n in b) { d = b[n] - a[n]; s = s " " n "=" d; t += d }
                printf "%s total=%d ticks (%.2f%% of one CPU)", s, t, 100 * t / hz / dur
            }' /tmp/t0 /tmp/t1)
        _p=$((_p1 - _p0))
        _line="$_line; process $_p ticks ($(awk -v p="$_p" -v hz="$VMTEST_CLK_TCK" -v dur="$DUR" 'BEGIN { printf "%.2f", 100 * p / hz / dur }')%)"
        log "daemon-cpu: $_b run $_r:$_line"
        stop_scx >/dev/null
    done
done
