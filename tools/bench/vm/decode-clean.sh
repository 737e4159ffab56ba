#!/bin/sh
# Benchmark (prints numbers, asserts nothing): the decode stand-in's clean
# tok/s (no noise) under scx_express against EEVDF in the same boot, and
# what of the difference the launch-probe windows explain. Separate boots
# differ in TCG speed by up to 30%, so only a same-boot ratio can show a
# few percent. Phases, each a DUR-second decode run (median of REPS):
#   eevdf        the kernel's default
#   express      scx_express, the config CFG (default configs/default.toml)
#   nowin        scx_express with launch_window_ms = 0 (sync probes only)
#   rule         scx_express with no CUDA probes at all, the launcher
#                thread made gpu by a comm rule: the lane without probes
#   eevdf2       EEVDF again; the two EEVDF phases are averaged
# Per phase: tok/s, per-token p50, the launcher's CPU time and context
# switches, and for scx_express its own CPU time. The last line
# ("decode-clean: ...") gives the ratios to EEVDF.
#   tests/vm/run.sh tools/bench/vm/decode-clean.sh [--env DUR=6] [--env REPS=3]
#   tools/bench/vm/bundle.sh DIR tools/bench/vm/decode-clean.sh; DIR/runner.sh --smp 2 OUT b1 b2 b3
# vmtest: smp=2 timeout=600 bins=target/release/scx_express
# vmtest: files=workloads/build:/opt/w,configs:/etc/scx_express
# shellcheck source=../../../tests/vm/guest-lib.sh
. /lib/vmtest/guest-lib.sh

DUR=${DUR:-6}
REPS=${REPS:-3}
CFG=${CFG:-/etc/scx_express/default.toml}

field() { echo "$1" | sed -n "s/.*\"$2\":\([0-9.]*\).*/\1/p"; }

# phase NAME: REPS decode runs; sets T (median tok/s) and logs each run.
phase() {
    : >/tmp/tok
    for _i in $(seq "$REPS"); do
        _o=$(/opt/w/decode --duration "$DUR" --json 2>/dev/null | tail -n 1)
        log "$1 run $_i: tok/s $(field "$_o" tok_per_s) p50 $(field "$_o" p50_us) us cpu_ms $(field "$_o" launcher_cpu_ms) nvcsw $(field "$_o" launcher_nvcsw) nivcsw $(field "$_o" launcher_nivcsw)"
        field "$_o" tok_per_s >>/tmp/tok
    done
    T=$(median </tmp/tok)
    log "$1: median tok/s $T"
}

# scx NAME ARGS...: a phase under scx_express started with ARGS.
scx() {
    _n=$1
    shift
    start_scx "/tmp/scx-$_n.log" "$@"
    # Let the scanner find the library before measuring, as a long-lived
    # launcher would have it found.
    sleep 2
    _k0=$(task_cputime "$SCX_PID")
    phase "$_n"
    _k1=$(task_cputime "$SCX_PID")
    log "$_n: scx_express used $((_k1 - _k0)) ticks; $(scx_express stats --flat | grep -E '^(launch_windows|probed_libraries|classes\.gpu\.(prev|llc|any|no_tokens|class_cap|fallback)) ' | tr '\n' ' ')"
    stop_scx
}

phase eevdf
e1=$T
scx express --config "$CFG"
x=$T
printf '[classify]\nlaunch_window_ms = 0\n' >/tmp/nowin.toml
scx nowin --config /tmp/nowin.toml
n=$T
printf '[classify]\nlibraries = []\n[[classify.rules]]\nclass = "gpu"\ncomm = "launcher"\n' >/tmp/rule.toml
scx rule --config /tmp/rule.toml
r=$T
phase eevdf2
e2=$T

awk -v e1="$e1" -v e2="$e2" -v x="$x" -v n="$n" -v r="$r" -v smp="$VMTEST_SMP" 'BEGIN {
    e = (e1 + e2) / 2
    printf "decode-clean: smp=%d express=%.3f nowin=%.3f rule=%.3f | eevdf tok/s %s/%s express %s nowin %s rule %s\n", \
        smp, x / e, n / e, r / e, e1, e2, x, n, r
}'
