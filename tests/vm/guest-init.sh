#!/bin/sh
# /init of the test VM (busybox ash, PID 1). Mounts the usual filesystems,
# runs /scenario.sh under a time limit, prints the result marker
#   @@VMTEST-RESULT rc=N@@
# and powers off. It must never exit: PID 1 exiting panics the kernel.
# Settings come from /etc/vmtest/env (written by run.sh).

export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb
umask 022

say() { echo "vmtest: $*"; }

# mnt TYPE DIR [OPTIONS]
mnt() {
    mkdir -p "$2"
    mount -t "$1" -o "${3:-defaults}" "$1" "$2" 2>/dev/null ||
        say "warning: cannot mount $1 on $2"
}

mnt proc /proc
mnt sysfs /sys
mnt devtmpfs /dev
mnt tmpfs /tmp mode=1777
mnt tmpfs /run mode=0755
mnt devpts /dev/pts
mnt tmpfs /dev/shm mode=1777
mnt debugfs /sys/kernel/debug
mnt tracefs /sys/kernel/tracing
mnt cgroup2 /sys/fs/cgroup
mnt bpf /sys/fs/bpf

# The kernel booted with maxcpus=1 (run.sh says why): online the others.
for f in /sys/devices/system/cpu/cpu[0-9]*/online; do
    [ "$(cat "$f" 2>/dev/null)" = 0 ] || continue
    echo 1 >"$f" 2>/dev/null || say "warning: cannot online ${f%/online}"
done

ip link set lo up 2>/dev/null || say "warning: cannot bring up lo"
hostname vmtest

# libbpf resolves __kconfig externs from /boot/config-$(uname -r).
VMTEST_KREL=$(uname -r)
if [ -f /lib/vmtest/kconfig ]; then
    cp /lib/vmtest/kconfig "/boot/config-$VMTEST_KREL"
else
    say "warning: no kernel config in the initramfs"
fi

VMTEST_TIMEOUT=300 VMTEST_NAME=scenario
# shellcheck disable=SC1091
[ -f /etc/vmtest/env ] && . /etc/vmtest/env
VMTEST_ATTEMPT=1 # which boot of this scenario (run.sh retries dead boots)
read -r cmdline </proc/cmdline
for arg in $cmdline; do
    case $arg in vmtest.attempt=*) VMTEST_ATTEMPT=${arg#*=} ;; esac
done
VMTEST_SMP=$(nproc)
VMTEST_MEM_MB=$(awk '/^MemTotal:/ { print int($2 / 1024) }' /proc/meminfo)
VMTEST_CLK_TCK=100 # USER_HZ, the unit of /proc/PID/stat times on x86
export VMTEST_ATTEMPT VMTEST_KREL VMTEST_TIMEOUT VMTEST_NAME VMTEST_SMP VMTEST_MEM_MB VMTEST_CLK_TCK

read -r up _ </proc/uptime
echo # the firmware's last line may lack its newline
say "kernel $VMTEST_KREL, $VMTEST_SMP CPUs, $VMTEST_MEM_MB MiB, booted in ${up}s"
# run.sh compares the guest's clock with the host's: this is its calibration.
say "clock: $(dmesg | grep -E 'tsc: (Detected|Refined)' | sed 's/^\[ *\([^]]*\)\] /(\1 s) /' | tr '\n' ' ')"
say "running $VMTEST_NAME (timeout ${VMTEST_TIMEOUT}s)"

# The scenario runs in its own session so the watchdog can kill its whole
# process group.
cd /tmp || true
setsid sh /scenario.sh </dev/null &
spid=$!
(
    sleep "$VMTEST_TIMEOUT"
    : >/run/vmtest-timeout
    # SIGTERM first so a scenario's trap can print diagnostics, then KILL.
    kill -TERM -"$spid" 2>/dev/null || kill -TERM "$spid" 2>/dev/null
    sleep 5
    kill -KILL -"$spid" 2>/dev/null || kill -KILL "$spid" 2>/dev/null
) &
wpid=$!
wait "$spid"
rc=$?
kill "$wpid" 2>/dev/null

read -r up _ </proc/uptime
if [ -e /run/vmtest-timeout ]; then
    rc=124
    say "scenario TIMED OUT after ${VMTEST_TIMEOUT}s; state: $(cat /sys/kernel/sched_ext/state 2>/dev/null)"
    say "last kernel messages:"
    dmesg | tail -n 30 | sed 's/^/vmtest: kmsg: /'
else
    say "scenario exited rc=$rc at ${up}s"
fi

# Forward kernel trouble that 'quiet' kept off the console (WARN_ON etc.).
dmesg | grep -E 'BUG:|Oops|Kernel panic|general protection fault|Unable to handle|WARNING:|Call Trace:|soft lockup|hung task|rcu.*stall' |
    head -n 50 | sed 's/^/vmtest: kmsg: /'

printf '\n@@VMTEST-RESULT rc=%d@@\n' "$rc"
poweroff -f
sleep 2
echo o >/proc/sysrq-trigger
while :; do sleep 60; done
