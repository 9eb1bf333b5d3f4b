# tools.sh, sourced by the stress scripts from the checkout's top: the memofs binary ($bin,
# MEMOFS_BIN or target/release/memofs) and xfstests' fsstress and fsx ($fsstress, $fsx, from
# XFSTESTS_DIR or target/xfstests/src, built by build.sh), and $seed (SEED, default 1).
# Exits 2 if the tools are not built, 0 (skipped, saying so as $1) without /dev/fuse.
bin=$(realpath "${MEMOFS_BIN:-target/release/memofs}")
src=${XFSTESTS_DIR:-$PWD/target/xfstests/src}
fsstress=$src/ltp/fsstress
fsx=$src/ltp/fsx
[ -x "$fsstress" ] && [ -x "$fsx" ] || { echo "fsstress/fsx are not built: run scripts/xfstests/build.sh" >&2; exit 2; }
[ -e /dev/fuse ] || { echo "$1: skipped: no /dev/fuse" >&2; exit 0; }
seed=${SEED:-1}
