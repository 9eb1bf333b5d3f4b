#!/usr/bin/env bash
# e2e.sh: the end-to-end suite as `make e2e` runs it: three times (default options, as root, file
# data kernel-backed with FUSE passthrough; MEMOFS_E2E_OPTS=passthrough=off, the server's own
# page store; MEMOFS_E2E_OPTS=io_uring=on, requests through FUSE-over-io_uring with the host's
# module parameter set for the run by scripts/with-uring.sh), every test binary even after a
# failure, then one summary (memofs-e2e-summary):
# per run, skipped tests per capability, and `e2e: N passed, N failed, N skipped`.
# A skipped test (tests/e2e/src/skip.rs) is counted as skipped, or as failed when its capability
# is required: MEMOFS_E2E_REQUIRE (default in tests/e2e/src/summary.rs) minus MEMOFS_E2E_LACKS
# (`make test E2E_LACKS=root,...` on a machine without them). Each run's output, exit status and
# skip records are kept in target/e2e/. Environment: CARGO, and the e2e harness's variables.
# Does not take the build lock: callers do (`flock /tmp/memofs-build.lock make e2e`).
set -uo pipefail
cd "$(dirname "$0")/.."
CARGO=${CARGO:-cargo}
out=$PWD/target/e2e
rm -rf "$out"
mkdir -p "$out"
"$CARGO" build -p memofs -p memofs-e2e --bins || exit 1

# Tests run the binary as other users too: where they cannot reach it (a checkout in a
# private home directory), every run gets a copy in a directory they can.
bin=$PWD/target/debug/memofs
if [ -z "${MEMOFS_BIN:-}" ] && ! setpriv --reuid=nobody --regid=nogroup --clear-groups test -x "$bin"; then
    shared=$(mktemp -d /tmp/memofs-e2e-bin.XXXXXX)
    chmod 755 "$shared"
    cp "$bin" "$shared/memofs"
    export MEMOFS_BIN=$shared/memofs
    trap 'rm -rf "$shared"' EXIT
    echo "e2e: $bin is out of other users' reach: the tests run $MEMOFS_BIN"
fi

# run NAME [VAR=VALUE...]: one `cargo test -p memofs-e2e` with these variables (under $WRAP).
WRAP=
run() {
    local name=$1
    shift
    echo "e2e: run $name${*:+ ($*)}"
    env "$@" MEMOFS_E2E_SKIPS="$out/$name.skips" $WRAP "$CARGO" test -p memofs-e2e --no-fail-fast 2>&1 |
        tee "$out/$name.log"
    echo "${PIPESTATUS[0]}" >"$out/$name.status"
}

run default
run passthrough-off MEMOFS_E2E_OPTS=passthrough=off
WRAP="bash scripts/with-uring.sh"
run io-uring MEMOFS_E2E_OPTS=io_uring=on
if [ "$(cat "$out/io-uring.status")" = 77 ]; then
    # No FUSE-over-io_uring here: the whole run counts as one skip of that kernel feature.
    echo "test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out" >>"$out/io-uring.log"
    printf 'kernel:io_uring\te2e::io_uring_run\tthe kernel has no fuse.enable_uring (Linux 6.14+)\n' >>"$out/io-uring.skips"
    echo 0 >"$out/io-uring.status"
fi
"$CARGO" run -q -p memofs-e2e --bin memofs-e2e-summary -- "$out"
