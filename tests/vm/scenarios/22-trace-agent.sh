#!/bin/sh
# Trace mode, agent steps: with comm rules making the agent stand-in's loop
# thread and `dd` class agent, and two CPU hogs beside them on the 2 CPUs,
# `scx_express trace` (no scheduler) reports per-step breakdowns: the agent
# loop has at least one step per agent step, runqueue wait is seen, two dd's
# (a writer and a reader of the scratch disk) show block I/O waits and page
# faults, the slow steps are listed, and the JSON has the fields. Then, with
# the scheduler running, a loop marked with `scx_express mark` (no rule)
# gets steps too.
# vmtest: smp=2 timeout=300 disk=64M bins=target/release/scx_express files=workloads/build:/opt/w
# vmtest: tcg=single
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh

check "no scheduler attached before" sched_state_is disabled

cat >/tmp/cfg.toml <<CFG
[classify]
scan_interval_ms = 100
$AGENT_RULE_TOML
[[classify.rules]]
class = "agent"
comm = "dd"
CFG
scx_express --config /tmp/cfg.toml trace --json /tmp/t.json >/tmp/trace.out 2>/tmp/trace.err &
tr=$!
wait_until 60 grep -q 'tracing with' /tmp/trace.err || {
    cat /tmp/trace.err
    fail "trace did not start"
}

/opt/w/hog --duration 30 >/dev/null 2>&1 &
h1=$!
/opt/w/hog --duration 30 >/dev/null 2>&1 &
h2=$!

# The agent waits for /tmp/go, so the rule scan (every 100 ms) has
# classified its loop before its first step.
steps=300
/opt/w/agent --steps $steps --go-file /tmp/go --json >/tmp/agent.out 2>&1 &
agt=$!
wait_until 20 grep -qs '^agent_tid=' /tmp/agent.out || fail "agent did not start"
atid=$(sed -n 's/^agent_tid=//p' /tmp/agent.out | head -n 1)
sleep 2
touch /tmp/go

# dd sleeps reading the pipe (classified meanwhile), then writes 1 MiB to
# the disk and fsyncs it: D-state sleeps in io_schedule, inside its steps.
dd if=/dev/urandom of=/tmp/data bs=64k count=16 2>/dev/null
(sleep 2 && cat /tmp/data) | dd of="$VMTEST_DISK" bs=64k conv=fsync 2>/dev/null ||
    fail "dd to the disk failed"
# A dd reading it back (direct I/O where dd has it) into a pipe that is read
# 2 s late: it sleeps on the full pipe, so each later step has disk reads in
# io_schedule (the writer's fsync may find its writeback done already).
echo 3 >/proc/sys/vm/drop_caches
dd if="$VMTEST_DISK" iflag=direct bs=64k count=16 2>/dev/null | (sleep 2 && cat >/dev/null) ||
    dd if="$VMTEST_DISK" bs=64k count=16 2>/dev/null | (sleep 2 && cat >/dev/null) ||
    fail "dd from the disk failed"

wait "$agt" || { cat /tmp/agent.out; fail "agent exited $?"; }
kill "$h1" "$h2" 2>/dev/null
kill -TERM "$tr"
wait "$tr" || { cat /tmp/trace.err; fail "trace exited $?"; }
cat /tmp/trace.out
grep -E 'no agent steps|show no page faults' /tmp/trace.err && fail "a step hook did not attach"

# 1. The text report: the section, the agent loop's step count.
check "report has the agent steps section" grep -q '^agent steps' /tmp/trace.out
got=$(awk -v t="$atid" '$1 == t && $NF == "steps" { print $3; exit }' /tmp/trace.out)
log "agent loop $atid: $got steps traced, agent made $steps (+20 warmup)"
check "the agent loop has steps" test -n "$got"
check "at least one step per agent step ($got >= $steps)" test "$got" -ge "$steps"
# The go-file wait polls every 5 ms (a step each) for about 2 s.
check "not many more steps than the agent made ($got)" test "$got" -le $((steps + 20 + 1000))
dd_steps=$(awk '$2 == "dd" && $NF == "steps" { n += $3 } END { print n + 0 }' /tmp/trace.out)
check "the dd has steps ($dd_steps)" test "$dd_steps" -gt 0

