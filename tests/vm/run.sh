#!/usr/bin/env bash
# Boot one VM test scenario under QEMU (TCG) and exit with its status.
# See tests/vm/README.md. Exit codes: the scenario's own rc; 98 when the
# scenario passed but the kernel logged BUG/Oops/panic; 99 when the guest
# died (panic, hang, no result) in 3 boots in a row (up to 5 when the deaths
# are TCG's `Oops: int3`, README "Caveats"); 2 for usage/setup errors.
set -euo pipefail
. "$(dirname "$0")/common.sh"

usage() {
    cat <<EOF
usage: $0 SCENARIO [options]
  --smp N             vCPUs (default 2)
  --mem M             guest memory, QEMU syntax (default 2G)
  --timeout S         scenario time limit in seconds (default 300)
  --bin H[:G]         add executable H (at G, default /bin/NAME) + its libs
  --file H:G          add file or directory H at G in the guest
  --env K=V           export K=V to the scenario
  --append ARGS       extra kernel command line
  --disk SIZE         attach a scratch disk of SIZE (e.g. 1G; sparse raw
                      image, deleted after the run) as /dev/nvme0n1
  --keep-log FILE     save the console log (all attempts) to FILE
  --out-dir DIR       save files the scenario sent with export_file
  --quiet             do not stream the console to stdout
  --no-retry          do not boot again when the guest dies
  --initrd-out FILE   build the initramfs into FILE (xz), print the kernel's
                      directory and exit without booting: to boot the
                      scenario on another machine (tools/bench/README.md)
Header lines "# vmtest: key=value ..." in SCENARIO set defaults (keys smp,
mem, timeout, disk, bins, files, env; lists comma-separated; paths relative
to the repository root). Options add to or override them.
EOF
}

[ $# -ge 1 ] || { usage >&2; exit 2; }
case $1 in -h | --help) usage; exit 0 ;; esac
scenario=$1
shift
[ -f "$scenario" ] || die "scenario not found: $scenario"
name=$(basename "$scenario" .sh)

smp=2 mem=2G timeout=300 disk='' append='' keep_log='' out_dir='' quiet=0 attempts=3 initrd_out=''
bins=() files=() envs=()

