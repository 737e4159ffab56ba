#!/usr/bin/env bash
# Fetch (once) and cache the guest kernel for the VM tests: Debian sid's
# linux-image-cloud-amd64 (sched_ext, BTF). Prints the cached directory, which
# holds vmlinuz, config and version; with --print-version prints the kernel
# release instead. Later runs use the cache and need no network.
#
# Env: SCX_EXPRESS_CACHE  cache root (default ~/.cache/scx_express)
#      SCX_EXPRESS_KERNEL  use this vmlinuz instead of the Debian one
#      SCX_EXPRESS_KCONFIG its config (default: config* next to it)
set -euo pipefail
. "$(dirname "$0")/common.sh"

usage() {
    cat <<EOF
usage: $0 [--print-version] [--refresh]
  --print-version  print the kernel release (uname -r) instead of the directory
  --refresh        ask sid for its current kernel even if one is cached
EOF
}

print_version=0 refresh=0
while [ $# -gt 0 ]; do
    case $1 in
    --print-version) print_version=1 ;;
    --refresh) refresh=1 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
    esac
    shift
done

KROOT=$SCX_EXPRESS_CACHE/kernel
MIRROR=http://deb.debian.org/debian
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
META_PKG=linux-image-cloud-amd64

# Kernel release string from a bzImage: setup header magic "HdrS" at 0x202,
# kernel_version (offset of the string, minus 0x200) at 0x20e.
bzimage_release() {
    local off rel
    [ "$(dd if="$1" bs=1 skip=514 count=4 2>/dev/null)" = HdrS ] || return 1
    off=$(od -An -tu2 -j526 -N2 "$1" | tr -d ' ')
    [ -n "$off" ] && [ "$off" -gt 0 ] || return 1
    rel=$(dd if="$1" bs=1 skip=$((off + 512)) count=256 2>/dev/null |
        tr '\0' '\n' | sed -n '1s/ .*//p')
    [ -n "$rel" ] || return 1
    echo "$rel"
}

# Print the result for a directory holding vmlinuz/config/version.
finish() {
    if [ "$print_version" = 1 ]; then cat "$1/version"; else echo "$1"; fi
    exit 0
}

# --- Override: a locally supplied kernel --------------------------------
if [ -n "${SCX_EXPRESS_KERNEL:-}" ]; then
    k=$(realpath "$SCX_EXPRESS_KERNEL" 2>/dev/null || true)
    [ -f "$k" ] || die "SCX_EXPRESS_KERNEL=$SCX_EXPRESS_KERNEL: no such file"
    ver=$(bzimage_release "$k") || die "$k: not a bzImage (no version found)"
    cfg=${SCX_EXPRESS_KCONFIG:-}
    if [ -z "$cfg" ]; then
        for c in "$(dirname "$k")/config" "$(dirname "$k")/config-$ver" \
            "$(dirname "$k")/.config" "/boot/config-$ver"; do
            [ -f "$c" ] && { cfg=$c; break; }
        done
    fi
    [ -f "$cfg" ] ||
        die "no kernel config for $k; set SCX_EXPRESS_KCONFIG (libbpf needs it for __kconfig)"
    # A per-path directory of links keeps the same interface as the cache.
    d=$KROOT/override-$(printf '%s' "$k" | sha1sum | cut -c1-12)
    mkdir -p "$d"
    ln -sfn "$k" "$d/vmlinuz"
    ln -sfn "$(realpath "$cfg")" "$d/config"
    echo "$ver" >"$d/version"
    finish "$d"
fi

valid() { [ -s "$1/vmlinuz" ] && [ -s "$1/config" ] && [ -s "$1/version" ]; }

if [ "$refresh" = 0 ] && valid "$KROOT/current"; then
    finish "$(cd "$KROOT/current" && pwd -P)"
fi

# --- Fetch from Debian sid, never touching the host's apt state ---------
need_tool apt-get apt
need_tool dpkg-deb dpkg
[ -r "$KEYRING" ] || die "$KEYRING missing; install it with: apt-get install debian-archive-keyring"
mkdir -p "$KROOT"

