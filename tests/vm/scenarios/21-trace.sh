#!/bin/sh
# Trace mode: `scx_express trace --duration 5 --csv` loads the CUDA probes and
# the sched_switch/IRQ tracepoints with no scheduler attached (sched_ext stays
# disabled); it catches the launcher of the decode stand-in, classified gpu,
# with launches within 5% of what decode reports; the CSV header and rows are
# well formed; and the JSON report is written.
# vmtest: smp=2 timeout=240 bins=target/release/scx_express files=workloads/build:/opt/w
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh

check "no scheduler attached before" sched_state_is disabled

scx_express trace --duration 5 --csv /tmp/t.csv --json /tmp/t.json \
    >/tmp/trace.out 2>/tmp/trace.err &
tr=$!

# A primer maps the stand-in libcuda.so.1 and stays alive, so the probes are
# attached (by inode) before the measured decode starts: its every launch counts.
/opt/w/decode --tokens 1 --warmup 0 --linger 6 >/tmp/primer.out 2>&1 &
primer=$!
wait_until 60 grep -q 'probing .*libcuda.so.1' /tmp/trace.err || {
    cat /tmp/trace.err
    fail "trace did not attach to libcuda.so.1"
}
check "no scheduler attached while tracing" sched_state_is disabled

t0=$(uptime_cs)
/opt/w/decode --tokens 40 --warmup 0 --json >/tmp/dec.out 2>&1 || fail "decode failed"
log "decode took $(($(uptime_cs) - t0))0 ms"
wait "$tr" || { cat /tmp/trace.err; fail "trace exited $?"; }
kill "$primer" 2>/dev/null
cat /tmp/trace.out

json=$(tail -n 1 /tmp/dec.out)
tid=$(echo "$json" | sed -n 's/.*"launcher_tid":\([0-9]*\).*/\1/p')
want=$(echo "$json" | sed -n 's/.*"launches":\([0-9]*\).*/\1/p')
[ -n "$tid" ] && [ -n "$want" ] || fail "cannot read decode's report: $json"

# 1. The launcher is in the report, classified gpu, with decode's launch count.
row=$(awk -v t="$tid" '$1 == t { print; exit }' /tmp/trace.out)
[ -n "$row" ] || fail "launcher $tid not in the trace report"
log "report row: $row"
got=$(echo "$row" | awk '{ print $6 }')
check "launches within 5% (trace $got, decode $want)" \
    awk -v g="$got" -v w="$want" 'BEGIN { d = g - w; if (d < 0) d = -d; exit !(w > 0 && d * 20 <= w) }'

# 2. The CSV: exact header, 14 fields a row, known event types, numeric
#    timestamps, and the same launch count for the launcher.
header='timestamp_ns,event_type,pid,tid,comm,cpu,detail,nested,class,state,other_tid,other_comm,irq,duration_ns'
check "CSV header" test "$(head -n 1 /tmp/t.csv)" = "$header"
rows=$(($(wc -l </tmp/t.csv) - 1))
check "CSV has rows ($rows)" test "$rows" -gt 0
bad=$(awk -F, 'NR > 1 && (NF != 14 || $1 !~ /^[0-9]+$/ || $2 !~ /^(launch|sync|mark|switch_out|switch_in|irq|softirq)$/ || $3 !~ /^[0-9]+$/ || $4 !~ /^[0-9]+$/ || $6 !~ /^[0-9]+$/) { n++ } END { print n + 0 }' /tmp/t.csv)
check "every CSV row well formed ($bad bad)" test "$bad" = 0
csv_launches=$(awk -F, -v t="$tid" '$2 == "launch" && $4 == t && $8 == 0 { n++ } END { print n + 0 }' /tmp/t.csv)
check "CSV launches of $tid ($csv_launches) match the report ($got)" test "$csv_launches" = "$got"
gpu=$(awk -F, -v t="$tid" '$2 == "launch" && $4 == t && $9 == "gpu" { n++ } END { print n + 0 }' /tmp/t.csv)
check "the launcher's launches are classified gpu" test "$gpu" = "$csv_launches"
syncs=$(awk -F, -v t="$tid" '$2 == "sync" && $4 == t { n++ } END { print n + 0 }' /tmp/t.csv)
check "its syncs are seen ($syncs)" test "$syncs" -ge 40
outs=$(awk -F, -v t="$tid" '$2 == "switch_out" && $4 == t { n++ } END { print n + 0 }' /tmp/t.csv)
check "its context switches are seen ($outs)" test "$outs" -gt 0
awk -F, '{ n[$2]++ } END { for (k in n) print "  " k, n[k] }' /tmp/t.csv

# 3. The JSON report, and sched_ext still untouched.
check "JSON report names the launcher" grep -q "\"tid\": $tid" /tmp/t.json
check "no scheduler attached after" sched_state_is disabled
