#!/usr/bin/env bash
# Installs the Debian package (scripts/deb.sh) on this machine and uses memofs as a user of
# the package would: `mount -t memofs`, `mount -t fuse.memofs` for both backends, an fstab
# line (`mount -T FSTAB`, with the noauto/nofail/x-systemd options fstab and systemd pass),
# `memofs stats`, umount(8), the virtio-fs backend's description for QEMU and libvirt; then
# purges the package and checks that every file it
# installed is gone. Files of the package's that were there before it (`make install`'s
# mount(8) helpers, which the README's quick start puts in /sbin) are put back as they were.
# Needs root and /dev/fuse; refuses to touch a memofs package that was installed before it
# ran.
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "package-test: FAILED: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || fail "needs root (dpkg -i, mount)"
[ -e /dev/fuse ] || fail "needs /dev/fuse"
if dpkg-query -W -f='${Status}' memofs 2>/dev/null | grep -q "ok installed"; then
    fail "a memofs package is already installed here; this test installs and purges its own (dpkg --purge memofs first)"
fi

deb=$(bash scripts/deb.sh)
work=$(mktemp -d /tmp/memofs-package-test.XXXXXX)
mounts=()
saved=()
cleanup() {
    for m in "${mounts[@]}"; do
        mountpoint -q "$m" && umount -l "$m" 2>/dev/null
    done
    dpkg-query -W memofs >/dev/null 2>&1 && dpkg --purge memofs >/dev/null 2>&1
    local kept=0
    for f in "${saved[@]}"; do
        mkdir -p "$(dirname "$f")" && cp -a "$work/saved$f" "$f" && continue
        echo "package-test: could not put $f back (a copy is in $work/saved)" >&2
        kept=1
    done
    ((kept)) || rm -rf "$work"
}
trap cleanup EXIT
# The package's files already here (a `make install`'s) are kept aside to put back.
while read -r f; do
    f=${f#.}
    if [ -n "$f" ] && { [ -f "$f" ] || [ -L "$f" ]; } && [ ! -d "$f" ]; then
        mkdir -p "$work/saved$(dirname "$f")"
        cp -a "$f" "$work/saved$f"
        saved+=("$f")
    fi
done < <(dpkg-deb --fsys-tarfile "$deb" | tar -t)
# Each command that could wait on a server has a deadline.
t() { timeout 60 "$@"; }

t dpkg -i "$deb" >/dev/null || fail "dpkg -i $deb"
dpkg -L memofs >"$work/files"
# The vhost-user description QEMU and libvirt read names a binary that answers as an fs
# backend.
json=/usr/share/qemu/vhost-user/60-memofs.json
binary=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["type"] == "fs"; print(d["binary"])' "$json") ||
    fail "$json is missing or not an fs backend's description"
"$binary" --print-capabilities | python3 -c 'import json,sys; assert json.load(sys.stdin)["type"] == "fs"' ||
    fail "$binary --print-capabilities"
for f in /usr/bin/memofs /usr/sbin/mount.memofs /usr/sbin/mount.fuse.memofs \
    /usr/share/man/man1/memofs.1.gz /usr/share/man/man1/memofs-mount.1.gz \
    /usr/share/bash-completion/completions/memofs; do
    [ -e "$f" ] || fail "the package did not install $f"
done
/usr/bin/memofs --version | grep -q memofs || fail "memofs --version"

# The server of the mount at $1 is gone after umount(8) (within 5 s).
gone_after_umount() {
    local pid
    pid=$(pgrep -f "memofs.* $1\$" | head -1 || true)
    t umount "$1" || fail "umount $1"
    for _ in $(seq 100); do
        if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then return 0; fi
        sleep 0.05
    done
    fail "the server of $1 (pid $pid) still runs after umount"
}

# mount -t memofs: the in-memory backend through /usr/sbin/mount.memofs.
m1=$work/mem
mkdir -p "$m1"
mounts+=("$m1")
t mount -t memofs memofs "$m1" -o size=16m,mode=0755,noauto,_netdev,x-systemd.automount ||
    fail "mount -t memofs"
findmnt -n -o FSTYPE "$m1" | grep -qx fuse.memofs || fail "$m1 is not a fuse.memofs mount"
echo hello >"$m1/greeting"
[ "$(cat "$m1/greeting")" = hello ] || fail "read back through mount -t memofs"
/usr/bin/memofs stats "$m1" | grep -q "Requests" || fail "memofs stats on $m1"
# Installing the package again (as an upgrade does) hands the live mount to the installed
# executable: the server's process and the file stay.
before=$(pgrep -f "memofs.* $m1\$" | head -1)
exec 7<"$m1/greeting"
t dpkg -i "$deb" >"$work/reinstall.log" 2>&1 || fail "dpkg -i again: $(cat "$work/reinstall.log")"
grep -q "$m1 is served by /usr/bin/memofs" "$work/reinstall.log" ||
    fail "the postinst did not upgrade $m1: $(cat "$work/reinstall.log")"
[ "$(pgrep -f "memofs.* $m1\$" | head -1)" = "$before" ] || fail "the server of $m1 changed process"
[ "$(cat <&7)" = hello ] && [ "$(cat "$m1/greeting")" = hello ] || fail "$m1/greeting after the upgrade"
exec 7<&-
gone_after_umount "$m1"

# mount -t fuse.memofs: mount.fuse3 runs `memofs SOURCE DIR -o OPTS`; a directory SOURCE is
# the passthrough backend.
src=$work/src
m2=$work/pt
mkdir -p "$src" "$m2"
mounts+=("$m2")
t mount -t fuse.memofs "$src" "$m2" -o nofail,x-systemd.requires=local-fs.target ||
    fail "mount -t fuse.memofs (passthrough)"
echo exported >"$m2/file"
[ "$(cat "$src/file")" = exported ] || fail "a write through the export did not reach $src"
gone_after_umount "$m2"

# An fstab line (what systemd's generated .mount unit runs too: mount -t TYPE WHAT WHERE -o OPTS).
m3=$work/fstab
mkdir -p "$m3"
mounts+=("$m3")
printf 'memofs %s memofs size=8m,noatime,noauto,nofail,x-systemd.automount 0 0\n' "$m3" >"$work/fstab.tab"
t mount -T "$work/fstab.tab" "$m3" || fail "mount -T fstab"
findmnt -n -o FSTYPE "$m3" | grep -qx fuse.memofs || fail "fstab mount is not fuse.memofs"
df -B1 --output=size "$m3" | tail -1 | grep -q "^ *8388608$" || fail "size=8m from fstab not applied: $(df -B1 "$m3" | tail -1)"
gone_after_umount "$m3"

t dpkg --purge memofs >/dev/null || fail "dpkg --purge memofs"
left=()
while read -r f; do
    if [ -f "$f" ] || [ -L "$f" ]; then left+=("$f"); fi
done <"$work/files"
((${#left[@]} == 0)) || fail "files left after purge: ${left[*]}"
echo "package-test: ok (installed $(basename "$deb"), mounted through mount(8) three ways, upgraded a live mount by reinstalling, purged)"
