#!/usr/bin/env bash
# Runner of an `scx_express_bench --bundle DIR` bundle: boots one QEMU (TCG)
# VM per scheduler from the bundle's own QEMU, kernel and initramfs, several
# at once, and leaves each console log in OUTDIR/<sched>.log with plan.json
# beside them. Then, where scx_express lives:
#   scx_express_bench --from-logs OUTDIR --out RESULTS
# Needs only bash, coreutils and a glibc at least as new as the bundle's
# builder's (Debian bookworm). A boot that ends without a result (guest
# panic, hang) is booted again, 3 boots at most.
set -uo pipefail

usage() {
    cat <<EOF
usage: $0 [--smp N] [--jobs J] [--append ARGS] OUTDIR SCHED...
  --smp N        vCPUs per VM (default: plan.json's)
  --jobs J       VMs at once (default: all; each VM keeps N host threads busy)
  --append ARGS  extra kernel command line, e.g. "bench.repeat_from=2 bench.repeat_to=3"
  SCHED          eevdf eevdf-nice eevdf-fifo eevdf-probes express rustland bpfland lavd cosmos
EOF
}

B=$(cd "$(dirname "$0")" && pwd)
smp='' jobs=0 append=''
while [ $# -gt 0 ]; do
    case $1 in
    --smp) smp=${2:?}; shift ;;
    --jobs) jobs=${2:?}; shift ;;
    --append) append=${2:?}; shift ;;
    -h | --help) usage; exit 0 ;;
    -*) usage >&2; exit 2 ;;
    *) break ;;
    esac
    shift
done
[ $# -ge 2 ] || { usage >&2; exit 2; }
out=$1
shift
mkdir -p "$out"
cp "$B/plan.json" "$out/plan.json"
# SMP, MEM, DISK (empty: no disk), GUEST_TIMEOUT, written by the bundler.
# shellcheck source=/dev/null
. "$B/vm.env"
[ -n "$smp" ] || smp=$SMP
# shellcheck disable=SC2153 # DISK comes from vm.env, not a typo of disk
mem=$MEM disk=$DISK
# The guest enforces its own limit; the host allows it plus a margin.
limit=$((GUEST_TIMEOUT + 120))
[ "$jobs" -gt 0 ] 2>/dev/null || jobs=$#

export QEMU_MODULE_DIR=$B/qemu/modules

# boot SCHED ATTEMPT: one VM, console to OUTDIR/SCHED.ATTEMPT.log.
boot() {
    local s=$1 a=$2 img="$out/.disk-$1.img" dargs=()
    if [ -n "$disk" ]; then
        rm -f "$img"
        # Sparse. Written out with zeros first, it did not make the first
        # disk cells of a boot any faster (docs/benchmarks.md, "Net and disk
        # at 8 vCPUs, the IRQ shield on (`0045d4b`)").
        truncate -s "$disk" "$img"
        dargs=(-drive "file=$img,if=none,id=scratch,format=raw,cache=unsafe"
            -device "nvme,drive=scratch,serial=bench-scratch")
    fi
    timeout -k 10 "$limit" env LD_LIBRARY_PATH="$B/qemu/lib" "$B/qemu/qemu-system-x86_64" \
        -L "$B/qemu/fw" -accel tcg,thread=multi -cpu max -smp "$smp" -m "$mem" \
        -nodefaults -no-user-config -nographic -serial stdio -monitor none \
        -no-reboot -nic none -vga none "${dargs[@]}" \
        -kernel "$B/vmlinuz" -initrd "$B/initrd.xz" \
        -append "console=ttyS0 quiet panic=-1 maxcpus=1 tsc=reliable vmtest.attempt=$a bench.sched=$s $append" \
        </dev/null 2>&1 | sed -u 's/\r$//; s/\x1b\[[0-9;?]*[A-Za-z]//g; s/\x1bc//g' >"$out/$s.$a.log"
    rm -f "$img"
}

# one SCHED: boot, and boot again (3 boots at most) while the guest dies
# without a result: an 8-vCPU TCG guest sometimes panics early in boot
# ("Fatal exception in interrupt"). OUTDIR/SCHED.log keeps every boot, each
# after a `===== boot I/N =====` line when there was more than one;
# --from-logs counts only the last boot's cells and reports the retries.
one() {
    local s=$1 t0=$SECONDS a=0 max=3
    while [ "$a" -lt "$max" ]; do
        a=$((a + 1))
        boot "$s" "$a"
        grep -aq '@@VMTEST-RESULT rc=' "$out/$s.$a.log" && break
        echo "runner: $s: VM DIED without a result after $((SECONDS - t0)) s (boot $a/$max)" >&2
        tail -n 20 "$out/$s.$a.log" | sed 's/^/  | /' >&2
    done
    for ((i = 1; i <= a; i++)); do
        [ "$a" = 1 ] || echo "===== boot $i/$a ====="
        cat "$out/$s.$i.log"
    done >"$out/$s.log"
    rm -f "$out/$s".[0-9].log
    echo "runner: $s: $(grep -ao '@@VMTEST-RESULT rc=[0-9]*@@' "$out/$s.log" | tail -n 1 || echo 'no result') after $((SECONDS - t0)) s" >&2
}

echo "$(uname -srm), $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)" >"$out/host.txt"
# The host's own load, once a second, for the whole call: with several VMs
# at once their vCPU and I/O threads can outnumber the host's CPUs, and a
# guest's idle vCPU then waits for a host CPU when it is woken. That is the
# emulation's cost, not the guest scheduler's; these samples tell which.
# Columns: seconds since the start, then /proc/stat's aggregate cpu line
# (user nice system idle iowait irq softirq steal, in USER_HZ ticks) and
# procs_running (runnable host threads at that instant).
host_sampler() {
    echo "# s user nice system idle iowait irq softirq steal procs_running"
    while :; do
        read -r _ u n sy id io irq sirq st _ </proc/stat
        echo "$SECONDS $u $n $sy $id $io $irq $sirq $st $(sed -n 's/^procs_running //p' /proc/stat)"
        sleep 1
    done
}
host_sampler >>"$out/host-stat.txt" &
sampler=$!
trap 'kill "$sampler" 2>/dev/null' EXIT
echo "runner: $# VM(s), $jobs at a time, smp=$smp mem=$mem, kernel $(cat "$B/kernel-version")" >&2
running=0 vms=()
for s in "$@"; do
    one "$s" &
    vms+=($!)
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait -n # the sampler never ends, so this is a VM
        running=$((running - 1))
    fi
done
wait "${vms[@]}"
echo "runner: done; logs in $out" >&2
