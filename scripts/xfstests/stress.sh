#!/usr/bin/env bash
# stress.sh: xfstests' fsstress (4 processes) and fsx (with mapped reads and writes), built
# by build.sh from the same pinned source, on memofs's mem backend (file data in the kernel,
# then the page store) and on an export; any failed operation or data mismatch fails the
# run. Environment: MEMOFS_BIN (default target/release/memofs), XFSTESTS_DIR (default
# target/xfstests/src), FSSTRESS_OPS (per process, default 5000), FSX_OPS (default 50000),
# SEED (default 1).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/xfstests/tools.sh stress
ops=${FSSTRESS_OPS:-5000}
fsx_ops=${FSX_OPS:-50000}

work=$(mktemp -d /tmp/memofs-stress.XXXXXX)
mnt=$work/mnt
cleanup() {
    set +e
    mountpoint -q "$mnt" && "$bin" umount "$mnt"
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$mnt" "$work/export"

failed=0
run() {
    local name=$1
    shift
    "$bin" mount "$@" "$mnt"
    local log=$work/$name.log
    if ! "$fsstress" -d "$mnt/fsstress" -p 4 -n "$ops" -s "$seed" >"$log" 2>&1; then
        echo "stress: $name: fsstress failed (last lines of its output:)" >&2
        tail -20 "$log" >&2
        failed=1
    fi
    rm -rf "${mnt:?}/fsstress"
    # -q: quiet; fsx checks every read against its own copy of the file and fails on the
    # first difference, with the operations that led there.
    if ! "$fsx" -q -N "$fsx_ops" -S "$seed" "$mnt/fsx" >"$log" 2>&1; then
        echo "stress: $name: fsx failed (last lines of its output:)" >&2
        tail -30 "$log" >&2
        failed=1
    fi
    "$bin" umount "$mnt"
    [ $failed = 1 ] || echo "stress: $name: fsstress ($ops ops x 4) and fsx ($fsx_ops ops) passed"
}
run mem -o size=2g
run pages -o size=2g,passthrough=off
run export "$work/export"
exit $failed
