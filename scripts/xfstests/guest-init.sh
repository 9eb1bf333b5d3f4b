#!/bin/busybox sh
# /init of the xfstests guest (scripts/xfstests/guest.sh): the host's own root, shared
# read-only over virtio-fs (`hostroot`), is the userland xfstests runs in (bash, xfs_io, GNU
# awk, the suite's build); the guest's own proc, sys, dev and tmpfs go over it, and the
# suite runs there with FSTYP=virtiofs on the devices `test` and `scratch`. Its results go to
# the writable share `out`. Prints `@@ BEGIN`, check's output and `@@ END rc` on the second
# serial port.
/bin/busybox mkdir -p /proc /sys /dev /tmp /r
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
exec >/dev/ttyS1 2>&1
echo "@@ BEGIN $(uname -r)"
end() { echo "@@ END $1"; sync; poweroff -f; }
mount -t virtiofs -o ro hostroot /r || end "cannot mount the host's root"
mount -t proc proc /r/proc && mount -t sysfs sysfs /r/sys && mount -t devtmpfs devtmpfs /r/dev &&
    mount -t tmpfs -o size=512m tmp /r/tmp && mount -t tmpfs run /r/run &&
    mount -t tmpfs -o size=64m mnt /r/mnt && mount -t tmpfs vartmp /r/var/tmp &&
    mkdir -p /r/mnt/test /r/mnt/scratch /r/mnt/out /r/dev/shm /r/dev/pts &&
    mount -t devpts devpts /r/dev/pts && mount -t tmpfs shm /r/dev/shm &&
    ln -sf /proc/self/fd /r/dev/fd && ln -sf /proc/self/fd/0 /r/dev/stdin &&
    ln -sf /proc/self/fd/1 /r/dev/stdout && ln -sf /proc/self/fd/2 /r/dev/stderr &&
    mount -t virtiofs out /r/mnt/out || end "cannot set up the root"
# /etc/mtab and the suite's own files are the host's; the mounts are the guest's.
xfs=$(cat /r/mnt/out/xfstests-dir)
args=$(cat /r/mnt/out/check-args)
chroot /r /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb \
    HOST_OPTIONS=/mnt/out/local.config /bin/bash -c "cd $xfs && ./check -R xunit-quiet $args"
end $?
