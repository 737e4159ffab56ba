# shellcheck shell=bash
# Host-side helpers shared by the tests/vm scripts (sourced, not run).

VMTEST_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$VMTEST_DIR/../.." && pwd)
SCX_EXPRESS_CACHE=${SCX_EXPRESS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/scx_express}
export VMTEST_DIR REPO_ROOT SCX_EXPRESS_CACHE

# Message prefix: the calling script's name.
_vm_me=$(basename "$0")

msg() { printf '%s: %s\n' "$_vm_me" "$*" >&2; }
die() { printf '%s: error: %s\n' "$_vm_me" "$*" >&2; exit 2; }

# need_tool CMD DEBIAN_PACKAGE: die with an install hint if CMD is missing.
need_tool() {
    command -v "$1" >/dev/null 2>&1 ||
        die "'$1' not found; install it with: apt-get install $2"
}
