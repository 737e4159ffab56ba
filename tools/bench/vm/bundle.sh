#!/usr/bin/env bash
# Packs a tools/bench/vm scenario to run on a bigger x86-64 host that has
# neither this repository nor Debian's packages: the `scx_express_bench` bundle's
# QEMU, firmware, kernel and runner, with the scenario's initramfs in place
# of the bench's. There, boot it as many times as wanted, one VM after
# another, and summarise here (or there: the summary is plain awk):
#
#   tools/bench/vm/bundle.sh DIR tools/bench/vm/ordinary.sh [run.sh options]  # here
#   DIR/runner.sh --smp 8 --jobs 1 OUT b1 b2 b3                                # there
#   tools/bench/vm/ordinary-runs.sh --summary OUT/b*.log                       # here
#
# The runner names each boot's console OUT/NAME.log and boots once more a
# guest that died without a result. run.sh options (--timeout, --env, ...)
# shape the initramfs; --smp and memory are the runner's.
set -euo pipefail
cd "$(dirname "$0")/../../.."

[ $# -ge 2 ] || { sed -n '2,14p' "$0" >&2; exit 2; }
dir=$1 scenario=$2
shift 2
exe=target/release/scx_express_bench
[ -x "$exe" ] || { echo "bundle.sh: build first (cargo build --release)" >&2; exit 2; }

rm -rf "$dir"
"$exe" --preset smoke --schedulers eevdf --bundle "$dir" >/dev/null
# The scenario's own time limit (header or --timeout) bounds each boot.
timeout=$(sed -n 's/^# vmtest:.*timeout=\([0-9]*\).*/\1/p' "$scenario" | head -n 1)
# Its scratch disk (header disk= or --disk), which the runner creates.
disk=$(sed -n 's/^# vmtest:.*[[:space:]]disk=\([0-9][0-9]*[KMG]\{0,1\}\).*/\1/p' "$scenario" | head -n 1)
for ((i = 1; i <= $#; i++)); do
    j=$((i + 1))
    [ "${!i}" = --timeout ] && timeout=${!j}
    [ "${!i}" = --disk ] && disk=${!j}
done
tests/vm/run.sh "$scenario" --initrd-out "$dir/initrd.xz" "$@" >/dev/null
sed -i "s/^GUEST_TIMEOUT=.*/GUEST_TIMEOUT=${timeout:-300}/; s/^MEM=.*/MEM=4G/; s/^DISK=.*/DISK=$disk/" "$dir/vm.env"
rm -rf "$dir/.build"
echo "bundle.sh: $scenario in $dir ($(du -sm "$dir" | cut -f1) MiB): $dir/runner.sh --smp N --jobs 1 OUT NAME..."
