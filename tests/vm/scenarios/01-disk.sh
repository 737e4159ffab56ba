#!/bin/sh
# Harness: the `disk=SIZE` header attaches a scratch NVMe disk of that size
# ($VMTEST_DISK) that takes writes and reads them back.
# vmtest: smp=2 timeout=60 disk=64M
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh

check "VMTEST_DISK is set" test "$VMTEST_DISK" = /dev/nvme0n1
check "the disk is a block device" test -b "$VMTEST_DISK"
sectors=$(cat /sys/block/nvme0n1/size)
check "the disk has 64 MiB ($sectors sectors)" test "$sectors" = $((64 * 2048))
dd if=/dev/urandom of=/tmp/data bs=64k count=16 2>/dev/null
dd if=/tmp/data of="$VMTEST_DISK" bs=64k seek=100 conv=fsync 2>/dev/null || fail "write failed"
echo 3 >/proc/sys/vm/drop_caches
dd if="$VMTEST_DISK" of=/tmp/back bs=64k skip=100 count=16 iflag=direct 2>/dev/null ||
    dd if="$VMTEST_DISK" of=/tmp/back bs=64k skip=100 count=16 2>/dev/null || fail "read failed"
check "data read back intact" test "$(md5sum </tmp/data)" = "$(md5sum </tmp/back)"
