#!/usr/bin/env bash
# virtiofs-seed.sh [KERNEL-ID] [ROUNDS]: seed 001's experiment in its own setting. A guest
# (QEMU TCG, one vCPU, kernel KERNEL-ID of scripts/vm/kernels.tsv, default 7.3) mounts one
# virtio-fs device, drops its caches, and runs 10 000 lookups of a missing path in its shell
# (`[ -e ]`, one stat(2) each, no process) and 1 000 `stat` processes on it (the seed's loop,
# shortened: under TCG a process costs milliseconds). Servers, interleaved round by round:
#   memofs       memofs virtiofsd (mem backend)
#   memofs-pt    memofs virtiofsd --shared-dir DIR --cache=always
#   virtiofsd    virtiofsd --shared-dir DIR --cache=always (VIRTIOFSD, default on PATH;
#                `cargo install virtiofsd` builds it, with libseccomp-dev libcap-ng-dev)
# Guest times come from /proc/uptime (10 ms steps); memofs's LOOKUP counts from `memofs
# stats` on its socket (virtiofsd has none). Writes bench/reports/virtiofs/report.md
# (OUT=DIR elsewhere). Run nothing else meanwhile.
set -euo pipefail
here=$(cd "$(dirname "$0")/../scripts/vm" && pwd)
label=bench-virtiofs
# shellcheck source=scripts/vm/common.sh
. "$here/common.sh"
id=${1:-7.3}
rounds=${2:-3}
out=${OUT:-$top/bench/reports/virtiofs}
virtiofsd=${VIRTIOFSD:-$(command -v virtiofsd || true)}
memofs=$top/target/release/memofs
work=$top/target/bench-virtiofs
"$CARGO" build -q --release -p memofs
find_kernel "$id" || exit 1
rm -rf "$work"
mkdir -p "$work/root"/{bin,dev,proc,sys,mnt} "$work/share" "$out"
cp "$(command -v busybox)" "$work/root/bin/busybox"
cat >"$work/root/init" <<'GUEST'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
exec >/dev/ttyS1 2>&1
up() { cut -d' ' -f1 /proc/uptime; }
mount -t virtiofs fs /mnt || { echo "@@ MOUNT FAILED"; poweroff -f; }
sync
echo 3 >/proc/sys/vm/drop_caches
t0=$(up)
i=0
while [ $i -lt 10000 ]; do [ -e /mnt/missing ]; i=$((i + 1)); done
t1=$(up)
i=0
while [ $i -lt 1000 ]; do stat /mnt/missing >/dev/null 2>&1; i=$((i + 1)); done
t2=$(up)
echo "@@ RESULT $t0 $t1 $t2"
umount /mnt
poweroff -f
GUEST
chmod 755 "$work/root/init"
(cd "$work/root" && find . | cpio -o -H newc --quiet) >"$work/initrd.cpio"

