#!/bin/sh
# Malformed configs on a real sched_ext kernel: `scx_express --config BAD`
# for an unknown key, a negative budget, an out-of-range rate, invalid UTF-8
# bytes, printable garbage, a directory and a missing file. Each run exits
# non-zero within 20 s with "scx_express: error: invalid config FILE" and the
# offending key (or the file problem), and nothing is loaded: sched_ext
# stays disabled, enable_seq does not move, no "BPF scheduler ... enabled"
# line appears in dmesg and /sys/fs/bpf/scx_express is never created.
# `check-config` gives the same verdict. A good config then attaches, which
# shows these observations would have caught a load.
# vmtest: smp=2 timeout=180 bins=target/release/scx_express
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh

# enable_seq: how many times a BPF scheduler was enabled since boot.
nr_enabled_msgs() { dmesg | grep -c 'sched_ext: BPF scheduler ".*" enabled'; }

check "sched_ext starts disabled" sched_state_is disabled
seq0=$(enable_seq)
msgs0=$(nr_enabled_msgs)
log "enable_seq=$seq0"

d=/tmp/bad
mkdir -p "$d/dir.toml"
printf '[fair]\nslice_max_us = 5000\nslice_us = 3\n' >"$d/unknown-key.toml"
printf '[classes.gpu]\nburst_ms = -5\n' >"$d/negative-budget.toml"
printf '[classes.agent]\nrate = 1.5\n' >"$d/rate-range.toml"
# Bytes that are not UTF-8 (0xff 0xfe, NULs, a lone continuation byte).
printf '\377\376\000\000[fair]\200\001garbage\n' >"$d/garbage-bytes.toml"
# Printable garbage: valid UTF-8, not TOML.
printf '%s\n' '}}{{ = = [[[' 'rescue_ms := fast' >"$d/garbage-text.toml"

# bad CASE FILE PATTERN...: run the scheduler with FILE as --config; it must
# fail fast, print each PATTERN (grep -E), and load nothing.
bad() {
    _case=$1 _file=$2
    shift 2
    _out=/tmp/out.$_case
    timeout 20 scx_express --config "$_file" >"$_out" 2>&1
    _rc=$?
    log "$_case: rc=$_rc: $(head -c 300 "$_out" | tr '\n' '|')"
    [ "$_rc" != 0 ] || fail "$_case: scx_express exited 0 with a bad config"
    [ "$_rc" != 124 ] || fail "$_case: scx_express did not exit within 20 s"
    [ "$_rc" -lt 128 ] || fail "$_case: scx_express died of signal $((_rc - 128))"
    grep -q "^scx_express: error: invalid config $_file" "$_out" ||
        fail "$_case: message does not start with 'scx_express: error: invalid config $_file'"
    for _p in "$@"; do
        grep -qE -- "$_p" "$_out" || fail "$_case: message lacks /$_p/"
    done
    if grep -q panicked "$_out"; then fail "$_case: scx_express panicked"; fi
    sched_state_is disabled || fail "$_case: sched_ext state is $(sched_state)"
    [ "$(enable_seq)" = "$seq0" ] || fail "$_case: enable_seq moved $seq0 -> $(enable_seq)"
    [ "$(nr_enabled_msgs)" = "$msgs0" ] || fail "$_case: dmesg shows a scheduler enabled"
    [ ! -e /sys/fs/bpf/scx_express ] || fail "$_case: /sys/fs/bpf/scx_express was created"
    # check-config must agree.
    if scx_express check-config "$_file" >/dev/null 2>&1; then
        fail "$_case: check-config accepts it"
    fi
    echo "ok: $_case rejected (rc=$_rc), names $*, nothing loaded"
}

bad unknown-key "$d/unknown-key.toml" 'slice_us' 'unknown field' 'line 3'
bad negative-budget "$d/negative-budget.toml" 'classes\.gpu\.burst_ms'
bad rate-range "$d/rate-range.toml" 'classes\.agent\.rate' '1\.5' 'out of range'
bad garbage-bytes "$d/garbage-bytes.toml" 'not UTF-8'
bad garbage-text "$d/garbage-text.toml" 'line 1'
bad directory "$d/dir.toml" 'is a directory'
bad missing-file "$d/missing.toml" 'cannot read' 'No such file'

# Positive control: the same observations see a good config load.
printf '[fair]\nrescue_ms = 40\n' >/tmp/good.toml
scx_express --config /tmp/good.toml >/tmp/good.log 2>&1 &
scx=$!
wait_sched_state enabled 90 || { cat /tmp/good.log; fail "a good config did not attach"; }
seq1=$(enable_seq)
log "good config attached: ops $(sched_ops_name), enable_seq $seq0 -> $seq1"
[ "$seq1" -gt "$seq0" ] || fail "enable_seq did not move on a real load"
echo "ok: positive control: a good config attaches and enable_seq moves"
SCX_PID=$scx
stop_scx
