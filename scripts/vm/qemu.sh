#!/usr/bin/env bash
# qemu.sh: QEMU 10.0.2 from Debian bookworm-backports, for what needs a QEMU newer than Debian
# 12's 7.2 (vhost-user back-end state transfer for live migration came in 8.2). The packages
# pinned below are downloaded with `apt-get download` through a private apt configuration
# (scripts/vm/sources-qemu.list) and unpacked with `dpkg -x`, never installed. Prints the path of
# a wrapper that runs the unpacked qemu-system-x86_64 with its own libraries (LD_LIBRARY_PATH,
# exported, so QEMU's children see it too), its own modules (QEMU_MODULE_DIR) and its own
# firmware (`-L` put in front of the arguments; QEMU searches the -L directories first wherever
# they stand). Exit 2 when it cannot be had (no apt, no network, the archive no longer has a
# pinned version, the host lacks a library), with the reason on stderr.
#
# Cache: $MEMOFS_VM_CACHE (default ~/.cache/memofs-vm), shared with fetch.sh: apt-qemu/ (its own
# lists, so that `apt-get update` here leaves fetch.sh's apt/ alone), debs/, qemu-10.0.2/ (root/
# the unpacked packages, bin/ the wrapper, .packages the stamp). A package already downloaded is
# never fetched again; once the stamp is written a run only compares it.
#
# What is fetched, and why:
# - qemu-system-x86 (the binary), qemu-system-data (keymaps, option ROMs) and seabios (the
#   bookworm-backports one: 10.0.2 wants seabios >> 1.16.3-1, Debian 12 has 1.16.2).
# - every package holding modules of this build: qemu-system-common, qemu-system-modules-opengl,
#   qemu-system-modules-spice, qemu-system-gui, qemu-block-extra. QEMU loads a module from the
#   first directory that has the file, falling back to /usr/lib/x86_64-linux-gnu/qemu, where a host
#   QEMU 7.2 keeps its own; loading one of those aborts 10.0.2 (`-device help` does: "Only modules
#   from the same build can be loaded", then an assertion). With all of its own modules present it
#   never falls back. The modules' own libraries are not fetched: a module whose library is
#   missing is reported and skipped when something loads it (`-device help` warns about
#   libvirglrenderer.so.1 on a host without it; only the GL display devices need it).
# - the bookworm libraries of qemu-system-x86 that a Debian 12 host without QEMU lacks (what ldd
#   reports "not found" there), fetched even where a host QEMU 7.2 brought the same versions, so
#   that the wrapper does not depend on it. Any other library the binary lacks is an exit 2.
# ipxe-qemu is not: the VM runners start QEMU with -nic none, and a NIC's option ROM would come from
# the host's /usr/lib/ipxe/qemu (an absolute firmware path built into QEMU) if it has one.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${MEMOFS_VM_CACHE:-${XDG_CACHE_HOME:-${HOME:-/var/tmp}/.cache}/memofs-vm}

qemu=1:10.0.2+ds-2+deb13u1~bpo12+1
packages=(
    qemu-system-x86="$qemu"
    qemu-system-common="$qemu"
    qemu-system-data="$qemu"
    qemu-system-modules-opengl="$qemu"
    qemu-system-modules-spice="$qemu"
    qemu-system-gui="$qemu"
    qemu-block-extra="$qemu"
    seabios=1.16.3-2~bpo12+1
    libaio1=0.3.113-4
    libcapstone4=4.0.2-5
    libdaxctl1=76.1-1
    libfdt1=1.6.1-4+b1
    libibverbs1=44.0-2
    libndctl6=76.1-1
    libnl-3-200=3.7.0-0.2+b1
    libnl-route-3-200=3.7.0-0.2+b1
    libpmem1=1.12.1-2
    librdmacm1=44.0-2
    libslirp0=4.7.0-1
    liburing2=2.3-3
    libvdeplug2=4.0.1-4
)

cannot() {
    echo "qemu.sh: cannot get QEMU 10.0.2: $*" >&2
    exit 2
}

