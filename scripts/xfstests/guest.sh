#!/usr/bin/env bash
# guest.sh KERNEL-ID CONFIG [CHECK ARGS...]: runs xfstests (built by build.sh) inside a QEMU
# guest (TCG) of a pinned kernel (scripts/vm/kernels.tsv) with FSTYP=virtiofs, on a test and a
# scratch device served over vhost-user-fs; CHECK ARGS go to ./check (default `-g quick`).
# CONFIG is one of
#   mem         `memofs virtiofsd` with the mem backend (two servers, -o size=4g)
#   export      `memofs virtiofsd --shared-dir` of two directories of a fresh tmpfs
#   virtiofsd   virtiofsd (the reference; --xattr) over the same, where it is installed
# The guest's userland is the host's own root, shared read-only by a third `memofs
# virtiofsd` (the suite needs bash, xfs_io, GNU awk and the rest of its README's list, and
# the build of build.sh), with the guest's own proc, sys, dev and tmpfs over it; a fourth
# share holds a copy of the suite's tree (it writes there) and takes the results. Environment: MEMOFS_BIN (default target/release/memofs),
# XFSTESTS_DIR (default target/xfstests/src), RESULTS (default
# target/xfstests/results/guest-CONFIG), EXCLUDE (default scripts/xfstests/exclude),
# MEMOFS_VM_CACHE and MEMOFS_VM_REQUIRED (as scripts/vm/run.sh), XFSTESTS_GUEST_TIMEOUT
# (seconds for the whole run, default 7200). Results as run.sh's: check's files and
# RESULTS/summary. It touches only what it made: its processes (by the ids it started),
# a temporary directory and the tmpfs mounted there.
set -euo pipefail
here=$(cd "$(dirname "$0")/../vm" && pwd)
label=xfstests-guest
# shellcheck source=scripts/vm/common.sh
. "$here/common.sh"
[ $# -ge 2 ] || { echo "usage: scripts/xfstests/guest.sh KERNEL-ID mem|export|virtiofsd [check args...]" >&2; exit 2; }
id=$1 config=$2
shift 2
[ $# -gt 0 ] || set -- -g quick
bin=$(realpath "${MEMOFS_BIN:-target/release/memofs}")
src=$(realpath "${XFSTESTS_DIR:-$top/target/xfstests/src}")
results=$(realpath -m "${RESULTS:-target/xfstests/results/guest-$config}")
exclude=$(realpath "${EXCLUDE:-scripts/xfstests/exclude}")
timeout=${XFSTESTS_GUEST_TIMEOUT:-7200}
[ -x "$src/check" ] || { echo "xfstests is not built: run scripts/xfstests/build.sh" >&2; exit 2; }
virtiofsd=$(command -v virtiofsd || true)
case "$config" in
mem | export) ;;
virtiofsd) [ -n "$virtiofsd" ] || { cannot "$id" "virtiofsd is not installed"; exit $?; } ;;
*) echo "unknown configuration '$config' (mem, export or virtiofsd)" >&2; exit 2 ;;
esac
find_kernel "$id" || exit $(($? == 2 ? 0 : 1))

