#!/usr/bin/env bash
# passthrough_ll.sh: builds libfuse's passthrough_ll example (Debian's libfuse3-dev ships its
# source) into target/xfstests/bin, once, and prints its path: the FUSE server xfstests'
# README.fuse describes, run beside memofs for comparison.
set -euo pipefail
cd "$(dirname "$0")/../.."
src=/usr/share/doc/libfuse3-dev/examples/passthrough_ll.c
out=$PWD/target/xfstests/bin/passthrough_ll
[ -f "$src" ] || { echo "$src is missing: apt-get install libfuse3-dev" >&2; exit 1; }
if [ ! -x "$out" ] || [ "$src" -nt "$out" ]; then
    mkdir -p "$(dirname "$out")"
    # shellcheck disable=SC2046
    gcc -O2 -Wall -DHAVE_FALLOCATE -DHAVE_POSIX_FALLOCATE -DHAVE_COPY_FILE_RANGE \
        -I"$(dirname "$src")" $(pkg-config --cflags fuse3) "$src" -o "$out.tmp" $(pkg-config --libs fuse3)
    mv "$out.tmp" "$out"
fi
echo "$out"