# part NAME COLUMN: a row of the breakdown table (2 median, 3 p99, 4 max),
# which starts at its PART header (the IRQ totals above it have rows of
# five fields that start with "softirq" too).
part() { awk -v n="$1" -v c="$2" '$1 == "PART" { on = 1; next } on && $1 == n && NF == 5 { print $c; exit }' /tmp/trace.out; }
for p in total wake_wait runq_wait run hardirq softirq softirq_net softirq_block fault block_io d_sleep \
    faults io_waits preempts; do
    check "breakdown row $p" test -n "$(part $p 4)"
done
check "runqueue wait seen (max $(part runq_wait 4) us)" awk -v v="$(part runq_wait 4)" 'BEGIN { exit !(v > 0) }'
check "run time seen (median $(part run 2) us)" awk -v v="$(part run 2)" 'BEGIN { exit !(v > 0) }'
check "block I/O waits seen (max $(part io_waits 4))" awk -v v="$(part io_waits 4)" 'BEGIN { exit !(v > 0) }'
check "block I/O time seen (max $(part block_io 4) us)" awk -v v="$(part block_io 4)" 'BEGIN { exit !(v > 0) }'
check "page faults seen (max $(part faults 4))" awk -v v="$(part faults 4)" 'BEGIN { exit !(v > 0) }'
# The loop's loopback sends run NET_RX in its own softirq: network softirq
# time shows, and is part of the softirq time.
check "network softirq seen (max $(part softirq_net 4) us)" awk -v v="$(part softirq_net 4)" 'BEGIN { exit !(v > 0) }'
check "network softirq within softirq ($(part softirq_net 4) <= $(part softirq 4) us)" \
    awk -v n="$(part softirq_net 4)" -v a="$(part softirq 4)" 'BEGIN { exit !(n <= a) }'
# The loop and dd are traced apart too.
# shellcheck disable=SC2016 # awk's own fields
check "by-thread rows for the agent loop" \
    awk -v t="$atid" '$1 == t && $3 == "total" && NF == 7 { f = 1 } END { exit !f }' /tmp/trace.out
check "slow steps listed (p99 and worst)" sh -c "grep -q '^p99 ' /tmp/trace.out && grep -q '^worst1 ' /tmp/trace.out"
check "a verdict on the slow steps" grep -q '^slow steps: .* is the largest part' /tmp/trace.out

# 2. The JSON: agent_steps with its fields.
for f in '"agent_steps": {' '"times_us"' '"counts"' '"slow"' '"slow_dominant"' \
    '"runq_ns"' '"wake_wait_ns"' '"hardirq_ns"' '"softirq_ns"' '"fault_ns"' \
    '"faults"' '"io_ns"' '"io_waits"' '"dsleep_ns"' '"preempts"' '"name": "block_io"' \
    '"softirq_net_ns"' '"softirq_block_ns"' '"by_thread"'; do
    check "JSON has $f" grep -qF "$f" /tmp/t.json
done
check "JSON lists the agent loop" grep -q "\"tid\": $atid" /tmp/t.json
check "no scheduler attached after" sched_state_is disabled

# 3. A thread marked agent with `scx_express mark` in the running scheduler
#    (no rule for it) gets agent steps too: trace copies the scheduler's marks.
rm -f /tmp/go
start_scx /tmp/scx.log
steps2=100
/opt/w/agent --steps $steps2 --go-file /tmp/go >/tmp/agent2.out 2>&1 &
agt=$!
wait_until 20 grep -qs '^agent_tid=' /tmp/agent2.out || fail "agent did not start"
atid=$(sed -n 's/^agent_tid=//p' /tmp/agent2.out | head -n 1)
check "mark --tid $atid --class agent" scx_express mark --tid "$atid" --class agent
scx_express trace >/tmp/trace2.out 2>/tmp/trace2.err &
tr=$!
wait_until 60 grep -q 'tracing with' /tmp/trace2.err || {
    cat /tmp/trace2.err
    fail "trace did not start"
}
sleep 2
touch /tmp/go
wait "$agt" || { cat /tmp/agent2.out; fail "agent exited $?"; }
kill -TERM "$tr"
wait "$tr" || { cat /tmp/trace2.err; fail "trace exited $?"; }
stop_scx
sed -n '/^agent steps/,$p' /tmp/trace2.out
got=$(awk -v t="$atid" '$1 == t && $NF == "steps" { print $3; exit }' /tmp/trace2.out)
check "the marked agent loop has steps (${got:-none} >= $steps2)" test "${got:-0}" -ge "$steps2"
