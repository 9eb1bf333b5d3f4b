#!/usr/bin/env bash
# fresh-quickstart.sh [--test] [DIR]: times the README's quick start on a fresh Debian 12,
# and with --test then runs the README's test command there too (`make test`, guests
# included, as CI runs it), timed.
#
# Builds a minimal Debian 12 (debootstrap --variant=minbase: no make, no C compiler, no
# fuse3) in DIR (default /tmp/memofs-fresh), gives it this host's Rust toolchain (the README
# assumes Rust from rustup), its CA certificates and apt settings (proxies, mirrors), and a
# clone of this checkout's HEAD; then runs scripts/quickstart.sh in it with chroot and times it
# from start to a live mount at /tmp/memofs, writes and reads a file there, and unmounts.
# Needs root, debootstrap (installed if missing), /dev/fuse and the network (apt, crates.io).
# MIRROR= picks the Debian mirror. The chroot shares this host's kernel and CPUs.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
run_tests=0
if [ "${1:-}" = --test ]; then
    run_tests=1
    shift
fi
F=${1:-/tmp/memofs-fresh}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
[ "$(id -u)" = 0 ] || { echo "fresh-quickstart: run as root (debootstrap, chroot)" >&2; exit 2; }
[ -e /dev/fuse ] || { echo "fresh-quickstart: /dev/fuse is missing (modprobe fuse)" >&2; exit 2; }
command -v rustup >/dev/null || { echo "fresh-quickstart: needs Rust from rustup (as the README assumes)" >&2; exit 2; }
toolchain=$(rustc --print sysroot)

unmount_all() {
    # Whatever is mounted inside the fresh system (the bind mounts, and a test's mount left
    # by a failed run), deepest first.
    awk -v f="$F/" 'index($2, f) == 1 { print $2 }' /proc/mounts | sort -r |
        while read -r m; do umount -l "$m" 2>/dev/null || true; done
}
trap unmount_all EXIT
unmount_all
rm -rf "$F"

command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap >/dev/null
echo "fresh-quickstart: debootstrap minbase bookworm into $F"
debootstrap --variant=minbase bookworm "$F" "$MIRROR" >"$F.debootstrap.log" 2>&1 ||
    { tail -5 "$F.debootstrap.log" >&2; exit 1; }

mkdir -p "$F/root/.cargo/bin" "$F/root/.rustup/toolchains" "$F/etc/ssl/certs"
cp -a "$toolchain" "$F/root/.rustup/toolchains/"
printf 'version = "12"\ndefault_toolchain = "%s"\n' "$(basename "$toolchain")" >"$F/root/.rustup/settings.toml"
cp -a "$(command -v rustup)" "$F/root/.cargo/bin/"
# rustup's proxies, as its default profile installs them (the lint step runs fmt and clippy).
for tool in cargo rustc rustdoc rustfmt cargo-fmt cargo-clippy clippy-driver; do
    ln -sf rustup "$F/root/.cargo/bin/$tool"
done
cp /etc/ssl/certs/ca-certificates.crt "$F/etc/ssl/certs/"
# ... kept as a local certificate too, so that the bundle apt rebuilds when it installs
# ca-certificates still trusts what this host trusts (a proxy's own certificate authority).
mkdir -p "$F/usr/local/share/ca-certificates"
cp /etc/ssl/certs/ca-certificates.crt "$F/usr/local/share/ca-certificates/host.crt"
cp /etc/apt/apt.conf.d/* "$F/etc/apt/apt.conf.d/" 2>/dev/null || true
cp /etc/resolv.conf "$F/etc/"
git clone -q "$repo" "$F/root/memofs"
for d in proc sys dev; do mount --rbind "/$d" "$F/$d" && mount --make-rslave "$F/$d"; done

echo "fresh-quickstart: scripts/quickstart.sh (log: $F.quickstart.log)"
start=$(date +%s%N)
chroot "$F" /usr/bin/env -i HOME=/root PATH=/root/.cargo/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    bash -c 'cd /root/memofs && scripts/quickstart.sh' >"$F.quickstart.log" 2>&1 ||
    { tail -20 "$F.quickstart.log" >&2; echo "fresh-quickstart: the quick start failed" >&2; exit 1; }
end=$(date +%s%N)
grep -q " $F/tmp/memofs fuse.memofs " /proc/mounts || { echo "fresh-quickstart: nothing is mounted" >&2; exit 1; }
echo memofs >"$F/tmp/memofs/probe"
[ "$(cat "$F/tmp/memofs/probe")" = memofs ] || { echo "fresh-quickstart: the mount does not read back" >&2; exit 1; }
chroot "$F" /usr/local/bin/memofs umount /tmp/memofs
build=$(sed -n 's/.*Finished `release` profile.* in \(.*\)$/\1/p' "$F.quickstart.log")
echo "fresh-quickstart: mounted and checked in $(((end - start) / 1000000)) ms (cargo build: $build)"
((run_tests)) || exit 0

echo "fresh-quickstart: make test (log: $F.test.log)"
start=$(date +%s)
status=0
# Not chroot: a chrooted process may not make user namespaces (the rootless tests do), and
# a chroot's / is no mount point. The fresh system gets a mount namespace of its own whose
# root it is, as a container's.
unshare --mount --propagation private -- /bin/sh -c '
    mount --rbind "$0" "$0" && cd "$0" && mkdir -p .host && pivot_root . .host && cd / &&
        umount -l /.host && rmdir /.host || exit 1
    exec /usr/bin/env -i HOME=/root PATH=/root/.cargo/bin:/usr/sbin:/usr/bin:/sbin:/bin CI=true \
        bash -c "cd /root/memofs && exec </dev/null && make test"' "$F" >"$F.test.log" 2>&1 || status=$?
end=$(date +%s)
grep -E '^(e2e|unit|conformance|vm|virtiofs|no-leftovers|setup)[^ ]*:|passed|failed|skipped' "$F.test.log" |
    grep -vE '^test |^\s' | tail -25
echo "fresh-quickstart: make test exited $status after $((end - start)) s"
exit "$status"
