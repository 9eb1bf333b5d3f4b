#!/usr/bin/env bash
# build.sh: builds xfstests (fstests) from the pinned source in third_party/xfstests, with the
# patches there applied, into $XFSTESTS_DIR (default target/xfstests/src); no network.
# The build packages and the fsgqa users come from scripts/setup.sh. A stamp of the tarball's
# and patches' hashes makes a second run a no-op.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=$PWD
tp=third_party/xfstests
dir=${XFSTESTS_DIR:-$here/target/xfstests/src}
stamp=$(cat "$tp"/*.tar.xz "$tp"/*.patch | sha256sum | cut -c1-16)
if [ -x "$dir/check" ] && [ -x "$dir/ltp/fsx" ] && [ "$(cat "$dir/.memofs-stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "xfstests: built in $dir"
    exit 0
fi
rm -rf "$dir" "$dir.new"
mkdir -p "$dir.new"
tar -xJf "$tp"/xfstests-*.tar.xz -C "$dir.new" --strip-components=1
for p in "$tp"/*.patch; do
    patch -s -d "$dir.new" -p1 <"$p"
done
echo "xfstests: building in $dir (about a minute)"
if ! make -C "$dir.new" -j"$(nproc)" >"$dir.new/build.log" 2>&1; then
    tail -30 "$dir.new/build.log" >&2
    echo "xfstests: build failed (whole log: $dir.new/build.log)" >&2
    exit 1
fi
echo "$stamp" >"$dir.new/.memofs-stamp"
mv "$dir.new" "$dir"
echo "xfstests: built in $dir"
