#!/usr/bin/env bash
# Runs tools/bench/vm/ordinary.sh in several boots, one after another, and
# prints the median and the range of each ratio to EEVDF; or summarises the
# console logs of boots made elsewhere (tools/bench/README.md: on a bigger
# host through an initramfs built here, tools/bench/vm/bundle.sh).
#
#   tools/bench/vm/ordinary-runs.sh [--boots N] [--out DIR] [-- RUN_SH_ARGS...]
#   tools/bench/vm/ordinary-runs.sh --summary LOG...
#
# Every boot's console log goes to DIR (default target/ordinary) as
# boot-K.log. A boot that died without a result is retried by run.sh and
# never counted; one whose scenario failed is reported and left out.
set -euo pipefail
cd "$(dirname "$0")/../../.."

# summary LOG...: one line per boot, then median [min-max] per column.
summary() {
    grep -h -a '^ordinary: ' "$@" | sed 's/ |.*//' | awk '
        {
            for (i = 2; i <= NF; i++) {
                split($i, kv, "=")
                if (kv[1] == "sched" || kv[1] == "smp") { id[kv[1]] = kv[2]; continue }
                if (!(kv[1] in seen)) { seen[kv[1]] = 1; keys[++nk] = kv[1] }
                v[kv[1], ++n[kv[1]]] = kv[2]
            }
            print "boot " NR ": " $0
        }
        END {
            if (!NR) { print "no ordinary: lines found"; exit 1 }
            printf "%s, %d vCPUs, %d boots: median [min-max]\n", id["sched"], id["smp"], NR
            for (k = 1; k <= nk; k++) {
                key = keys[k]; m = n[key]
                for (i = 1; i <= m; i++) a[i] = v[key, i]
                for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++)
                    if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                med = (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
                printf "  %-10s %.3f [%.3f-%.3f]\n", key, med, a[1], a[m]
            }
        }'
}

if [ "${1:-}" = --summary ]; then
    shift
    summary "$@"
    exit
fi

boots=3 out=target/ordinary
while [ $# -gt 0 ]; do
    case $1 in
    --boots) boots=${2:?}; shift ;;
    --out) out=${2:?}; shift ;;
    --) shift; break ;;
    *) sed -n '2,13p' "$0" >&2; exit 2 ;;
    esac
    shift
done
mkdir -p "$out"
logs=()
for k in $(seq 1 "$boots"); do
    log=$out/boot-$k.log
    if tests/vm/run.sh tools/bench/vm/ordinary.sh --quiet --keep-log "$log" "$@"; then
        logs+=("$log")
        grep -a '^ordinary: ' "$log" | tail -n 1
    else
        echo "boot $k: failed (rc $?), left out; console in $log" >&2
    fi
done
[ ${#logs[@]} -gt 0 ] || { echo "no boot produced a result" >&2; exit 1; }
summary "${logs[@]}"