dir=$cache/qemu-10.0.2
root=$dir/root
wrapper=$dir/bin/qemu-system-x86_64
stamp=$dir/.packages
want=$(printf '%s\n' "${packages[@]}" "root=$root")
ready() { [ -x "$wrapper" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; }
if ready; then
    echo "$wrapper"
    exit 0
fi

command -v apt-get >/dev/null || cannot "apt-get is not installed (a Debian host is needed)"
command -v dpkg >/dev/null || cannot "dpkg is not installed"
command -v ldd >/dev/null || cannot "ldd is not installed"
arch=$(dpkg --print-architecture)
[ "$arch" = amd64 ] || cannot "the pinned packages are for amd64, this host is $arch"
mkdir -p "$cache/debs"
# One run at a time unpacks; a run that waited finds the work done.
exec 9>"$cache/.qemu.lock"
flock 9
if ready; then
    echo "$wrapper"
    exit 0
fi

apt=$cache/apt-qemu
# shellcheck source=scripts/vm/apt.sh
. "$here/apt.sh"
private_apt "$apt" "$here/sources-qemu.list"

# The downloaded .deb of PACKAGE=VERSION, if there is one.
downloaded() {
    local pkg=${1%%=*} version=${1#*=} f
    for f in "$cache/debs/${pkg}"_*.deb; do
        [ -e "$f" ] && [ "$(dpkg-deb -f "$f" Version 2>/dev/null)" = "$version" ] && { echo "$f"; return; }
    done
    return 0
}

# The PACKAGE=VERSIONs given that the package lists do not have.
unlisted() {
    local shown spec
    shown=$({ apt-cache "${aptopts[@]}" show "$@" 2>/dev/null || true; } |
        awk '/^Package:/ { p = $2 } /^Version:/ { print p "=" $2 }')
    for spec; do
        grep -qxF -- "$spec" <<<"$shown" || echo "$spec"
    done
}

missing=()
for spec in "${packages[@]}"; do
    [ -n "$(downloaded "$spec")" ] || missing+=("$spec")
done
if [ ${#missing[@]} -gt 0 ]; then
    # The lists are refreshed when a pinned version is not in them (or they are missing).
    if [ -n "$(unlisted "${missing[@]}")" ]; then
        echo "qemu.sh: updating the private package lists in $apt" >&2
        apt-get "${aptopts[@]}" --error-on=any update >&2 || cannot "apt-get update failed (no network?)"
        gone=$(unlisted "${missing[@]}" | tr '\n' ' ')
        [ -z "$gone" ] || cannot "the archive no longer has ${gone% } (pin another version in scripts/vm/qemu.sh)"
    fi
    (cd "$cache/debs" && apt-get "${aptopts[@]}" download "${missing[@]}" >&2) ||
        cannot "apt-get download failed (no network?)"
fi

rm -rf "$dir"
mkdir -p "$root" "$dir/bin"
for spec in "${packages[@]}"; do
    deb=$(downloaded "$spec")
    [ -n "$deb" ] || cannot "no ${spec%%=*} of version ${spec#*=} in $cache/debs after the download"
    dpkg -x "$deb" "$root" || cannot "dpkg -x $deb failed"
done

{
    echo '#!/usr/bin/env bash'
    echo '# QEMU 10.0.2 from Debian bookworm-backports, unpacked (not installed) by scripts/vm/qemu.sh.'
    echo "root=$(printf %q "$root")"
    echo 'export LD_LIBRARY_PATH="$root/lib/x86_64-linux-gnu:$root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"'
    echo 'export QEMU_MODULE_DIR="$root/usr/lib/x86_64-linux-gnu/qemu"'
    echo 'exec "$root/usr/bin/qemu-system-x86_64" -L "$root/usr/share/qemu" -L "$root/usr/share/seabios" "$@"'
} >"$wrapper"
chmod +x "$wrapper"

lacking=$(LD_LIBRARY_PATH="$root/lib/x86_64-linux-gnu:$root/usr/lib/x86_64-linux-gnu" \
    ldd "$root/usr/bin/qemu-system-x86_64" | awk '/not found/ { print $1 }' | sort -u | tr '\n' ' ')
[ -z "$lacking" ] ||
    cannot "the host lacks ${lacking% } (install them, or pin their bookworm packages in scripts/vm/qemu.sh)"
version=$("$wrapper" --version 2>&1 | head -n1) || true
case $version in
    *"version 10.0.2 "*) ;;
    *) cannot "the unpacked QEMU does not run: $version" ;;
esac

echo "$want" >"$stamp"
echo "$wrapper"
