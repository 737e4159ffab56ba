#!/usr/bin/env bash
# Run every VM test scenario (DIR/*.sh, default tests/vm/scenarios), one
# boot each, and summarise. Files starting with "_" are not scenarios.
# Ends with exactly one line "vm: N passed, N failed"; exits 1 if any failed.
set -euo pipefail
. "$(dirname "$0")/common.sh"

usage() {
    cat <<EOF
usage: $0 [--filter REGEX] [--verbose] [--log-dir DIR] [SCENARIO_DIR] [-- RUN_ARGS...]
  --filter REGEX  only scenarios whose name (without .sh) matches REGEX
  --verbose       stream each console to stdout
  --log-dir DIR   console logs and exported files (default target/vmtest)
  RUN_ARGS        passed to every run.sh (e.g. -- --smp 4)
EOF
}

filter='' verbose=0 dir=$VMTEST_DIR/scenarios
log_dir=${VMTEST_LOG_DIR:-$REPO_ROOT/target/vmtest}
run_args=()
while [ $# -gt 0 ]; do
    case $1 in
    --filter) filter=${2:?}; shift ;;
    --verbose) verbose=1 ;;
    --log-dir) log_dir=${2:?}; shift ;;
    --) shift; run_args=("$@"); break ;;
    -h | --help) usage; exit 0 ;;
    -*) usage >&2; exit 2 ;;
    *) dir=$1 ;;
    esac
    shift
done
[ -d "$dir" ] || die "no scenario directory: $dir"

scenarios=()
for s in "$dir"/*.sh; do
    [ -f "$s" ] || continue
    n=$(basename "$s" .sh)
    case $n in _*) continue ;; esac
    if [ -n "$filter" ] && ! [[ $n =~ $filter ]]; then continue; fi
    scenarios+=("$s")
done

# Fetch the kernel once up front, so a network problem shows up once.
kver=$("$VMTEST_DIR/kernel.sh" --print-version) || die "cannot get the guest kernel"
msg "kernel $kver, ${#scenarios[@]} scenario(s), logs in $log_dir"
mkdir -p "$log_dir"

pass=0 failed=0 failed_names=()
for s in "${scenarios[@]}"; do
    n=$(basename "$s" .sh)
    log=$log_dir/$n.log
    args=(--keep-log "$log" --out-dir "$log_dir/$n.out")
    [ "$verbose" = 1 ] || args+=(--quiet)
    t0=$(date +%s)
    set +e
    # run.sh's own messages (boot, VM DIED, retries) stay visible, indented.
    { "$VMTEST_DIR/run.sh" "$s" "${args[@]}" "${run_args[@]}" 2>&1 1>&3 3>&- |
        sed -u 's/^/    /' >&2; } 3>&1
    rc=${PIPESTATUS[0]}
    set -e
    secs=$(($(date +%s) - t0))
    if [ "$rc" = 0 ]; then
        pass=$((pass + 1))
        echo "PASS $n (${secs}s)"
    else
        failed=$((failed + 1))
        failed_names+=("$n")
        # (run.sh already showed the console tail of a dead VM.)
        if [ "$verbose" = 0 ] && [ "$rc" != 99 ] && [ -f "$log" ]; then
            echo "    --- last 25 lines of $log ---"
            tail -n 25 "$log" | sed 's/^/    | /'
        fi
        echo "FAIL $n rc=$rc (${secs}s)"
    fi
done

[ "${#scenarios[@]}" -gt 0 ] || msg "warning: no scenarios matched in $dir"
[ "$failed" = 0 ] || msg "failed: ${failed_names[*]} (logs in $log_dir)"
echo "vm: $pass passed, $failed failed"
[ "$failed" = 0 ] && [ "${#scenarios[@]}" -gt 0 ]
