#!/usr/bin/env bash
# run.sh KERNEL-ID...: boots each pinned Debian kernel (scripts/vm/kernels.tsv) in a QEMU guest
# under TCG (1 vCPU, 1 GiB, no network) with a busybox initramfs holding memofs, the e2e test
# binaries and their libraries, runs the plan (scripts/vm/plan.txt) as root there, and reports
# PASS/FAIL/SKIP per test (scripts/vm/report.awk). Exit 0 when nothing failed.
#
# A guest that cannot be run here (no QEMU, the kernel cannot be downloaded) is reported as
# skipped, unless MEMOFS_VM_REQUIRED=1 (CI sets it), which makes that a failure.
# Environment: MEMOFS_VM_CACHE (downloads; default ~/.cache/memofs-vm), MEMOFS_VM_TIMEOUT
# (seconds per guest, default 600; the whole plan takes about 45 s), MEMOFS_VM_BINARY_TIMEOUT
# (per test binary in the guest, default 300), MEMOFS_VM_PLAN (a plan file instead of
# plan.txt, such as steps.txt), CARGO. A plan line `tool NAME` copies the host's program NAME
# (with its libraries) into the guest's /usr/bin; where the host has none, the guest goes
# without it.
# Does not take the build lock: callers do (`flock /tmp/memofs-build.lock make vm-test ...`).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
label=vm
# shellcheck source=scripts/vm/common.sh
. "$here/common.sh"
[ $# -gt 0 ] || { echo "usage: scripts/vm/run.sh KERNEL-ID... (ids in scripts/vm/kernels.tsv)" >&2; exit 1; }
per_binary=${MEMOFS_VM_BINARY_TIMEOUT:-300}
plan=${MEMOFS_VM_PLAN:-$here/plan.txt}
work=$top/target/vm

# The binaries the plan names, built: "NAME PATH" lines.
build() {
    echo "vm: building memofs and the e2e test binaries" >&2
    "$CARGO" build -q -p memofs >&2
    "$CARGO" test -q -p memofs-e2e --no-run --message-format=json 2>/dev/null |
        python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    kinds = m["target"]["kind"]
    # Integration tests, and real binaries (not the unit-test harness built of a binary).
    if "test" in kinds or ("bin" in kinds and not m["profile"]["test"]):
        print(m["target"]["name"], m["executable"])
'
}

# Builds the initramfs for kernel directory `kdir` in `out`; prints its path.
initramfs() {
    local kdir=$1 out=$2 root=$2/root
    rm -rf "$root"
    mkdir -p "$root"/{bin,vm/bin,lib/modules,etc,proc,sys,dev,tmp}
    cp "$(command -v busybox)" "$root/bin/busybox"
    cp "$here/init.sh" "$root/init"
    chmod 755 "$root/init"
    echo "$per_binary" >"$root/vm/per-binary-limit"
    printf 'root:x:0:0:root:/:/bin/sh\n' >"$root/etc/passwd"
    printf 'root:x:0:\n' >"$root/etc/group"
    install_binary "$root" "$top/target/debug/memofs" bin/memofs
    grep -v '^#' "$plan" | awk 'NF && $1 != "tool"' >"$root/vm/plan"
    awk '{ print $1, $2 }' "$root/vm/plan" >"$out/planned"
    local mode name path tool
    for tool in $(awk '$1 == "tool" { print $2 }' "$plan"); do
        path=$(command -v "$tool") || { echo "vm: no $tool on the host; the guest goes without it" >&2; continue; }
        install_binary "$root" "$path" "usr/bin/$tool"
    done
    while read -r mode name; do
        path=$(awk -v n="$name" '$1 == n { print $2; exit }' "$out/binaries")
        [ -n "$path" ] || { echo "vm: the plan names $name, which cargo did not build" >&2; return 1; }
        [ -e "$root/vm/bin/$name" ] || install_binary "$root" "$path" "vm/bin/$name"
    done <"$out/planned"
    # The fuse module, where this kernel has FUSE as a module (6.1).
    local ko
    ko=$(find "$kdir" -name 'fuse.ko*' | head -n1)
    case "$ko" in
        "") ;;
        *.xz) xz -dc "$ko" >"$root/lib/modules/fuse.ko" ;;
        *.zst) zstd -qdc "$ko" >"$root/lib/modules/fuse.ko" ;;
        *) cp "$ko" "$root/lib/modules/fuse.ko" ;;
    esac
    (cd "$root" && find . | cpio -o -H newc --quiet) >"$out/initrd.cpio"
    echo "$out/initrd.cpio"
}

# Boots kernel `id` once with `initrd`, its serial ports logged in `out`; returns 0 unless the
# guest kernel panicked.
boot() {
    local id=$1 initrd=$2 out=$3 start status
    : >"$out/console.log"
    : >"$out/output.log"
    echo "vm $id: booting $(basename "$kernel") (QEMU TCG; time limit ${limit}s; log in $out)" >&2
    start=$(date +%s)
    status=0
    timeout -k 10 "$limit" qemu-system-x86_64 -accel tcg -cpu max -smp 1 -m 1G \
        -nodefaults -no-reboot -display none -nic none \
        -kernel "$kernel" -initrd "$initrd" \
        -append "console=ttyS0 panic=-1 oops=panic loglevel=4" \
        -serial "file:$out/console.log" -serial "file:$out/output.log" \
        >"$out/qemu.log" 2>&1 </dev/null || status=$?
    echo "vm $id: guest ran $(($(date +%s) - start))s$([ "$status" = 124 ] && echo ", stopped at the time limit")" >&2
    if grep -q 'Kernel panic' "$out/console.log"; then
        echo "vm $id: the guest kernel panicked; its console:" >&2
        tail -n 40 "$out/console.log" >&2
        return 1
    fi
}

# Boots kernel `id` and reports; returns non-zero if a test failed. A guest kernel that
# panics is booted once more, and what that second boot runs is what counts: under TCG a
# guest kernel has died of a double fault in its own workqueue code, which no request
# reaches. The first panic stays in the output; a second one fails the tests it stopped.
run_one() {
    local id=$1 kdir kernel out initrd
    find_kernel "$id" || return $(($? == 2 ? 0 : 1))
    out=$work/$id
    mkdir -p "$out"
    cp "$work/binaries" "$out/binaries"
    initrd=$(initramfs "$kdir" "$out")
    if ! boot "$id" "$initrd" "$out"; then
        mv "$out/console.log" "$out/console-panicked.log"
        echo "vm $id: booting once more after the panic (first console: $out/console-panicked.log)" >&2
        boot "$id" "$initrd" "$out" || true
    fi
    awk -v kernel="$id" -v planned="$out/planned" -f "$here/report.awk" "$out/output.log"
}

mkdir -p "$work"
if command -v qemu-system-x86_64 >/dev/null; then
    build >"$work/binaries"
fi
failed=0
for id in "$@"; do
    run_one "$id" || failed=1
done
exit $failed
