#!/bin/sh
# Re-attaching leaves no threads behind. Each CPU hotplug event ends the
# scheduler with a restart request and the daemon attaches again in the
# same process (31-hotplug.sh), starting a new /proc scanner and probe
# thread each time. The old ones must stop: a scanner that ran on would
# read /proc every scan_interval_ms for nothing and keep the old BPF
# object's maps alive. With no CUDA process the scanner has nothing to
# send, so only its stop flag can end it (a send to a gone receiver ended
# the others). Two offline/online rounds of CPU 1 (4 re-attaches), then
# exactly one express-scan and one express-probes thread, and no thread
# left spinning: the idle daemon under a third of one CPU over 3 s (it
# uses about 0.4%; a loop that polls without sleeping uses all of it;
# daemon-cpu.sh measures it). SIGINT then detaches with exit code 0.
# vmtest: smp=2 timeout=300 bins=target/release/scx_express tcg=single
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh

CPU1=/sys/devices/system/cpu/cpu1/online
[ -w "$CPU1" ] || fail "$CPU1 is not writable: no CPU hotplug in this kernel"

_enable_seq_at_least() { [ "$(enable_seq)" -ge "$1" ]; }

start_scx /tmp/scx.log
seq0=$(enable_seq)
for round in 1 2; do
    for v in 0 1; do
        echo "$v" >"$CPU1" || fail "writing $v to $CPU1"
        # The restart's re-attach: enable_seq one up.
        want=$((seq0 + 2 * (round - 1) + v + 1))
        wait_until 30 _enable_seq_at_least "$want" ||
            fail "no re-attach after cpu1 online=$v (enable_seq $(enable_seq), want $want)"
        wait_sched_state enabled 30 || fail "not enabled again after cpu1 online=$v"
    done
done
alive "$SCX_PID" || fail "scx_express exited during the re-attaches"
log "re-attached $(($(enable_seq) - seq0)) times"

# A stopped scanner ends at its next pass (scan_interval_ms, 250 ms).
sleep 1
names=$(cat /proc/"$SCX_PID"/task/*/comm)
log "threads: $(echo "$names" | sort | uniq -c | tr -s ' \n' ' ')"
scan=$(echo "$names" | grep -c '^express-scan$')
probe=$(echo "$names" | grep -c '^express-probes$')
[ "$scan" = 1 ] && [ "$probe" = 1 ] ||
    fail "after 4 re-attaches: $scan scanner and $probe probe threads (want 1 each)"
echo "ok: one scanner and one probe thread after 4 re-attaches"

t0=$(task_cputime "$SCX_PID")
sleep 3
t1=$(task_cputime "$SCX_PID")
log "daemon CPU over 3 s: $((t1 - t0)) ticks"
[ $((t1 - t0)) -lt 100 ] || fail "the idle daemon used $((t1 - t0)) ticks in 3 s (a busy loop?)"
echo "ok: the idle daemon used $((t1 - t0)) ticks in 3 s"

stop_scx