# Header paths are relative to the repository root.
repo_path() { case $1 in /*) echo "$1" ;; *) echo "$REPO_ROOT/$1" ;; esac; }

# --- Scenario header ----------------------------------------------------
set -f # no globbing while splitting header words
while IFS= read -r line; do
    case $line in "# vmtest:"*) ;; *) continue ;; esac
    for tok in ${line#"# vmtest:"}; do
        key=${tok%%=*} val=${tok#*=}
        [ "$key" != "$tok" ] || die "$scenario: header token '$tok' is not key=value"
        IFS=, read -ra items <<<"$val"
        case $key in
        smp) smp=$val ;;
        mem) mem=$val ;;
        timeout) timeout=$val ;;
        disk) disk=$val ;;
        bins)
            for x in "${items[@]}"; do
                h=${x%%:*}
                if [ "$h" = "$x" ]; then bins+=("$(repo_path "$h")")
                else bins+=("$(repo_path "$h"):${x#*:}"); fi
            done
            ;;
        files)
            for x in "${items[@]}"; do
                [ "${x%%:*}" != "$x" ] || die "$scenario: files entry '$x' is not HOST:GUEST"
                files+=("$(repo_path "${x%%:*}"):${x#*:}")
            done
            ;;
        env) envs+=("${items[@]}") ;;
        tcg) hdr_tcg_thread=$val ;;
        *) die "$scenario: unknown header key '$key'" ;;
        esac
    done
done <"$scenario"
set +f

# --- Options ------------------------------------------------------------
while [ $# -gt 0 ]; do
    case $1 in
    --smp) smp=${2:?} ;;
    --mem) mem=${2:?} ;;
    --timeout) timeout=${2:?} ;;
    --bin) bins+=("${2:?}") ;;
    --file) files+=("${2:?}") ;;
    --env) envs+=("${2:?}") ;;
    --append) append=${2:?} ;;
    --disk) disk=${2:?} ;;
    --keep-log) keep_log=${2:?} ;;
    --out-dir) out_dir=${2:?} ;;
    --initrd-out) initrd_out=${2:?} ;;
    --quiet) quiet=1; shift; continue ;;
    --no-retry) attempts=1; shift; continue ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
    esac
    shift 2
done
[[ $smp =~ ^[1-9][0-9]*$ ]] || die "bad --smp '$smp'"
[[ $timeout =~ ^[1-9][0-9]*$ ]] || die "bad --timeout '$timeout'"
[[ $mem =~ ^[1-9][0-9]*[MG]?$ ]] || die "bad --mem '$mem'"
[[ -z $disk || $disk =~ ^[1-9][0-9]*[MG]$ ]] || die "bad --disk '$disk' (e.g. 512M, 1G)"

need_tool qemu-system-x86_64 qemu-system-x86
need_tool timeout coreutils

kdir=$("$VMTEST_DIR/kernel.sh")

work=$(mktemp -d "${TMPDIR:-/tmp}/vmtest-run.XXXXXX")
trap 'rm -rf "$work"' EXIT

# --- Initramfs ----------------------------------------------------------
# Values are single-quoted for the guest shell.
shq() { printf "'%s'" "${1//\'/\'\\\'\'}"; }
{
    echo "VMTEST_TIMEOUT=$timeout"
    echo "VMTEST_NAME=$(shq "$name")"
    [ -z "$disk" ] || echo "export VMTEST_DISK=/dev/nvme0n1"
    for e in "${envs[@]}"; do
        k=${e%%=*}
        [[ $e == *=* && $k =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die "bad env entry '$e'"
        echo "export $k=$(shq "${e#*=}")"
    done
} >"$work/env"

ir_args=(-o "$work/initrd.cpio" --kconfig "$kdir/config"
    --file "$scenario:/scenario.sh"
    --file "$VMTEST_DIR/guest-lib.sh:/lib/vmtest/guest-lib.sh"
    --file "$work/env:/etc/vmtest/env")
for b in "${bins[@]}"; do ir_args+=(--bin "$b"); done
for f in "${files[@]}"; do ir_args+=(--file "$f"); done
"$VMTEST_DIR/initramfs.sh" "${ir_args[@]}"
if [ -n "$initrd_out" ]; then
    xz --check=crc32 -9 -T0 -c "$work/initrd.cpio" >"$initrd_out"
    echo "$kdir"
    exit 0
fi

# --- Boot ---------------------------------------------------------------
# Host-side limit: the scenario's own limit plus room for boot and shutdown.
host_limit=$((timeout + ${SCX_EXPRESS_BOOT_MARGIN:-60}))
# The environment overrides a scenario's tcg= header; multi is the default.
tcg_thread=${SCX_EXPRESS_TCG_THREAD:-${hdr_tcg_thread:-multi}}
case $tcg_thread in multi | single) ;; *) die "SCX_EXPRESS_TCG_THREAD must be multi or single" ;; esac
qemu=(qemu-system-x86_64 -accel "tcg,thread=$tcg_thread" -cpu max
    -smp "$smp" -m "$mem" -nodefaults -no-user-config -nographic
    -serial stdio -monitor none -no-reboot -nic none -vga none
    -kernel "$kdir/vmlinuz" -initrd "$work/initrd.cpio")
# Scratch disk: NVMe, because the cloud kernel builds the NVMe driver in
# while virtio-blk is a module (the initramfs carries no modules).
if [ -n "$disk" ]; then
    truncate -s "$disk" "$work/disk.img"
    qemu+=(-drive "file=$work/disk.img,if=none,id=scratch,format=raw,cache=unsafe"
        -device "nvme,drive=scratch,serial=vmtest-scratch")
fi
# vmtest.attempt=N tells the guest which boot this is ($VMTEST_ATTEMPT).
# maxcpus=1: the kernel finishes booting on one CPU and guest-init.sh onlines
# the others. Multi-threaded TCG can crash a guest that patches kernel text
# while another vCPU runs it (README: caveats); at boot that happens at about
# 3 s ("sched_clock: Marking stable"), and one CPU makes it safe.
# tsc=reliable: TCG's TSC follows the host clock on every vCPU; without it
# the TSC checks may mark it unstable later, which patches sched_clock again.
cmdline="console=ttyS0 quiet panic=-1 maxcpus=1 tsc=reliable $append"

KERR='^(vmtest: kmsg: )?\[ *[0-9]+\.[0-9]+\] .*(Kernel panic|BUG:|Oops|general protection fault|Unable to handle kernel)'

# boot LOG: one boot, console to LOG (and stdout unless --quiet); sets qrc.
boot() {
    local sink=/dev/stdout
    [ "$quiet" = 0 ] || sink=/dev/null
    set +e
    # Drop CRs and the firmware's terminal escapes (ESC c, ESC [ ... X).
    timeout --foreground -k 10 "$host_limit" "${qemu[@]}" \
        -append "$cmdline vmtest.attempt=$attempt" </dev/null 2>&1 |
        sed -u 's/\r$//; s/\x1b\[[0-9;?]*[A-Za-z]//g; s/\x1bc//g' |
        tee "$1" >"$sink"
    qrc=${PIPESTATUS[0]}
    set -e
    # End the log (and the stream) with a newline.
    if [ -s "$1" ] && [ -n "$(tail -c 1 "$1")" ]; then
        echo >>"$1"
        echo >"$sink"
    fi
}

# died_reason LOG: why a boot produced no result.
died_reason() {
    local p
    p=$(grep -a -m1 -E 'Kernel panic|BUG:|Oops|general protection fault' "$1" || true)
    if [ -n "$p" ]; then echo "kernel crashed: ${p#*] }"
    elif [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
        echo "no result within ${host_limit}s (guest hung?)"
    else echo "guest stopped without a result (qemu rc=$qrc)"; fi
}

INT3_MAX_BOOTS=5
rc=99 attempt=0 log=
while [ "$attempt" -lt "$attempts" ]; do
    attempt=$((attempt + 1))
    log=$work/console.$attempt.log
    msg "$name: boot $attempt/$attempts (smp=$smp mem=$mem timeout=${timeout}s, kernel $(cat "$kdir/version"))"
    t0=$(date +%s.%N)
    boot "$log"
    secs=$(echo "$(date +%s.%N) $t0" | awk '{ printf "%.1f", $1 - $2 }')
    marker=$(grep -a -o '@@VMTEST-RESULT rc=[0-9]*@@' "$log" | tail -n 1 || true)
    # A guest clock that ran faster than the host's (seen once on a busy
    # host; a wrong TSC calibration is the suspect: TCG guests read the
    # host's TSC but calibrate it against emulated timers). Every kernel
    # timeout in such a boot (sched_ext watchdog, RCU stall, hung task)
    # fires early, so its result means nothing: boot again.
    gup=$(sed -n 's/^vmtest: scenario exited rc=[0-9]* at \([0-9.]*\)s$/\1/p' "$log" | tail -n 1)
    if [ -n "$marker" ] && [ -n "$gup" ] &&
        awk -v g="$gup" -v h="$secs" 'BEGIN { exit !(g > 1.25 * h + 5) }'; then
        msg "VM CLOCK: $name: the guest's clock ran ${gup}s in ${secs}s of host time ($(grep -a -m1 '^vmtest: clock:' "$log" || echo 'no calibration line')): its result does not count"
        marker=''
        if [ "$attempt" -lt "$attempts" ]; then
            msg "$name: booting again ($((attempts - attempt)) more at most)"
            continue
        fi
        msg "VM DIED: $name: no boot with a sane clock in $attempts; NOT a pass (rc=99)"
        rc=99
        break
    fi
    if [ -n "$marker" ]; then
        rc=${marker#*rc=}
        rc=${rc%@@}
        msg "$name: scenario rc=$rc after ${secs}s"
        if [ "$attempt" -gt 1 ]; then
            msg "note: $name: result is from boot $attempt; the earlier boot(s) died (flaky guest?)"
        fi
        break
    fi
    msg "VM DIED: $name: $(died_reason "$log") after ${secs}s"
    msg "--- last 20 console lines ---"
    tail -n 20 "$log" | sed 's/^/  | /' >&2
    # The multi-threaded TCG crash while the kernel patches its code
    # (README, "Caveats"; sched_ext's enable and disable flip static keys)
    # is the emulator's, not the scenario's: it earns one more boot, up to
    # INT3_MAX_BOOTS in all. One CI run needed the third boot of a test.
    if [ "$attempts" -gt 1 ] && [ "$attempt" -eq "$attempts" ] &&
        [ "$attempts" -lt "$INT3_MAX_BOOTS" ] && grep -a -q 'Oops: int3' "$log"; then
        attempts=$((attempts + 1))
    fi
    if [ "$attempt" -lt "$attempts" ]; then
        msg "$name: booting again ($((attempts - attempt)) more at most)"
    else
        msg "VM DIED: $name: no result from $attempts boot(s); NOT a pass (rc=99)"
    fi
done

if [ -n "$marker" ]; then
    # A result came back; still look for kernel errors.
    kerr=$(grep -a -E "$KERR" "$log" || true)
    if [ -n "$kerr" ]; then
        msg "KERNEL ERROR in $name's console:"
        printf '%s\n' "$kerr" | head -n 20 | sed 's/^/  | /' >&2
        if [ "$rc" = 0 ]; then
            msg "$name: scenario passed but the kernel reported errors; rc=98"
            rc=98
        fi
    fi
    kwarn=$(grep -a -E '^vmtest: kmsg: .*(WARNING:|soft lockup|hung task|rcu.*stall)' "$log" || true)
    if [ -n "$kwarn" ]; then
        msg "kernel warnings (not fatal):"
        printf '%s\n' "$kwarn" | head -n 10 | sed 's/^/  | /' >&2
    fi
fi

# --- Files exported by the scenario -------------------------------------
if [ -n "$out_dir" ] && [ -n "$marker" ] &&
    grep -q '^@@VMTEST-FILE name=' "$log"; then
    mkdir -p "$out_dir"
    awk -v dir="$work/export" '
        /^@@VMTEST-FILE name=[A-Za-z0-9._-]+ md5=[0-9a-f]+@@$/ {
            # fields: "", VMTEST-FILE, name, NAME, md5, SUM
            split($0, a, /[ =@]+/); f = dir "/" a[4]
            print a[4], a[6] >> (dir "/.list"); printf "" > f; on = 1; next }
        /^@@VMTEST-FILE-END@@$/ { close(f); on = 0; next }
        on { print >> f }' <(mkdir -p "$work/export"; cat "$log")
    if [ -f "$work/export/.list" ]; then
        while read -r f sum; do
            if base64 -d "$work/export/$f" >"$out_dir/$f" 2>/dev/null &&
                [ "$(md5sum <"$out_dir/$f" | cut -d' ' -f1)" = "$sum" ]; then
                msg "exported $out_dir/$f"
            else
                msg "warning: exported file $f is corrupt (console noise?)"
            fi
        done <"$work/export/.list"
    fi
fi

if [ -n "$keep_log" ]; then
    mkdir -p "$(dirname "$keep_log")"
    for ((i = 1; i <= attempt; i++)); do
        [ "$attempt" = 1 ] || echo "===== boot $i/$attempt ====="
        cat "$work/console.$i.log"
    done >"$keep_log"
fi
exit "$rc"
