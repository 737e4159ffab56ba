#!/usr/bin/env bash
# Prints which src/bpf/*.bpf.c file uses what another one defines, one
# "user -> definer (symbols)" line per edge, and exits 1 if the edges make
# a circle, naming the files on it. The files linked into one object must
# form a DAG so that each can be read after the ones it uses.
#
# A definition is a top-level line of a .bpf.c file (comments and strings
# stripped): a __hidden function, a global (KNOB, const volatile, volatile,
# or a plain integer type at column 0) or a map (`} name SEC(".maps");`).
# A use is the same identifier anywhere in another .bpf.c file. Headers
# are not scanned: a static inline helper in a header that touches a map
# hides that use, so cross-file state goes through __hidden functions.
#   scripts/bpf-deps.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# Each file as "file<TAB>text" lines, comments and string literals removed.
strip() {
    local f
    for f in src/bpf/*.bpf.c; do
        perl -0pe 's{/\*.*?\*/}{ }gs; s{//[^\n]*}{}g; s{"(?:\\.|[^"\\\n])*"}{""}g' "$f" |
            sed "s|^|${f#src/bpf/}\t|"
    done
}

# shellcheck disable=SC2016 # the awk program is in single quotes on purpose
edges=$(strip | awk -F'\t' '
{
    file = $1; line = $0; sub(/^[^\t]*\t/, "", line)
    files[file] = 1
    if (line ~ /^__hidden /) {
        name = line; sub(/\(.*/, "", name); sub(/.*[ *]/, "", name)
        def[name] = def[name] " " file
    } else if (line ~ /^} *[A-Za-z_][A-Za-z0-9_]* +SEC\(""\) *;/) {
        name = line; sub(/^} */, "", name); sub(/[ ].*/, "", name)
        def[name] = def[name] " " file
    } else if (line ~ /^(KNOB|const|volatile|u8|u16|u32|u64|s8|s16|s32|s64|bool|int|char) [^(]*;[ \t]*$/) {
        decl = line
        sub(/=.*/, "", decl); gsub(/SEC\([^)]*\)/, "", decl)
        gsub(/\[[^]]*\]/, "", decl); sub(/;.*/, "", decl)
        n = split(decl, parts, ",")
        for (i = 1; i <= n; i++) {
            name = parts[i]; sub(/[ \t]+$/, "", name); sub(/.*[ *]/, "", name)
            def[name] = def[name] " " file
        }
    }
    text[file] = text[file] " " line
}
END {
    for (file in files) {
        delete seen
        s = text[file]
        while (match(s, /[A-Za-z_][A-Za-z0-9_]*/)) {
            id = substr(s, RSTART, RLENGTH); s = substr(s, RSTART + RLENGTH)
            if (!(id in def) || (id in seen)) continue
            seen[id] = 1
            if (index(def[id] " ", " " file " ")) continue  # its own
            n = split(def[id], owners, " ")
            for (i = 1; i <= n; i++) {
                if (owners[i] == "") continue
                key = file " " owners[i]
                syms[key] = syms[key] ? syms[key] "," id : id
            }
        }
    }
    for (key in syms) {
        split(key, ends, " ")
        printf "%s %s %s\n", ends[1], ends[2], syms[key]
    }
}' | sort)

awk '{ printf "%-18s -> %-18s (%s)\n", $1, $2, $3 }' <<<"$edges"

# GNU tsort lists, on stderr, the files of each circle it breaks, in the
# order of the edges ("input contains a loop:" opens each one).
if ! loops=$(awk '{ print $1, $2 }' <<<"$edges" | tsort 2>&1 >/dev/null) || [ -n "$loops" ]; then
    awk '
    /input contains a loop/ { if (n) print_loop(); n = 0; next }
    { sub(/^tsort: /, ""); files[++n] = $0 }
    function print_loop(  i, s) {
        s = files[1]
        for (i = 2; i <= n; i++) s = s " -> " files[i]
        print "bpf-deps: circle: " s " -> " files[1]
    }
    END { if (n) print_loop() }' <<<"$loops" >&2
    exit 1
fi
echo "bpf-deps: no circle ($(wc -l <<<"$edges") edges)"
