#!/usr/bin/env bash
# fetch.sh ID: the guest kernel pinned as ID in kernels.tsv, downloaded with `apt-get download`
# through a private apt configuration under the cache directory and unpacked with `dpkg -x`
# (never installed). Prints the unpacked directory. Exit 2 when it cannot be had (no apt, no
# network, the archive no longer has that version), with the reason on stderr.
#
# Cache: $MEMOFS_VM_CACHE (default ~/.cache/memofs-vm): apt/ (lists, configuration), debs/,
# kernels/ID/ (unpacked). A package already downloaded is never fetched again.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
id=${1:?usage: fetch.sh KERNEL-ID (see scripts/vm/kernels.tsv)}
cache=${MEMOFS_VM_CACHE:-${XDG_CACHE_HOME:-${HOME:-/var/tmp}/.cache}/memofs-vm}

cannot() {
    echo "fetch.sh: cannot get kernel $id: $*" >&2
    exit 2
}

line=$(awk -v id="$id" '$1 == id { print $2, $3 }' "$here/kernels.tsv")
[ -n "$line" ] || {
    echo "fetch.sh: no kernel '$id' in scripts/vm/kernels.tsv (ids: $(awk '!/^#/ && NF { printf "%s ", $1 }' "$here/kernels.tsv"))" >&2
    exit 1
}
read -r pkg version <<<"$line"
unpacked=$cache/kernels/$id
stamp=$unpacked/.package
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$pkg=$version" ]; then
    echo "$unpacked"
    exit 0
fi

command -v apt-get >/dev/null || cannot "apt-get is not installed (a Debian host is needed)"
command -v dpkg >/dev/null || cannot "dpkg is not installed"
apt=$cache/apt
mkdir -p "$cache/debs"
# shellcheck source=scripts/vm/apt.sh
. "$here/apt.sh"
private_apt "$apt" "$here/sources.list"

deb=$(find "$cache/debs" -maxdepth 1 -name "${pkg}_*.deb" 2>/dev/null | while read -r f; do
    [ "$(dpkg-deb -f "$f" Version 2>/dev/null)" = "$version" ] && echo "$f"
done | head -n1)
if [ -z "$deb" ]; then
    # The lists are refreshed when the pinned version is not in them (or they are missing).
    if ! apt-cache "${aptopts[@]}" show "$pkg=$version" >/dev/null 2>&1; then
        echo "fetch.sh: updating the private package lists in $apt" >&2
        apt-get "${aptopts[@]}" update >&2 || cannot "apt-get update failed (no network?)"
    fi
    (cd "$cache/debs" && apt-get "${aptopts[@]}" download "$pkg=$version" >&2) ||
        cannot "apt-get download $pkg=$version failed (the archive may have dropped that version: pin another in scripts/vm/kernels.tsv)"
    deb=$(find "$cache/debs" -maxdepth 1 -name "${pkg}_*.deb" | head -n1)
fi

rm -rf "$unpacked"
mkdir -p "$unpacked"
dpkg -x "$deb" "$unpacked" || cannot "dpkg -x $deb failed"
echo "$pkg=$version" >"$stamp"
echo "$unpacked"
