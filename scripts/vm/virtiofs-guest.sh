#!/bin/busybox sh
# /init of the virtio-fs guest (scripts/vm/virtiofs.sh): mounts the two memofs virtio-fs
# devices the host started (`mem`: the mem backend; `share`: a host directory through the
# passthrough backend), checks them through ordinary system calls, and writes `PASS name` /
# `FAIL name: why` lines and `@@` markers for the host to the second serial port. Two more
# devices take the options VM managers pass: `ro` (a host directory, --readonly, -o no_xattr
# and --cache=always, with a filesystem below it, whose submounts are announced by default)
# and `ids` (a host directory, --translate-uid, --translate-gid and --xattrmap).
/bin/busybox mkdir -p /proc /sys /dev /tmp /mem /share /ro /ids
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
exec >/dev/ttyS1 2>&1
echo "@@ BEGIN $(uname -r)"
for m in /lib/modules/*.ko; do
    [ -e "$m" ] && insmod "$m"
done

check() { # NAME COMMAND...: PASS or FAIL with the command's output
    name=$1
    shift
    if out=$("$@" 2>&1); then echo "PASS $name"; else echo "FAIL $name: $out"; fi
}
same() { # NAME GOT WANT
    if [ "$2" = "$3" ]; then echo "PASS $1"; else echo "FAIL $1: got '$2', want '$3'"; fi
}
# Waits (up to 60 s of guest time) for PATH to exist: the host's answer to a marker.
await() {
    i=0
    while [ ! -e "$1" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
    [ -e "$1" ]
}

check mount-mem mount -t virtiofs mem /mem
check mount-share mount -t virtiofs share /share

# The checks every device passes (scripts/vm/fs-checks.sh, here as /bin/fs-checks).
for d in /mem /share; do
    . /bin/fs-checks $d
done

fails_with() { # NAME ERROR COMMAND...: PASS if the command fails saying ERROR
    name=$1
    error=$2
    shift 2
    if out=$("$@" 2>&1); then
        echo "FAIL $name: it worked"
    else
        case "$out" in
        *"$error"*) echo "PASS $name" ;;
        *) echo "FAIL $name: $out" ;;
        esac
    fi
}
# The read-only share: what is there reads, every change is refused.
refused() { # NAME COMMAND...: PASS if the command fails with EROFS
    what=$1
    shift
    fails_with "$what" "Read-only file system" "$@"
}
check mount-ro mount -t virtiofs ro /ro
same ro-read "$(cat /ro/kept 2>&1)" "kept on the host"
refused ro-append sh -c 'echo more >>/ro/kept'
refused ro-truncate truncate -s 0 /ro/kept
refused ro-create touch /ro/new
refused ro-mkdir mkdir /ro/dir
refused ro-symlink ln -s kept /ro/link
refused ro-rename mv /ro/kept /ro/moved
refused ro-unlink rm /ro/kept
refused ro-chmod chmod 600 /ro/kept
refused ro-touch touch /ro/kept
if command -v setfattr >/dev/null; then refused ro-setfattr setfattr -n user.x -v 1 /ro/kept; fi
# The ro device keeps what it is given (--cache=always): listed without OPENDIR.
for i in 1 2 3; do same ro-listing-$i "$(ls /ro | tr '\n' ' ')" "kept sub "; done
same ro-sub-listing "$(ls /ro/sub | tr '\n' ' ')" "inner "
# The ro device is also served with -o no_xattr: the guest's kernel stops asking.
if command -v getfattr >/dev/null; then
    for i in 1 2 3 4 5; do
        fails_with ro-no-xattr-get-$i "not supported" getfattr -n user.x /ro/kept
        fails_with ro-no-xattr-list-$i "not supported" getfattr -d -m - /ro/kept
    done
fi
same ro-still-there "$(cat /ro/kept 2>&1)" "kept on the host"
# The filesystem mounted below it on the host (submounts announced, the default): a device
# of its own.
same submount-read "$(cat /ro/sub/inner 2>&1)" "in a submount"
dev_top=$(stat -c %d /ro)
dev_sub=$(stat -c %d /ro/sub)
if [ -n "$dev_sub" ] && [ "$dev_top" != "$dev_sub" ]; then echo "PASS submount-own-device"; else echo "FAIL submount-own-device: /ro $dev_top, /ro/sub $dev_sub"; fi

# Translated ids (guest 1000 is host 101000, guest 3000 may not be used): a guest user's
# file lands on the host with the mapped owner and shows the guest's ids back.
check mount-ids mount -t virtiofs ids /ids
check ids-user-creates su user -c 'echo mine >/ids/by-user'
same ids-guest-owner "$(stat -c %u:%g /ids/by-user 2>&1)" 1000:1000
same ids-host-file-shown "$(stat -c %u:%g /ids/host-owned 2>&1)" 1000:1000
check ids-chown-mapped chown 1000:1000 /ids/by-root
same ids-chown-shown "$(stat -c %u:%g /ids/by-root 2>&1)" 1000:1000
fails_with ids-forbidden-owner "not permitted" chown 3000 /ids/by-root
# Mapped extended attribute names (security.* lives as user.virtiofs.security.* on the host).
if command -v setfattr >/dev/null && command -v getfattr >/dev/null; then
    check xattrmap-set setfattr -n security.memofs -v guest /ids/by-root
    same xattrmap-get "$(getfattr --absolute-names --only-values -n security.memofs /ids/by-root 2>&1)" guest
    same xattrmap-host-attr-shown "$(getfattr --absolute-names --only-values -n user.plain /ids/host-owned 2>&1)" host
    fails_with xattrmap-target-refused "not permitted" setfattr -n user.virtiofs.x -v 1 /ids/by-root
fi
echo "@@ IDS DONE"

# A guest that unmounts and mounts again (a new INIT) finds the mem backend's files.
echo kept >/mem/kept
check umount-mem umount /mem
check mount-mem-again mount -t virtiofs mem /mem
same mem-kept-across-mounts "$(cat /mem/kept 2>&1)" kept
rm -f /mem/kept

# The guest resets the mem device in the middle of writes (its PCI function removed and
# found again): the server takes the reset, and the device mounts again with what was
# written before it.
pci_of() { # the PCI function of the virtio-fs device tagged $1 (/sys/fs/virtiofs: 6.9+)
    for d in /sys/fs/virtiofs/*; do
        [ "$(cat $d/tag 2>/dev/null)" = "$1" ] && { readlink -f $d/device/..; return; }
    done
}
echo before-reset >/mem/kept
sync
dev=$(pci_of mem)
if [ ! -d /sys/fs/virtiofs ]; then
    echo "SKIP reset-mem: this kernel does not show virtio-fs devices in /sys/fs/virtiofs (6.9+)"
elif [ -n "$dev" ] && [ -e "$dev/remove" ]; then
    (while true; do dd if=/dev/zero of=/mem/busy bs=64k count=16 2>/dev/null; done) &
    writer=$!
    sleep 1
    echo 1 >"$dev/remove"
    kill $writer 2>/dev/null
    wait $writer 2>/dev/null
    umount -l /mem 2>/dev/null
    echo 1 >/sys/bus/pci/rescan
    check mount-mem-after-reset mount -t virtiofs mem /mem
    same mem-kept-across-reset "$(cat /mem/kept 2>&1)" before-reset
    rm -f /mem/kept /mem/busy
else
    echo "FAIL reset-mem: no PCI function found for the mem device"
fi

# The POSIX conformance suite (pjdfstest, where the host put it in), on the guest's own
# tmpfs first: every case that passes there must pass on both devices.
if [ -x /bin/pjdfstest ]; then
    mkdir -p /sec
    mount -t tmpfs tmpfs /sec
    for t in tmp mem share; do
        mkdir -p /$t/pjd /sec/$t
        timeout 600 pjdfstest -c /etc/pjdfstest.toml -p /$t/pjd -s /sec/$t >/tmp/pjd-$t.out 2>&1
        awk '$NF == "ok" { print $1 }' /tmp/pjd-$t.out | sort >/tmp/pjd-$t.ok
    done
    for t in mem share; do
        lost=$(awk 'NR == FNR { ok[$1] = 1; next } !($1 in ok)' /tmp/pjd-$t.ok /tmp/pjd-tmp.ok)
        if [ -z "$lost" ]; then
            echo "PASS pjdfstest-$t ($(wc -l </tmp/pjd-$t.ok) cases; every one tmpfs passes)"
        else
            echo "FAIL pjdfstest-$t: fails where tmpfs passes: $(echo $lost)"
            for c in $lost; do
                grep -F -A6 "$c" /tmp/pjd-$t.out | head -8 | sed "s/^/  pjdfstest-$t: /"
            done
        fi
        rm -rf /$t/pjd
    done
else
    echo "SKIP pjdfstest: not installed on the host (scripts/setup.sh installs it)"
fi

# A guest's root is not the host's: on the shared directory, attributes only the host's root
# may set (trusted.*, security.*) and the immutable flag are refused (the host checks its
# file afterwards), user.* attributes work; and `sync` reaches the host's filesystem.
echo guarded >/share/guarded
if [ -x /bin/setfattr ] && [ -x /bin/chattr ]; then
    for a in trusted.x security.x; do
        if setfattr -n "$a" -v 1 /share/guarded 2>/dev/null; then
            echo "FAIL share-refuses-$a: set"
        else
            echo "PASS share-refuses-$a"
        fi
    done
    check share-user-xattr setfattr -n user.x -v 1 /share/guarded
    if chattr +i /share/guarded 2>/dev/null; then
        echo "FAIL share-refuses-immutable: set"
    else
        echo "PASS share-refuses-immutable"
    fi
else
    echo "SKIP share-refuses: setfattr and chattr are not installed on the host (scripts/setup.sh installs them)"
fi
sync
sync
sync
echo "@@ GUARDED"
await /share/guard-checked || echo "FAIL guard-checked: no word from the host within 60 s"
rm -f /share/guarded /share/guard-checked

# The seed's loop on the mem device: 10 000 lookups of a missing name. The host counts the
# LOOKUP requests that reached the server (memofs stats on the device's socket) before the
# loop, then tells the guest to go on (a file on the shared device), and counts again after.
echo "@@ LOOK"
await /share/go-look || echo "FAIL go-look: no word from the host within 60 s"
i=0
while [ $i -lt 10000 ]; do [ -e /mem/missing ]; i=$((i + 1)); done
echo "@@ LOOKED 10000"

# Coherence with the host, through the shared directory: the host creates a file and
# deletes another once it has read the marker; the guest sees both once its timeouts (cache=
# auto: 1 s) have run out.
echo old >/share/to-delete
[ -e /share/host-made ] # a miss the guest now caches
echo "@@ SHARE READY"
if await /share/host-done; then
    echo "PASS host-answered"
    sleep 2 # past the 1 s timeouts
    same host-create-seen "$(cat /share/host-made 2>&1)" "made on the host"
    same host-delete-seen "$([ -e /share/to-delete ] && echo there || echo gone)" gone
else
    echo "FAIL host-answered: no host-done within 60 s"
fi

# Data the guest synced is on the host, even if the guest dies now: the host kills the
# VM after this marker and compares the file.
dd if=/dev/urandom of=/tmp/synced bs=1M count=4 2>/dev/null
dd if=/tmp/synced of=/share/synced bs=1M conv=fsync 2>/dev/null
echo "@@ SYNCED $(md5sum </tmp/synced | cut -d' ' -f1)"
while true; do dd if=/dev/zero of=/share/unsynced bs=1M count=4 2>/dev/null; done
