#!/usr/bin/env bash
# Runs a command with FUSE-over-io_uring enabled on this host (the fuse module parameter
# enable_uring, Linux 6.14+), then puts the parameter back as it was, whatever happens.
# The parameter is host-wide: memofs itself never changes it; only this test helper does,
# for the length of one test run (root only). Exits 77 (skip) where the kernel has no such
# parameter or it cannot be set.
set -euo pipefail
param=/sys/module/fuse/parameters/enable_uring
if [ ! -w "$param" ]; then
    echo "with-uring: SKIP: $param is missing or not writable (needs Linux 6.14+ and root)" >&2
    exit 77
fi
before=$(cat "$param")
restore() { echo "$before" > "$param"; }
trap restore EXIT
echo Y > "$param"
"$@"