out=$(mktemp -d /tmp/memofs-xfstests-guest.XXXXXX)
pids=()
cleanup() {
    set +e
    [ ${#pids[@]} -eq 0 ] || kill -KILL "${pids[@]}" 2>/dev/null
    wait 2>/dev/null
    while mountpoint -q "$out/host" 2>/dev/null; do umount "$out/host" 2>/dev/null || umount -l "$out/host"; done
    rm -rf "$out"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$out/root/bin" "$out/share" "$results"
chmod 755 "$out"

# The servers: each listens before the guest starts.
serve() { # NAME COMMAND...
    local name=$1
    shift
    "$@" --socket-path "$out/$name.sock" >"$out/$name.log" 2>&1 &
    pids+=($!)
}
# The namespace sandbox cannot pivot into the root it runs in: this share of the whole root
# (test infrastructure, read-only) goes without it.
serve hostroot "$bin" virtiofsd --shared-dir / --readonly --cache=always --sandbox none
serve out "$bin" virtiofsd --shared-dir "$out/share"
case "$config" in
mem)
    serve test "$bin" virtiofsd -o size=4g
    serve scratch "$bin" virtiofsd -o size=4g
    ;;
export | virtiofsd)
    mkdir -p "$out/host"
    mount -t tmpfs -o size=4g memofs-xfstests-guest "$out/host"
    mkdir "$out/host/test" "$out/host/scratch"
    for d in test scratch; do
        if [ "$config" = export ]; then
            serve $d "$bin" virtiofsd --shared-dir "$out/host/$d"
        else
            serve $d "$virtiofsd" --xattr --shared-dir "$out/host/$d"
        fi
    done
    ;;
esac
for name in hostroot out test scratch; do
    i=0
    while [ ! -S "$out/$name.sock" ]; do
        [ $i -lt 100 ] || { echo "xfstests-guest: the $name server did not listen: $(cat "$out/$name.log")" >&2; exit 1; }
        sleep 0.1
        i=$((i + 1))
    done
done

cat >"$out/share/local.config" <<CFG
export FSTYP=virtiofs
export TEST_DEV=test
export TEST_DIR=/mnt/test
export SCRATCH_DEV=scratch
export SCRATCH_MNT=/mnt/scratch
export RESULT_BASE=/mnt/out/results
CFG
# The suite writes into its own tree (a test's output file may be a link it makes): a copy
# on the results share.
cp -a "$src" "$out/share/xfstests"
echo /mnt/out/xfstests >"$out/share/xfstests-dir"
echo "-E $exclude $*" >"$out/share/check-args"
cp "$(command -v busybox)" "$out/root/bin/busybox"
install -m 755 "$top/scripts/xfstests/guest-init.sh" "$out/root/init"
(cd "$out/root" && find . | cpio -o -H newc --quiet) >"$out/initrd.cpio"
: >"$out/output.log"

echo "xfstests-guest: $config on $id: ./check $* (QEMU TCG; results in $results)"
devices=()
n=0
for name in hostroot out test scratch; do
    devices+=(-chardev "socket,id=c$n,path=$out/$name.sock"
        -device "vhost-user-fs-pci,queue-size=1024,chardev=c$n,tag=$name")
    n=$((n + 1))
done
timeout -k 10 "$timeout" qemu-system-x86_64 -accel tcg -cpu max -smp 2 -m 2G \
    -nodefaults -no-reboot -display none -nic none \
    -object memory-backend-memfd,id=mem,size=2G,share=on -numa node,memdev=mem \
    "${devices[@]}" \
    -kernel "$kernel" -initrd "$out/initrd.cpio" \
    -append "console=ttyS0 panic=-1 loglevel=4" \
    -serial "file:$out/console.log" -serial "file:$out/output.log" \
    >"$out/qemu.log" 2>&1 </dev/null &
qemu=$!
pids+=("$qemu")
rc=0
wait "$qemu" || rc=$?
tr -d '\r' <"$out/output.log" >"$results/guest.log"
cp "$out/console.log" "$results/console.log"
end=$(grep -a '^@@ END' "$results/guest.log" | tail -n1 || true)
[ -z "$(ls -A "$out/share/results" 2>/dev/null)" ] || cp -r "$out/share/results/." "$results/"
if [ -z "$end" ]; then
    echo "xfstests-guest: the guest did not finish (QEMU exit $rc; $results/guest.log, console.log)" >&2
    exit 1
fi
python3 "$top/scripts/xfstests/summary.py" "$results" "guest-$config" >"$results/summary" || true
grep -v '^  notrun' "$results/summary" || true
[ "$end" = "@@ END 0" ]
