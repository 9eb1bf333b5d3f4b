#!/usr/bin/env bash
# Builds the Debian package target/deb/memofs_VERSION_ARCH.deb with dpkg-deb: the release
# binary, the mount(8) helpers, man pages and shell completions as `make install` lays them
# out under /usr (helpers in /usr/sbin, where mount(8) looks on a merged-/usr system).
# Usage: scripts/deb.sh (from the checkout; builds the release binary if needed).
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(cargo metadata --no-deps --format-version 1 |
    python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "memofs"))')
arch=$(dpkg --print-architecture)
root=target/deb/root
rm -rf "$root"
make -s install DESTDIR="$PWD/$root" PREFIX=/usr SBINDIR=/usr/sbin >/dev/null
strip --strip-debug "$root/usr/bin/memofs"
gzip -9n "$root"/usr/share/man/man1/*.1
doc=$root/usr/share/doc/memofs
install -d "$doc"
gzip -9nc README.md >"$doc/README.md.gz"
cat >"$doc/copyright" <<COPY
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: memofs

Files: *
License: MIT
COPY
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
libc=$(dpkg-query -W -f='${Version}' libc6 | sed 's/-.*//')
install -d "$root/DEBIAN"
cat >"$root/DEBIAN/control" <<CONTROL
Package: memofs
Version: $version
Architecture: $arch
Maintainer: memofs developers <memofs@localhost>
Installed-Size: $size
Depends: libc6 (>= $libc), fuse3
Section: utils
Priority: optional
Description: fast userspace filesystem server mounted through FUSE
 memofs serves an in-memory, tmpfs-like filesystem or exports a host directory,
 mounted through FUSE: mount -t memofs none /mnt -o size=1g, or an /etc/fstab
 line. It caches negative lookups coherently, applies atime rules in the
 server and keeps file data in kernel pages with FUSE passthrough. As
 memofs-virtiofsd (a vhost-user-fs backend taking virtiofsd's command line) it
 serves the same to virtual machines over virtio-fs.
CONTROL
# On an upgrade (configure with the version replaced), each live memofs mount's server hands
# its mount over to the new executable (`memofs upgrade`), so that in-memory files survive
# `apt upgrade`; a mount that cannot change servers keeps its old one, and says why.
cat >"$root/DEBIAN/postinst" <<'POSTINST'
#!/bin/sh
set -e
if [ "$1" = configure ] && [ -n "$2" ] && [ -r /proc/self/mountinfo ]; then
    # Field 5 is the mount point (octal escapes: \040 for a space), the field after "-"
    # the filesystem type.
    awk '{ for (i = 7; i <= NF; i++) if ($i == "-") { if ($(i + 1) == "fuse.memofs") print $5; break } }' \
        /proc/self/mountinfo | while read -r mnt; do
        mnt=$(printf '%b' "$(printf '%s' "$mnt" | sed 's/\\\([0-7][0-7][0-7]\)/\\0\1/g')")
        /usr/bin/memofs upgrade "$mnt" ||
            echo "memofs: $mnt is still served by the previous memofs" >&2
    done
fi
exit 0
POSTINST
chmod 0755 "$root/DEBIAN/postinst"
out=target/deb/memofs_${version}_${arch}.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$out" >/dev/null
echo "$out"
