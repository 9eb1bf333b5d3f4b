#!/bin/busybox sh
# /init of the VM runner's guest (PID 1 in a busybox initramfs): runs the plan in /vm/plan
# as root and writes everything to the second serial port, which the host parses
# (scripts/vm/report.awk). Kernel messages stay on the first. Powers off when done.
/bin/busybox mkdir -p /proc /sys /dev /tmp /run /usr/bin /sbin
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs tmpfs /run
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
ln -s /proc/self/mounts /etc/mtab 2>/dev/null

out=/dev/ttyS1
exec >"$out" 2>&1

for m in /lib/modules/*.ko; do
    [ -e "$m" ] && insmod "$m"
done

per_binary=$(cat /vm/per-binary-limit)
echo "@@ BEGIN $(uname -r)"
for feature in /sys/module/fuse/parameters/*; do
    [ -e "$feature" ] && echo "@@ PARAM $(basename "$feature")=$(cat "$feature")"
done
[ -e /dev/fuse ] || echo "@@ NOTE no /dev/fuse in this kernel"

export MEMOFS_BIN=/bin/memofs PATH=/bin:/usr/bin:/sbin RUST_BACKTRACE=0
grep -v '^#' /vm/plan | while read -r mode bin filters; do
    [ -n "$mode" ] || continue
    echo "@@ RUN $mode $bin"
    case "$mode" in
        off) opts=passthrough=off ;;
        *) opts= ;;
    esac
    if [ "$mode" = probe ]; then
        # shellcheck disable=SC2086
        timeout "$per_binary" "/vm/bin/$bin" $filters </dev/null
    else
        # shellcheck disable=SC2086
        MEMOFS_E2E_OPTS=$opts timeout "$per_binary" "/vm/bin/$bin" --test-threads=1 --nocapture $filters </dev/null
    fi
    echo "@@ EXIT $mode $bin $?"
    if grep -q ' fuse' /proc/mounts; then
        echo "@@ NOTE FUSE mounts left after $bin:"
        grep ' fuse' /proc/mounts
    fi
done
echo "@@ END"
sync
poweroff -f
