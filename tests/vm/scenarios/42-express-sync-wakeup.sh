#!/bin/sh
# Express placement, step 4 on a synchronous wakeup: with every CPU busy,
# an agent loop woken by its tool server's TCP reply (a sync wakeup: the
# server blocks right after) preempts the server's CPU, not its own previous
# one, and `preempt_waker` counts it. Control in the same boot: a decode
# launcher woken by its sleep timer (not a sync wakeup) preempts as before,
# never on the waker's CPU. And no express run is cut short under the load.
# vmtest: smp=2 timeout=240 bins=target/release/scx_express,/usr/bin/stress-ng
# vmtest: files=workloads/build:/opt/w
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh

# Holds (46-express-hold.sh) would put the agent back on its held CPU
# instead: this test is about the preemption, so they are off.
printf '[classes.agent]\nhold_us = 0\n' >/tmp/cfg.toml
start_scx /tmp/scx.log --config /tmp/cfg.toml
stress-ng --cpu $(($(nproc) * 4)) --cpu-method fft --timeout 40s >/dev/null 2>&1 &
hogs=$!
sleep 1

# The agent loop, marked agent (agent loops are opt-in).
/opt/w/agent --duration 6 >/tmp/agent.out 2>&1 &
ag=$!
tid=$(line_value /tmp/agent.out agent_tid 10) || fail "agent did not start"
scx_express mark --tid "$tid" --class agent >/dev/null || fail "mark --tid $tid failed"
wait "$ag"
stats_snapshot /tmp/s1
a_pre=$(snap_sum /tmp/s1 classes.agent.preempt)
a_wak=$(snap_sum /tmp/s1 classes.agent.preempt_waker)
echo "agent: $a_pre preemptions, $a_wak on the waker's CPU"
[ "$a_pre" -ge 100 ] || fail "agent preempted only $a_pre times under load: the test saw too few wakeups"
[ $((a_wak * 10)) -ge $((a_pre * 8)) ] ||
    fail "agent: only $a_wak of $a_pre preemptions on the waker's CPU (expected >= 80%)"
echo "ok: the agent's sync wakeups preempt the waker's CPU ($a_wak of $a_pre)"

# Nothing takes the CPU back from it before its slice ends (a normal task
# never preempts an express one): at most 1% of its preemptions, for the
# rare kick that lands after the task it was meant for has gone.
a_cut=$(snap_sum /tmp/s1 classes.agent.cut_short)
a_lost=$(snap_sum /tmp/s1 classes.agent.lost_cpu)
echo "agent: $a_lost express runs lost the CPU while runnable, $a_cut before their slice ended"
[ $((a_cut * 100)) -le "$a_pre" ] || fail "agent: $a_cut express runs cut short (over 1% of $a_pre)"
echo "ok: express runs are not cut short ($a_cut)"

# Control: timer wakeups are not synchronous.
/opt/w/decode --duration 4 >/dev/null 2>&1
stats_snapshot /tmp/s2
g_pre=$(snap_sum /tmp/s2 classes.gpu.preempt)
g_wak=$(snap_sum /tmp/s2 classes.gpu.preempt_waker)
echo "launcher: $g_pre preemptions, $g_wak on the waker's CPU"
[ "$g_pre" -ge 100 ] || fail "the launcher preempted only $g_pre times under load"
[ "$g_wak" = 0 ] || fail "timer wakeups counted $g_wak preemptions on the waker's CPU"
echo "ok: timer wakeups preempt as before ($g_pre, none on the waker's CPU)"

kill "$hogs" 2>/dev/null
wait "$hogs" 2>/dev/null
stop_scx
