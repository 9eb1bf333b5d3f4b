#!/usr/bin/env bash
# fsstress-build.sh: installs xfstests' fsstress and fsx as $PREFIX/bin/fsstress and
# $PREFIX/bin/fsx (default /usr/local), for the memory benchmark's fsstress part and runs by
# hand (docs/testing.md). They come from the xfstests build of the pinned copy in
# third_party/xfstests (scripts/xfstests/build.sh; its packages come from scripts/setup.sh):
# no network.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${PREFIX:-/usr/local}
bash scripts/xfstests/build.sh
src=${XFSTESTS_DIR:-$PWD/target/xfstests/src}
install -D -m 0755 "$src/ltp/fsstress" "$PREFIX/bin/fsstress"
install -D -m 0755 "$src/ltp/fsx" "$PREFIX/bin/fsx"
echo "installed $PREFIX/bin/fsstress and $PREFIX/bin/fsx"
