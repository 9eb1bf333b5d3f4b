#!/usr/bin/env bash
# upgrade-stress.sh: xfstests' fsx (mapped reads and writes, FSX_OPS operations) and fsstress
# (4 processes) run on a mem mount while `memofs upgrade` hands it to a new server process
# UPGRADES times, for each data mode (kernel-backed, page store). Fails on any failed upgrade,
# any fsx or fsstress failure (fsx checks every read against its own model of the file), or a
# final fsstress tree that differs from the one the same seed leaves on a kernel tmpfs (names,
# types, sizes, modes and every file's content). Prints each mode's pauses (median, max) as
# `memofs upgrade` measured them.
# Environment: MEMOFS_BIN (default target/release/memofs), XFSTESTS_DIR (default
# target/xfstests/src), FSX_OPS (default 100000), FSSTRESS_OPS (per process, default 3000),
# UPGRADES (default 20), SEED (default 1).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/xfstests/tools.sh upgrade-stress
fsx_ops=${FSX_OPS:-100000}
ops=${FSSTRESS_OPS:-3000}
upgrades=${UPGRADES:-20}

work=$(mktemp -d /tmp/memofs-upgrade-stress.XXXXXX)
mnt=$work/mnt
ref=$work/ref
pids=()
cleanup() {
    set +e
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    # Also a mount whose server died (mountpoint(1) cannot tell it: ENOTCONN).
    grep -q " $mnt " /proc/self/mountinfo && "$bin" umount "$mnt"
    mountpoint -q "$ref" && umount "$ref"
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$mnt" "$ref"

# What a tree holds, content included, in a stable order.
tree() {
    (cd "$1" && find . -printf '%p %y %s %m\n' | LC_ALL=C sort &&
        find . -type f -print0 | LC_ALL=C sort -z | xargs -0r md5sum)
}

# The reference: the same fsstress run on a kernel tmpfs.
mount -t tmpfs -o size=2g tmpfs "$ref"
"$fsstress" -d "$ref/fsstress" -p 4 -n "$ops" -s "$seed" >/dev/null 2>&1
tree "$ref" >"$work/ref.tree"
umount "$ref"

failed=0
run() {
    local name=$1
    shift
    "$bin" mount "$@" "$mnt"
    "$fsx" -q -N "$fsx_ops" -S "$seed" "$mnt/fsx" >"$work/$name.fsx.log" 2>&1 &
    local fsx_pid=$!
    "$fsstress" -d "$mnt/fsstress" -p 4 -n "$ops" -s "$seed" >"$work/$name.fsstress.log" 2>&1 &
    local stress_pid=$!
    pids=("$fsx_pid" "$stress_pid")
    local n=0 pauses=()
    # The upgrades are spread over the run: one each time both programs have made progress
    # (fsx's log and fsstress's tree are not watched: a short pause between upgrades lets
    # each run some thousands of operations against each new server).
    while ((n < upgrades)); do
        if ! out=$("$bin" upgrade "$mnt" 2>&1); then
            echo "upgrade-stress: $name: upgrade $((n + 1)) failed: $out" >&2
            failed=1
            break
        fi
        pauses+=("$(sed -n 's/.*requests waited \([0-9.]*\) ms.*/\1/p' <<<"$out")")
        n=$((n + 1))
        sleep 0.2
    done
    if ! wait "$fsx_pid"; then
        echo "upgrade-stress: $name: fsx failed (last lines of its output:)" >&2
        tail -30 "$work/$name.fsx.log" >&2
        failed=1
    fi
    if ! wait "$stress_pid"; then
        echo "upgrade-stress: $name: fsstress failed (last lines of its output:)" >&2
        tail -20 "$work/$name.fsstress.log" >&2
        failed=1
    fi
    pids=()
    rm -f "$mnt/fsx" "$mnt"/fsx.*
    tree "$mnt" >"$work/$name.tree"
    if ! diff -q "$work/ref.tree" "$work/$name.tree" >/dev/null; then
        echo "upgrade-stress: $name: the fsstress tree differs from tmpfs's:" >&2
        diff "$work/ref.tree" "$work/$name.tree" | head -20 >&2
        failed=1
    fi
    "$bin" umount "$mnt"
    local sorted
    sorted=$(printf '%s\n' "${pauses[@]}" | sort -g)
    echo "upgrade-stress: $name: $n upgrades under fsx ($fsx_ops ops) and fsstress (4 x $ops ops); pause median $(sed -n "$(((n + 1) / 2))p" <<<"$sorted") ms, max $(tail -1 <<<"$sorted") ms"
}
run mem -o size=2g
run pages -o size=2g,passthrough=off
exit $failed
