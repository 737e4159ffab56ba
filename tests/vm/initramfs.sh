#!/usr/bin/env bash
# Build the test VM's initramfs (newc cpio): busybox-static with its applet
# links, host binaries plus the shared libraries ldd lists for them, extra
# files, the kernel config and the guest /init. Needs no root: device nodes
# come from a small hand-written cpio prepended to the one cpio(1) makes.
set -euo pipefail
. "$(dirname "$0")/common.sh"

usage() {
    cat <<EOF
usage: $0 -o OUT [--init FILE] [--kconfig FILE] [--gzip]
          [--bin HOST[:GUEST]]... [--file HOST:GUEST]...
  -o OUT         write the archive here
  --init FILE    guest /init (default: tests/vm/guest-init.sh)
  --kconfig FILE kernel config, stored as /lib/vmtest/kconfig
  --bin H[:G]    executable H, at G in the guest (default /bin/NAME), with
                 its ldd libraries at their host paths
  --file H:G     file or directory H, copied to G in the guest
  --gzip         gzip the archive (default: uncompressed, boots faster)
EOF
}

out='' init=$VMTEST_DIR/guest-init.sh kconfig='' gz=0
bins=() files=()
while [ $# -gt 0 ]; do
    case $1 in
    -o) out=${2:?}; shift ;;
    --init) init=${2:?}; shift ;;
    --kconfig) kconfig=${2:?}; shift ;;
    --bin) bins+=("${2:?}"); shift ;;
    --file) files+=("${2:?}"); shift ;;
    --gzip) gz=1 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
    esac
    shift
done
[ -n "$out" ] || { usage >&2; exit 2; }

need_tool cpio cpio
need_tool ldd libc-bin
BUSYBOX=${SCX_EXPRESS_BUSYBOX:-/bin/busybox}
[ -x "$BUSYBOX" ] || die "$BUSYBOX not found; install it with: apt-get install busybox-static"
[ "$gz" = 0 ] || need_tool gzip gzip

root=$(mktemp -d "${TMPDIR:-/tmp}/vmtest-initramfs.XXXXXX")
trap 'rm -rf "$root"' EXIT

# add_lib PATH: copy a shared library (following links) to the same path.
add_lib() {
    [ -e "$root$1" ] && return 0
    mkdir -p "$root$(dirname "$1")"
    cp -L "$1" "$root$1"
}

# add_exe HOST GUEST: copy an executable and the libraries it needs.
add_exe() {
    local host=$1 guest=$2 lib
    [ -f "$host" ] || die "binary not found: $host"
    mkdir -p "$root$(dirname "$guest")"
    rm -f "$root$guest" # may be a busybox applet link
    cp -L "$host" "$root$guest"
    chmod 755 "$root$guest"
    # ldd fails on static binaries ("not a dynamic executable"): no libs.
    local deps
    deps=$(ldd "$host" 2>/dev/null) || return 0
    # Lines: "libx.so => /path (0x..)" or "/lib64/ld-linux-x86-64.so.2 (0x..)".
    while read -r lib; do
        [ -n "$lib" ] && add_lib "$lib"
    done < <(printf '%s\n' "$deps" | awk '
        $2 == "=>" && $3 ~ /^\// { print $3; next }
        $1 ~ /^\// { print $1 }')
    # "not found" libraries would fail at run time in the guest; say so now.
    if printf '%s\n' "$deps" | grep -q 'not found'; then
        die "$host: missing libraries: $(printf '%s\n' "$deps" | grep 'not found' | tr -s ' \t' ' ')"
    fi
}

mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,etc,proc,sys,tmp,run,root,boot,lib/vmtest}

# Busybox and its applet links (skip "busybox" itself and /linuxrc).
add_exe "$BUSYBOX" /bin/busybox
while read -r applet; do
    case $applet in bin/busybox | linuxrc | "") continue ;; esac
    [ -e "$root/$applet" ] || ln -s /bin/busybox "$root/$applet"
done < <("$BUSYBOX" --list-full)

for b in "${bins[@]}"; do
    host=${b%%:*}
    if [ "$host" = "$b" ]; then guest=/bin/$(basename "$host"); else guest=${b#*:}; fi
    add_exe "$host" "$guest"
done

for f in "${files[@]}"; do
    host=${f%%:*} guest=${f#*:}
    if [ "$host" = "$f" ] || [ -z "$guest" ]; then
        die "--file wants HOST:GUEST, got '$f'"
    fi
    [ -e "$host" ] || die "file not found: $host"
    mkdir -p "$root$(dirname "$guest")"
    rm -rf "$root$guest"
    cp -rL "$host" "$root$guest"
done

[ -f "$init" ] || die "init not found: $init"
cp "$init" "$root/init"
chmod 755 "$root/init"
if [ -n "$kconfig" ]; then
    [ -f "$kconfig" ] || die "kernel config not found: $kconfig"
    cp -L "$kconfig" "$root/lib/vmtest/kconfig"
fi

# newc_node NAME MODE MAJOR MINOR: one data-less cpio entry (dir or device).
# Header: magic + 13 8-digit hex fields, then the NUL-terminated name padded
# to a multiple of 4 bytes (header is 110 bytes).
newc_node() {
    local name=$1 mode=$2 major=$3 minor=$4 ino=$5
    local nlen=$((${#name} + 1))
    printf '070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X' \
        "$ino" "$mode" 0 0 1 0 0 0 0 "$major" "$minor" "$nlen" 0
    printf '%s\0' "$name"
    local pad=$(((4 - (110 + nlen) % 4) % 4))
    [ "$pad" = 0 ] || head -c "$pad" /dev/zero
}

tmpout=$root.cpio
trap 'rm -rf "$root" "$tmpout"' EXIT
{
    # /dev/console must exist before /init runs, or init gets no stdio.
    newc_node dev $((0040755)) 0 0 1
    newc_node dev/console $((0020600)) 5 1 2
    newc_node TRAILER!!! 0 0 0 0
    # Everything else, owned by root in the guest.
    (cd "$root" && find . -mindepth 1 -printf '%P\n' | LC_ALL=C sort |
        cpio --quiet -o -H newc -R 0:0)
} >"$tmpout"
if [ "$gz" = 1 ]; then
    gzip -1 -c "$tmpout" >"$out"
else
    mv "$tmpout" "$out"
fi
