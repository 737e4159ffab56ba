#!/bin/sh
# Harness self-test: the guest kernel has sched_ext, BTF and its config where
# libbpf looks, and stress-ng runs.
# vmtest: smp=2 timeout=120 bins=/usr/bin/stress-ng
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh

log "kernel $(uname -r), $VMTEST_SMP CPUs, $VMTEST_MEM_MB MiB"
check "sched_ext sysfs exists" test -r /sys/kernel/sched_ext/state
state=$(sched_state)
[ "$state" = disabled ] || fail "sched_ext state is '$state', expected 'disabled'"
echo "ok: sched_ext state is disabled"
check "no BPF scheduler loaded" sh -c '! cat /sys/kernel/sched_ext/root/ops 2>/dev/null'
check "kernel BTF present" test -s /sys/kernel/btf/vmlinux
check "config has CONFIG_SCHED_CLASS_EXT=y" \
    grep -qx 'CONFIG_SCHED_CLASS_EXT=y' "/boot/config-$(uname -r)"
check "config has CONFIG_DEBUG_INFO_BTF=y" \
    grep -qx 'CONFIG_DEBUG_INFO_BTF=y' "/boot/config-$(uname -r)"
check "bpffs mounted" grep -q ' /sys/fs/bpf bpf ' /proc/mounts
check "cgroup2 mounted" grep -q ' /sys/fs/cgroup cgroup2 ' /proc/mounts
check "tracefs mounted" test -e /sys/kernel/tracing/trace
check "loopback up" sh -c 'ip link show lo | grep -q UP'
check "sees $VMTEST_SMP CPUs" test "$VMTEST_SMP" -ge 1

# stress-ng runs, and task_cputime sees the CPU time it burned.
stress-ng --cpu 1 --timeout 3s --quiet &
pid=$!
sleep 2
ticks=$(task_cputime "$pid")
log "stress-ng parent pid $pid: ${ticks:-?} ticks so far"
wait "$pid" || fail "stress-ng --cpu 1 failed (rc=$?)"
echo "ok: stress-ng --cpu 1 --timeout 3s exited 0"
check "task_cputime reads our own shell" test "$(task_cputime $$)" -ge 0
log "all checks passed"
