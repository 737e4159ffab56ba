#!/usr/bin/env bash
# Lists the functions of src/ and tools/bench/src/ (test modules aside)
# longer than MAX lines (default 80) that give no reason at their head: a
# `// long: WHY` line right above the fn or its attributes. Exits 1 if
# there are any.
# Counts from the `fn` line to the `}` at its indentation, as rustfmt
# writes them.
#   scripts/fn-length.sh [MAX]
set -euo pipefail
cd "$(dirname "$0")/.."
max=${1:-80}
# shellcheck disable=SC2016 # the awk program is in single quotes on purpose
find src tools/bench/src -name '*.rs' -print0 | sort -z | xargs -0 awk -v max="$max" '
FNR == 1 { infn = 0; reason = 0; skip = 0 }
skip { next }
/^#\[cfg\(test\)\]/ { skip = 1; next }   # test modules close each file
!infn && /^[ \t]*\/\/ long: / { reason = 1; next }
!infn && /^[ \t]*#\[/ { next }            # attributes between reason and fn
!infn && /^[ \t]*((pub(\([a-z]+\))? )?(const |unsafe |async |extern "C" )*)fn [A-Za-z0-9_]+/ {
    indent = $0; sub(/[^ \t].*/, "", indent)
    name = $0; sub(/.*fn /, "", name); sub(/[(<].*/, "", name)
    start = FNR; why = reason; reason = 0
    # A declaration (trait item) or a one-line body has nothing to count.
    infn = !($0 ~ /;[ \t]*$/ || ($0 ~ /\{/ && $0 ~ /\}[ \t]*$/))
    next
}
!infn { reason = 0; next }
$0 == indent "}" {
    n = FNR - start + 1
    if (n > max && !why) {
        printf "%s:%d: fn %s is %d lines (over %d; split it, or say why with a `// long:` line above it)\n", FILENAME, start, name, n, max
        bad = 1
    }
    infn = 0
}
END { exit bad }
'
