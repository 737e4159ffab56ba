#!/bin/sh
# Benchmark probe (prints numbers, asserts nothing): where the decode
# stand-in's time goes under the bench's disk noise, with scx_express
# running (default config). Twice, fio anywhere then fio on CPU 1 only
# (taskset): `scx_express trace --pid` of the stand-in for DUR - 1 s
# (launches, syncs, off-CPU time, IRQ counts and time by vector), its
# tok/s, and the NVMe queues' lines of /proc/interrupts before and after
# (per-CPU columns: which CPU's queue completed the I/O). Used for
# docs/benchmarks.md, "Disk noise".
#   tests/vm/run.sh tools/bench/vm/disk-trace.sh [--env DUR=5]
# vmtest: smp=2 timeout=300 disk=1G bins=target/release/scx_express,/usr/bin/fio
# vmtest: files=workloads/build:/opt/w
# shellcheck source=../../../tests/vm/guest-lib.sh
. /lib/vmtest/guest-lib.sh

DUR=${DUR:-5}
grep nvme /proc/interrupts
start_scx /tmp/scx.log
for pin in "" "taskset -c 1"; do
    DISK_NOISE_PREFIX=$pin disk_noise $((DUR + 4)) --filename="$VMTEST_DISK" --direct=1 \
        >/tmp/fio.log 2>&1 &
    noise=$!
    sleep 1
    /opt/w/decode --duration "$DUR" --json >/tmp/dec.out 2>&1 &
    dec=$!
    sleep 0.3
    scx_express trace --pid $dec --duration $((DUR - 1)) >/tmp/trace.out 2>&1
    wait $dec
    echo "disk-trace: fio pinned='$pin' tok/s $(tail -n 1 /tmp/dec.out | sed -n 's/.*"tok_per_s":\([0-9.]*\).*/\1/p')"
    cat /tmp/trace.out
    wait $noise
    grep nvme /proc/interrupts
done
stop_scx