# Serialise concurrent fetches.
if command -v flock >/dev/null; then
    exec 9>"$KROOT/.lock"
    flock 9
    # Another run may have fetched it while we waited.
    if [ "$refresh" = 0 ] && valid "$KROOT/current"; then
        finish "$(cd "$KROOT/current" && pwd -P)"
    fi
fi

APTD=$SCX_EXPRESS_CACHE/apt
mkdir -p "$APTD/lists/partial" "$APTD/cache/archives/partial"
echo "deb [signed-by=$KEYRING] $MIRROR sid main" >"$APTD/sources.list"
APT_OPTS=(
    -o "Dir::Etc::SourceList=$APTD/sources.list"
    -o Dir::Etc::SourceParts=/dev/null
    -o Dir::Etc::Preferences=/dev/null
    -o Dir::Etc::PreferencesParts=/dev/null
    -o "Dir::State::Lists=$APTD/lists"
    -o "Dir::Cache=$APTD/cache"
    -o Dir::State::status=/dev/null
    -o APT::Architecture=amd64
    -o APT::Architectures=amd64
    -o Acquire::Languages=none
    -o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false
    -o Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false
    -o Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false
    -o Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled=false
    -o "APT::Sandbox::User=$(id -un)"
)

msg "updating private sid package lists in $APTD"
if ! apt-get -q --error-on=any "${APT_OPTS[@]}" update >&2; then
    if valid "$KROOT/current"; then
        msg "warning: apt-get update of sid failed; keeping the cached kernel"
        finish "$(cd "$KROOT/current" && pwd -P)"
    fi
    die "apt-get update of sid failed (network? $MIRROR)"
fi

# linux-image-cloud-amd64 depends on linux-image-<release>.
ver=$(apt-cache "${APT_OPTS[@]}" depends "$META_PKG" |
    sed -n 's/^ *Depends: linux-image-\([0-9][^ ]*\)$/\1/p' | head -n 1)
[ -n "$ver" ] || die "cannot resolve the kernel release behind $META_PKG in sid"
pkgver=$(apt-cache "${APT_OPTS[@]}" show "$META_PKG" |
    sed -n 's/^Version: //p' | head -n 1)
msg "sid $META_PKG $pkgver -> kernel $ver"

dest=$KROOT/$ver
if ! valid "$dest"; then
    tmp=$(mktemp -d "$KROOT/.fetch.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    # The image package is a stub nowadays: vmlinuz lives in linux-binary-*
    # and config in linux-base-*. Take whichever of them exist.
    pkgs=()
    for p in "linux-image-$ver" "linux-binary-$ver" "linux-base-$ver"; do
        if apt-cache "${APT_OPTS[@]}" show "$p" >/dev/null 2>&1; then pkgs+=("$p"); fi
    done
    msg "downloading ${pkgs[*]}"
    (cd "$tmp" && apt-get -q "${APT_OPTS[@]}" download "${pkgs[@]}") >&2 ||
        die "apt-get download failed"
    for deb in "$tmp"/*.deb; do dpkg-deb -x "$deb" "$tmp/x"; done
    vmlinuz='' config=''
    for c in "$tmp/x/usr/lib/modules/$ver/vmlinuz" "$tmp/x/boot/vmlinuz-$ver"; do
        [ -f "$c" ] && { vmlinuz=$c; break; }
    done
    for c in "$tmp/x/usr/lib/modules/$ver/config" "$tmp/x/boot/config-$ver"; do
        [ -f "$c" ] && { config=$c; break; }
    done
    [ -n "$vmlinuz" ] || die "no vmlinuz for $ver in ${pkgs[*]}"
    [ -n "$config" ] || die "no config for $ver in ${pkgs[*]}"
    grep -qx 'CONFIG_SCHED_CLASS_EXT=y' "$config" ||
        die "kernel $ver lacks CONFIG_SCHED_CLASS_EXT=y"
    mkdir -p "$tmp/out"
    cp "$vmlinuz" "$tmp/out/vmlinuz"
    cp "$config" "$tmp/out/config"
    echo "$ver" >"$tmp/out/version"
    echo "$pkgver" >"$tmp/out/pkgversion"
    rm -rf "$dest"
    mv "$tmp/out" "$dest"
    rm -rf "$tmp"
    trap - EXIT
    msg "cached kernel $ver in $dest"
fi
ln -sfn "$ver" "$KROOT/current"
finish "$dest"
