#!/bin/sh
# Reproducer for the open hotplug hang (docs/operations.md, "CPU hotplug,
# a hang at the end"); not a CI scenario. Each cycle: attach scx_express,
# load both CPUs with stress-ng and a hog pinned to CPU 1, take CPU 1
# offline and back online twice, detach, then a task pinned to CPU 1 must
# run. Prints "PROBE ..." lines; dumps the run queues when a hotplug write,
# the detach or CPU 1 hangs for 30 s (a dump from a shell that is itself
# stuck on CPU 1 never comes: then the console's RCU stall reports are
# what is left).
#   tests/vm/run.sh tests/vm/repro/hotplug-detach.sh --no-retry
# --env PROBE_SCHED=scx_bpfland (its binary given with --bin) runs a peer
# instead; PROBE_SCHED=none attaches nothing (the EEVDF control).
# vmtest: smp=2 timeout=580 bins=target/release/scx_express,/usr/bin/stress-ng
# vmtest: files=workloads/build:/opt/w tcg=single
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh
CPU1=/sys/devices/system/cpu/cpu1/online
# The run queues and sched_ext's own dump (guest-lib.sh), then give up.
dump() {
  stuck_dump "$*" | sed '1s/^/PROBE /'
  exit 1
}
# A shell stuck on CPU 1 never dumps: a watcher on CPU 0 does it when the
# main loop's heartbeat is 40 s old.
beat() { date +%s >/tmp/beat; }
beat
( while sleep 5; do
    [ $(( $(date +%s) - $(cat /tmp/beat) )) -lt 40 ] && continue
    ( dump "no heartbeat for 40 s" )
    echo o >/proc/sysrq-trigger
  done ) &
taskset -p 1 $! >/dev/null
hp() {
  echo "$1" >$CPU1 &
  w=$!
  n=0
  while alive $w; do sleep 1; beat; n=$((n+1)); [ $n -lt 30 ] || dump "echo $1 > cpu1/online hangs"; done
}
sched=${PROBE_SCHED:-scx_express}
[ "$sched" = none ] && sched="sleep 100000"
for c in 1 2 3 4 5 6; do
  $sched >/tmp/s.log 2>&1 &
  pid=$!
  sleep 4
  stress-ng --cpu 8 --timeout 60s >/dev/null 2>&1 &
  st=$!
  /opt/w/hog --cpu 1 --duration 60 >/dev/null 2>&1 &
  h=$!
  sleep 3
  for r in 1 2; do hp 0; sleep 3; hp 1; sleep 3; taskset -p 2 $h >/dev/null; echo "PROBE cycle $c round $r ok"; beat; done
  kill $st $h; sleep 1
  kill -INT $pid
  # A background sleep ignores SIGINT (a non-interactive shell's jobs do).
  [ "$sched" = "sleep 100000" ] && kill $pid
  n=0; while alive $pid; do sleep 1; beat; n=$((n+1)); [ $n -lt 30 ] || dump "detach hangs"; done
  sleep 2
  /opt/w/hog --cpu 1 --duration 1 >/tmp/h.out 2>&1 &
  hh=$!
  sleep 10
  alive $hh && dump "cpu1 runs nothing after detach"
  echo "PROBE cycle $c: ok"
  beat
done
