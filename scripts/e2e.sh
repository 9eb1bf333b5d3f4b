#!/usr/bin/env bash
# e2e.sh: the end-to-end suite as `make e2e` runs it: twice (default options, as root, file data
# kernel-backed with FUSE passthrough; then MEMOFS_E2E_OPTS=passthrough=off, the server's own
# page store), every test binary even after a failure, then one summary (memofs-e2e-summary):
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

# run NAME [VAR=VALUE...]: one `cargo test -p memofs-e2e` with these variables.
run() {
    local name=$1
    shift
    echo "e2e: run $name${*:+ ($*)}"
    env "$@" MEMOFS_E2E_SKIPS="$out/$name.skips" "$CARGO" test -p memofs-e2e --no-fail-fast 2>&1 |
        tee "$out/$name.log"
    echo "${PIPESTATUS[0]}" >"$out/$name.status"
}

run default
run passthrough-off MEMOFS_E2E_OPTS=passthrough=off
exec "$CARGO" run -q -p memofs-e2e --bin memofs-e2e-summary -- "$out"
