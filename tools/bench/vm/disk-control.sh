#!/bin/sh
# Benchmark (prints numbers, asserts nothing): how much of the decode
# stand-in's tok/s disk noise takes when no scheduler can help, against
# what it keeps under EEVDF and under scx_express, in one boot. The bench's
# disk noise (fio randwrite, 4 jobs, iodepth 32, on the emulated NVMe
# disk) costs the guest twice: its tasks compete for the vCPUs, and QEMU's
# disk emulation (MMIO exits, its I/O threads) takes host CPU and stalls
# vCPUs. The control isolates the first: EEVDF with the launcher alone on
# CPU 0 and fio on the other CPUs (taskset), so what it still loses is
# emulation, a cap no guest scheduler can lift. Phases, DUR s each:
#   eevdf clean, eevdf disk, control (isolated) clean, control disk,
#   express clean, express disk, shield clean, shield disk
# where shield is scx_express with express.irq_shield = true (the
# highest-numbered CPU shielded: the launcher goes there and tasks that
# submit block I/O are kept off it), and one line:
# "disk-control: eevdf R control R express R shield R" (disk tok/s ÷ the
# same phase's clean tok/s). The log lines also give fio's IOPS in each
# disk phase, what the ordinary task pays, and how late the stand-in's
# sleeping syncs woke past the fake GPU's end in each phase (its
# sync_late_mean_us: the timer's delivery plus the wait to run once
# woken). In the control no task shares the launcher's CPU, so its disk
# lateness above its clean one is what the emulation adds before and
# around the wakeup, whatever the scheduler.
#   tests/vm/run.sh tools/bench/vm/disk-control.sh [--env DUR=5]
# vmtest: smp=2 timeout=420 disk=1G bins=target/release/scx_express,/usr/bin/fio
# vmtest: files=workloads/build:/opt/w
# shellcheck source=../../../tests/vm/guest-lib.sh
. /lib/vmtest/guest-lib.sh

DUR=${DUR:-5}
last=$((VMTEST_SMP - 1))

# decode [PREFIX...]: one run of the stand-in; prints its tok/s.
decode() {
    "$@" /opt/w/decode --duration "$DUR" --json >/tmp/dec.out 2>&1
    tail -n 1 /tmp/dec.out | sed -n 's/.*"tok_per_s":\([0-9.]*\).*/\1/p'
}
# late: the last decode's mean sync lateness (µs), appended to $lates.
lates=''
late() {
    lates="$lates $(json_num /tmp/dec.out sync_late_mean_us)"
}
# fio_noise [PREFIX]: the bench's disk noise for DUR + 2 s, in the background.
fio_noise() {
    DISK_NOISE_PREFIX=$1 disk_noise $((DUR + 2)) --filename="$VMTEST_DISK" --direct=1 \
        >/tmp/fio.log 2>&1 &
    noise=$!
    sleep 1
}
# iops: the write IOPS of the last fio_noise, once it has ended.
iops() { sed -n 's/.*write: IOPS=\([^,]*\),.*/\1/p' /tmp/fio.log | head -n 1; }
# lane_wait FROM TO: the gpu class's mean wait from wakeup to running
# (µs) between two stats snapshots: the part of the lateness that is the
# scheduler's.
lane_wait() {
    _w=$(snap_delta "$1" "$2" classes.gpu.wait_us)
    _n=$(snap_delta "$1" "$2" classes.gpu.prev classes.gpu.llc classes.gpu.any classes.gpu.preempt)
    ratio "$_w" "$_n"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }

e_clean=$(decode)
late
fio_noise
e_disk=$(decode)
late
wait "$noise"
e_iops=$(iops)
c_clean=$(decode taskset -c 0)
late
fio_noise "taskset -c 1-$last"
c_disk=$(decode taskset -c 0)
late
wait "$noise"
c_iops=$(iops)
start_scx /tmp/scx.log
x_clean=$(decode)
late
fio_noise
stats_snapshot /tmp/x0
x_disk=$(decode)
late
stats_snapshot /tmp/x1
wait "$noise"
x_iops=$(iops)
stop_scx
printf '[express]\nirq_shield = true\n' >/tmp/shield.toml
start_scx /tmp/scx.log --config /tmp/shield.toml
s_clean=$(decode)
late
fio_noise
stats_snapshot /tmp/s0
s_disk=$(decode)
late
stats_snapshot /tmp/s1
wait "$noise"
s_iops=$(iops)
stop_scx

log "sync late (µs) clean/disk, each phase:$lates; the lane's wait per wakeup under disk (µs): express $(lane_wait /tmp/x0 /tmp/x1), shield $(lane_wait /tmp/s0 /tmp/s1)"
log "tok/s clean/disk: eevdf $e_clean/$e_disk, control $c_clean/$c_disk, express $x_clean/$x_disk, shield $s_clean/$s_disk (io_kept_off +$(snap_delta /tmp/s0 /tmp/s1 io_kept_off)); fio IOPS: eevdf $e_iops, control $c_iops, express $x_iops, shield $s_iops"
echo "disk-control: eevdf $(ratio "$e_disk" "$e_clean") control $(ratio "$c_disk" "$c_clean")" \
    "express $(ratio "$x_disk" "$x_clean") shield $(ratio "$s_disk" "$s_clean")"