# One boot against server NAME; prints "NAME SHELL_S STAT_S LOOKUPS".
one() {
    local name=$1 sock=$work/$1.sock server qemu lookups=-
    rm -f "$sock"
    case $name in
        memofs) "$memofs" virtiofsd --socket-path "$sock" >"$work/$name.log" 2>&1 & ;;
        memofs-pt) "$memofs" virtiofsd --socket-path "$sock" --shared-dir "$work/share" \
            --cache=always >"$work/$name.log" 2>&1 & ;;
        virtiofsd) "$virtiofsd" --socket-path "$sock" --shared-dir "$work/share" \
            --cache=always >"$work/$name.log" 2>&1 & ;;
    esac
    server=$!
    local i=0
    while [ ! -S "$sock" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    : >"$work/output.log"
    timeout -k 10 "$limit" qemu-system-x86_64 -accel tcg -cpu max -smp 1 -m 1G \
        -nodefaults -no-reboot -display none -nic none \
        -object memory-backend-memfd,id=mem,size=1G,share=on -numa node,memdev=mem \
        -chardev socket,id=c0,path="$sock" \
        -device vhost-user-fs-pci,queue-size=1024,chardev=c0,tag=fs \
        -kernel "$kernel" -initrd "$work/initrd.cpio" -append "console=ttyS0 panic=-1 loglevel=4" \
        -serial "file:$work/console.log" -serial "file:$work/output.log" >"$work/qemu.log" 2>&1 </dev/null &
    qemu=$!
    # memofs's LOOKUPs, read while the guest is still up (its server ends with the VM).
    while ! grep -q '^@@ RESULT' <(tr -d '\r' <"$work/output.log") && kill -0 $qemu 2>/dev/null; do
        case $name in memofs*)
            lookups=$("$memofs" stats --json "$sock" 2>/dev/null |
                python3 -c 'import json,sys; print(json.load(sys.stdin)["requests"].get("LOOKUP",{}).get("count",0))' 2>/dev/null ||
                echo "$lookups") ;;
        esac
        sleep 0.2
    done
    wait $qemu || true
    # The server ends with the VMM; one QEMU never reached stays in accept.
    timeout 30 tail --pid="$server" -f /dev/null || kill -KILL "$server" 2>/dev/null || true
    if ! tr -d '\r' <"$work/output.log" | grep -q '^@@ RESULT'; then
        echo "virtiofs-seed: $name: no result ($(tr -d '\r' <"$work/output.log" | head -n3 | tr '\n' ' ')); see $work" >&2
        echo "$name" >>"$work/failed"
        return
    fi
    tr -d '\r' <"$work/output.log" | awk -v n="$name" -v l="$lookups" \
        '$1 == "@@" && $2 == "RESULT" { printf "%s %.2f %.2f %s\n", n, $4 - $3, $5 - $4, l }'
}

servers="memofs memofs-pt"
[ -x "$virtiofsd" ] && servers="$servers virtiofsd" || echo "virtiofs-seed: no virtiofsd: memofs only" >&2
: >"$work/results"
: >"$work/failed"
for r in $(seq "$rounds"); do
    for s in $servers; do
        echo "virtiofs-seed: round $r, $s" >&2
        one "$s" | tee -a "$work/results" >&2
    done
done
{
    echo "# virtio-fs: seed 001's loop in a guest"
    echo
    echo '```'
    echo "time: $(date -Iseconds)"
    echo "host: $(uname -r), $(awk -F: '/model name/ { print $2; exit }' /proc/cpuinfo | sed 's/^ *//'), $(nproc) CPUs, cpuidle driver $(cat /sys/devices/system/cpu/cpuidle/current_driver 2>/dev/null || echo none)"
    echo "guest: kernel $id ($(basename "$kernel")), QEMU TCG, 1 vCPU, 1 GiB, vhost-user-fs-pci queue-size=1024"
    echo "memofs: $("$memofs" --version) ($(git -C "$top" rev-parse --short HEAD))"
    [ -x "$virtiofsd" ] && echo "virtiofsd: $("$virtiofsd" --version 2>&1 | head -n1)"
    echo "command: bench/virtiofs-seed.sh $id $rounds"
    echo '```'
    echo
    echo "Each round boots the guest once per server, in turn. Seconds of guest time (10 ms steps)"
    echo "for 10 000 lookups of a missing name in the shell and for 1 000 \`stat\` processes, after"
    echo "\`drop_caches\`; LOOKUPs that reached memofs during the whole boot (mount included)."
    echo
    echo "| server | round | 10 000 lookups, s | 1 000 stat processes, s | LOOKUPs |"
    echo "|---|---|---|---|---|"
    awk '{ n[$1]++; printf "| %s | %d | %s | %s | %s |\n", $1, n[$1], $2, $3, $4 }' "$work/results"
    echo
    echo "Median over the rounds:"
    echo
    echo "| server | 10 000 lookups, s | 1 000 stat processes, s |"
    echo "|---|---|---|"
    median() { awk -v s="$1" -v f="$2" '$1 == s { print $f }' "$work/results" | sort -n |
        awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
    for s in $servers; do
        echo "| $s | $(median "$s" 2) | $(median "$s" 3) |"
    done
} >"$out/report.md"
echo "virtiofs-seed: $out/report.md" >&2
if [ -s "$work/failed" ]; then
    echo "virtiofs-seed: FAILED: no result from $(sort "$work/failed" | uniq -c | tr -s ' \n' ' ')" >&2
    exit 1
fi
