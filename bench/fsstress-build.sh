#!/usr/bin/env bash
# fsstress-build.sh: builds xfstests' fsstress and fsx (ltp/fsstress.c and ltp/fsx.c, one C
# file each) and installs them as $PREFIX/bin/fsstress and $PREFIX/bin/fsx (default
# /usr/local), for the memory benchmark's fsstress part and runs by hand (docs/testing.md). Debian
# packages neither xfstests nor LTP, so the source comes from xfstests' git repository:
# XFSTESTS_SRC names a checkout, a bare repository or a directory holding ltp/fsstress.c,
# ltp/fsx.c, src/global.h, src/fiexchange.h and src/statx.h; without it the script clones
# https://git.kernel.org/pub/scm/fs/xfs/xfstests-dev.git (needs the network).
# XFSTESTS_COMMIT picks the commit of a repository (default HEAD); the five files of commit
# 63a29724a85f are checked against their hashes. SKIP_APT=1 skips installing the build packages.
set -euo pipefail

XFSTESTS_COMMIT=${XFSTESTS_COMMIT:-HEAD}
PREFIX=${PREFIX:-/usr/local}

# 1. Build dependencies (all plain bookworm packages; headers + libaio/liburing for the AIO/io_uring ops).
if [ "${SKIP_APT:-0}" != 1 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends gcc libc6-dev linux-libc-dev \
        xfslibs-dev libaio-dev liburing-dev git ca-certificates >/dev/null
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
if [ -z "${XFSTESTS_SRC:-}" ]; then
    XFSTESTS_SRC=$work/xfstests
    git clone -q --depth 1 https://git.kernel.org/pub/scm/fs/xfs/xfstests-dev.git "$XFSTESTS_SRC"
fi

# 2. Get exactly five source files.
files="ltp/fsstress.c ltp/fsx.c src/global.h src/fiexchange.h src/statx.h"
if [ -f "$XFSTESTS_SRC/ltp/fsstress.c" ]; then
    for f in $files; do install -D -m 0644 "$XFSTESTS_SRC/$f" "$f"; done
elif git --git-dir="$XFSTESTS_SRC" rev-parse --git-dir >/dev/null 2>&1 \
  || git --git-dir="$XFSTESTS_SRC/.git" rev-parse --git-dir >/dev/null 2>&1; then
    gd="$XFSTESTS_SRC"; [ -d "$gd/.git" ] && gd="$gd/.git"
    # shellcheck disable=SC2086
    git --git-dir="$gd" archive "$XFSTESTS_COMMIT" $files | tar x
else
    echo "error: xfstests source not found at XFSTESTS_SRC=$XFSTESTS_SRC" >&2
    exit 1
fi
# The files of commit 63a29724a85f, checked when that commit is asked for.
if [ "${XFSTESTS_COMMIT:0:12}" = 63a29724a85f ]; then
    sha256sum -c --quiet - <<'EOF'
00bc62a5fac6f53549172275e0285e649ade26f1ce4e54a89f008417e85303d4  ltp/fsstress.c
39098ae040e847dc66af847001750e702350fb46012aa2cba41d84881d35f581  src/global.h
a11a55fc572c8332703bbb2b59f5f5ad6a285ca3eff6f1bafdc6533a56b55605  src/fiexchange.h
7c2e4ab2982a66c6b7d2e10f015a2f270a96acaee9d2fa7a90ed6a4f60f91e78  ltp/fsx.c
d08b00f0e8be182d238a9f2c3f31ba3eec879fcc6b6e3bf1f7fba2d533602c57  src/statx.h
EOF
fi

# 3. Stand-in for the autoconf-generated include/config.h (what configure finds on Linux/glibc).
mkdir -p include
cat > include/config.h <<'EOF'
#define STDC_HEADERS 1
#define HAVE_ASSERT_H 1
#define HAVE_DIRENT_H 1
#define HAVE_ERRNO_H 1
#define HAVE_LIBGEN_H 1
#define HAVE_MALLOC_H 1
#define HAVE_STDLIB_H 1
#define HAVE_STRING_H 1
#define HAVE_STRINGS_H 1
#define HAVE_UNISTD_H 1
#define HAVE_SYS_TYPES_H 1
#define HAVE_SYS_STAT_H 1
#define HAVE_SYS_STATVFS_H 1
#define HAVE_SYS_TIME_H 1
#define HAVE_SYS_IOCTL_H 1
#define HAVE_SYS_WAIT_H 1
#define HAVE_SYS_FCNTL_H 1
#define HAVE_SYS_PARAM_H 1
#define HAVE_SYS_FILE_H 1
#define HAVE_SYS_MMAN_H 1
#define HAVE_SYS_PRCTL_H 1
#define HAVE_LINUX_FALLOC_H 1
#define HAVE_LINUX_FIEMAP_H 1
#define HAVE_XFS_XFS_H 1
#define HAVE_RENAMEAT2 1
EOF

# 4. Compile each C file with the flags xfstests' ltp/Makefile + builddefs would use.
#    NEED_INTERNAL_XFS_IOC_EXCHANGE_RANGE: bookworm's xfslibs-dev 6.1 predates XFS_IOC_EXCHANGE_RANGE.
gcc -std=gnu11 -funsigned-char -fno-strict-aliasing -Wall -O2 -g \
    -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 \
    -DXFS -DAIO -DURING -DFALLOCATE -DHAVE_COPY_FILE_RANGE -DNEED_INTERNAL_XFS_IOC_EXCHANGE_RANGE \
    -Iinclude -Isrc ltp/fsstress.c -o fsstress -laio -luring -lpthread -lm
gcc -std=gnu11 -funsigned-char -fno-strict-aliasing -Wall -O2 -g \
    -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 \
    -DAIO -DURING -DHAVE_COPY_FILE_RANGE -DNEED_INTERNAL_XFS_IOC_EXCHANGE_RANGE \
    -Iinclude -Isrc ltp/fsx.c -o fsx -laio -luring

# 5. Install.
install -D -m 0755 fsstress "$PREFIX/bin/fsstress"
install -D -m 0755 fsx "$PREFIX/bin/fsx"
echo "installed $PREFIX/bin/fsstress and $PREFIX/bin/fsx"

# 6. Smoke test (quick, in a private temp dir).
t=$(mktemp -d)
"$PREFIX/bin/fsstress" -d "$t/work" -p 2 -n 200 -s 1 >/dev/null
"$PREFIX/bin/fsx" -q -N 1000 -S 1 "$t/fsx" >/dev/null
rm -rf "$t"
echo "fsstress and fsx smoke tests OK"
