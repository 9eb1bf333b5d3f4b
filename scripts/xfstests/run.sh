#!/usr/bin/env bash
# run.sh CONFIG [CHECK ARGS...]: runs xfstests (built by build.sh) on one configuration, with
# a test and a scratch filesystem of its own; CHECK ARGS go to xfstests' ./check (default
# `-g quick`). CONFIG is one of
#   mem             memofs's mem backend as mounted by default (root: file data in kernel memory)
#   pages           the mem backend's page store (-o passthrough=off,writeback=off)
#   export          memofs exporting two directories of a fresh tmpfs (the passthrough backend,
#                   given as source=DIR so that the device names are names, as for passthrough_ll)
#   passthrough_ll  libfuse's passthrough_ll example over the same, the suite's FUSE reference
#   tmpfs           the kernel's tmpfs, the reference of the mem backend
# Environment: MEMOFS_BIN (default target/release/memofs), XFSTESTS_DIR (default
# target/xfstests/src), RESULTS (default target/xfstests/results/CONFIG), EXCLUDE (a file of
# tests not to run, one per line; default scripts/xfstests/exclude).
# Results: check's own files under RESULTS, and RESULTS/summary (ran, passed, failed, not run,
# and each test's outcome). Exit status: check's.
# It touches only what it made: its mounts, a temporary directory and the mount(8) helper
# /sbin/mount.fuse.CONFIG, put back as found.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=$PWD
config=${1:?usage: scripts/xfstests/run.sh mem|pages|export|passthrough_ll|tmpfs [check args...]}
shift
[ $# -gt 0 ] || set -- -g quick
bin=$(realpath "${MEMOFS_BIN:-target/release/memofs}")
src=${XFSTESTS_DIR:-$here/target/xfstests/src}
results=$(realpath -m "${RESULTS:-target/xfstests/results/$config}")
exclude=$(realpath "${EXCLUDE:-scripts/xfstests/exclude}")
[ -x "$src/check" ] || { echo "xfstests is not built: run scripts/xfstests/build.sh" >&2; exit 2; }
[ -e /dev/fuse ] || [ "$config" = tmpfs ] || { echo "xfstests: skipped: no /dev/fuse" >&2; exit 0; }

work=$(mktemp -d /tmp/memofs-xfstests.XXXXXX)
helper=
helper_was=
check_pid=
cleanup() {
    set +e
    # check and the tests it runs are a process group of their own (setsid below).
    [ -z "$check_pid" ] || kill -TERM -- "-$check_pid" 2>/dev/null
    for m in "$work/test" "$work/scratch" "$work/host"; do
        while mountpoint -q "$m" 2>/dev/null; do
            umount "$m" 2>/dev/null || umount -l "$m"
        done
    done
    if [ -n "$helper" ]; then
        rm -f "$helper"
        [ -z "$helper_was" ] || mv "$helper_was" "$helper"
    fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$work/test" "$work/scratch" "$results"
# The suite runs some tests as other users (fsgqa): they must reach the mount points.
chmod 755 "$work"

# The mount(8) helper the suite's `mount -t fuse.NAME` runs, kept aside if one is there.
# One run at a time uses a helper name (a second waits here until the first is done).
install_helper() {
    exec 8>"/run/lock/memofs-xfstests-$1.lock"
    flock 8
    helper=/sbin/mount.fuse.$1
    if [ -e "$helper" ] || [ -L "$helper" ]; then
        helper_was="$work/helper-was"
        mv "$helper" "$helper_was"
    fi
    if [ -n "${2:-}" ]; then
        ln -s "$2" "$helper"
    else
        cat >"$helper"
        chmod 755 "$helper"
    fi
}

# A fresh tmpfs holding the directories an export serves.
host_dirs() {
    mkdir -p "$work/host"
    mount -t tmpfs -o size=4g memofs-xfstests-host "$work/host"
    mkdir -p "$work/host/test" "$work/host/scratch"
}

cfg=$work/local.config
{
    echo "export TEST_DIR=$work/test"
    echo "export SCRATCH_MNT=$work/scratch"
    echo "export RESULT_BASE=$results"
} >"$cfg"
case "$config" in
mem | pages)
    install_helper memofs "$bin"
    # Other users reach the mount (the suite runs tests as fsgqa), as README.fuse mounts.
    opts=size=4g,allow_other
    # The page store without the writeback cache: under it a write(2) past a full mount
    # succeeds into the kernel's cache and ENOSPC reaches the writer only at fsync or close,
    # so the tests that write until ENOSPC would write for ever (docs/testing.md).
    [ "$config" = pages ] && opts+=,passthrough=off,writeback=off
    cat >>"$cfg" <<EOF
export FSTYP=fuse
export FUSE_SUBTYP=.memofs
export FUSE_IN_MEMORY=yes
export TEST_DEV=memofs:xfstests-test
export SCRATCH_DEV=memofs:xfstests-scratch
export TEST_FS_MOUNT_OPTS="-o $opts"
export MOUNT_OPTIONS="-o $opts"
EOF
    ;;
export)
    install_helper memofs "$bin"
    host_dirs
    cat >>"$cfg" <<EOF
export FSTYP=fuse
export FUSE_SUBTYP=.memofs
export TEST_DEV=memofs-xfstests-test
export SCRATCH_DEV=memofs-xfstests-scratch
export TEST_FS_MOUNT_OPTS="-o source=$work/host/test,allow_other"
export MOUNT_OPTIONS="-o source=$work/host/scratch,allow_other"
EOF
    ;;
passthrough_ll)
    ll=$(bash scripts/xfstests/passthrough_ll.sh)
    host_dirs
    # As the suite's README.fuse: the device name becomes the mount's fsname.
    install_helper passthrough_ll <<EOF
#!/bin/sh
# As many descriptors as allowed (README.fuse asks for 1048576, which takes CAP_SYS_RESOURCE).
ulimit -n 1048576 2>/dev/null || ulimit -n "\$(ulimit -Hn)"
exec $ll -ofsname="\$@"
EOF
    cat >>"$cfg" <<EOF
export FSTYP=fuse
export FUSE_SUBTYP=.passthrough_ll
export TEST_DEV=xfstests-ll-test
export SCRATCH_DEV=xfstests-ll-scratch
export TEST_FS_MOUNT_OPTS="-osource=$work/host/test,allow_other,default_permissions"
export MOUNT_OPTIONS="-osource=$work/host/scratch,allow_other,default_permissions"
EOF
    ;;
tmpfs)
    cat >>"$cfg" <<EOF
export FSTYP=tmpfs
export TEST_DEV=memofs-xfstests-test
export SCRATCH_DEV=memofs-xfstests-scratch
EOF
    ;;
*)
    echo "unknown configuration '$config' (mem, pages, export, passthrough_ll or tmpfs)" >&2
    exit 2
    ;;
esac

echo "xfstests: $config: ./check $* (results in $results)"
rc=0
(cd "$src" && HOST_OPTIONS=$cfg exec setsid ./check -R xunit-quiet -E "$exclude" "$@") >"$results/check.log" 2>&1 &
check_pid=$!
wait "$check_pid" || rc=$?
check_pid=
python3 scripts/xfstests/summary.py "$results" "$config" >"$results/summary"
grep -v '^  notrun' "$results/summary" || true
exit $rc
