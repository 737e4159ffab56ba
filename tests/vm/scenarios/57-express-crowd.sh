#!/bin/sh
# More express tasks than CPUs (placement.bpf.c, claims and step 6): a
# decode launcher (gpu, by its CUDA probes) and two agent stand-ins (loop
# and tool server marked agent) on 2 vCPUs beside 4x CPU hogs. Express
# wakeups often find every CPU running or claimed by express work. Then:
# - an express dispatch claims its CPU until its task runs there, so a
#   second express wakeup does not pick that CPU and preempt the first
#   (few runs cut short: about 5% of the launcher's runs without claims);
# - a wakeup that finds every CPU busy with express work queues behind it
#   (`behind`) instead of falling to the fair path behind the hogs (about
#   a fifth of the agents' wakeups fell back without step 6).
# vmtest: smp=2 timeout=240 bins=target/release/scx_express,/usr/bin/stress-ng
# vmtest: files=workloads/build:/opt/w
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh

CFG=/tmp/cfg.toml
: >"$CFG"
start_scx /tmp/scx.log --config "$CFG"
/opt/w/decode --duration 10 >/tmp/decode.out 2>&1 &
dec=$!
ags=''
for a in 1 2; do
    /opt/w/agent --duration 10 >"/tmp/agent-$a.out" 2>&1 &
    ags="$ags $!"
    mark_agent_ids "/tmp/agent-$a.out"
done
ltid=$(line_value /tmp/decode.out launcher_tid 20) || fail "decode printed no launcher_tid"
wait_until 30 classified_as "$ltid" gpu || fail_logs "the launcher $ltid was not classified gpu"
# The hogs start once every express task is classified, as in the bench.
stress-ng --cpu $(($(nproc) * 4)) --cpu-method fft --timeout 60s >/dev/null 2>&1 &
hogs=$!

sleep 1
stats_snapshot /tmp/s0
sleep 5
stats_snapshot /tmp/s1
wait "$dec" || fail "decode exited $?"
for p in $ags; do wait "$p" || fail "an agent exited $?"; done

d() { snap_delta /tmp/s0 /tmp/s1 "$@"; }
wake=$(d classes.gpu.wakeups classes.agent.wakeups)
cut=$(d classes.gpu.cut_short classes.agent.cut_short)
behind=$(d classes.gpu.behind classes.agent.behind)
awake=$(d classes.agent.wakeups)
afall=$(d classes.agent.fallback)
echo "express wakeups $wake: cut short $cut, behind $behind; agent: $awake wakeups, $afall to the fair path"
[ "$wake" -ge 500 ] || fail "only $wake express wakeups in 5 s"
[ "$behind" -ge 1 ] || fail "no wakeup found every CPU busy with express work: the test's load is too light"
[ $((cut * 50)) -le "$wake" ] || fail "$cut of $wake express runs cut short (over 2%): express wakeups preempt each other"
[ $((afall * 20)) -le "$awake" ] || fail "$afall of $awake agent wakeups took the fair path (over 5%)"
echo "ok: express work queued behind express work ($behind), $cut of $wake runs cut short, $afall of $awake agent wakeups to the fair path"

kill "$hogs" 2>/dev/null
wait "$hogs" 2>/dev/null
stop_scx
