#!/usr/bin/env bash
# unit.sh: the crates' own tests as `make unit` runs them (no mount): `cargo test` of every
# crate but the e2e suite, then the summary the e2e suite uses (memofs-e2e-summary DIR unit).
# A test that cannot run here (the kernel-backed store needs root, ...) records its skip like an
# e2e test (tests/e2e/src/skip.rs) and counts as skipped, or as failed when its capability is
# required (MEMOFS_E2E_REQUIRE minus MEMOFS_E2E_LACKS, see tests/e2e/src/summary.rs). Output,
# exit status and skip records are kept in target/unit/. Environment: CARGO.
set -uo pipefail
cd "$(dirname "$0")/.."
CARGO=${CARGO:-cargo}
out=$PWD/target/unit
rm -rf "$out"
mkdir -p "$out"
echo "unit: cargo test --workspace --exclude memofs-e2e"
MEMOFS_E2E_SKIPS="$out/crates.skips" "$CARGO" test --workspace --exclude memofs-e2e 2>&1 |
    tee "$out/crates.log"
echo "${PIPESTATUS[0]}" >"$out/crates.status"
exec "$CARGO" run -q -p memofs-e2e --bin memofs-e2e-summary -- "$out" unit
