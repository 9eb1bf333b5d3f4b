#!/usr/bin/env bash
# attack.sh: the malicious-guest attack (tests/vhost-attack) on `memofs virtiofsd`, as `make
# attack` runs it: the mem backend and a shared directory served by root, with the default
# sandbox and (for the shared directory) without it, then both served by a plain user
# (nobody), guest and server alike unprivileged. Prints each run's PASS/FAIL lines and its
# `attack: N passed, N failed`; exits 1 if any run failed. Environment: CARGO.
set -uo pipefail
cd "$(dirname "$0")/.."
CARGO=${CARGO:-cargo}
"$CARGO" build -q -p memofs -p memofs-vhost-attack || exit 1
attack=$PWD/target/debug/memofs-vhost-attack
memofs=$PWD/target/debug/memofs
failed=0
run() {
    echo "attack run: $*"
    "$@" || failed=1
}
run "$attack" -- "$memofs" virtiofsd --socket-path @SOCKET@
run "$attack" -- "$memofs" virtiofsd --socket-path @SOCKET@ --shared-dir @SHARE@
run "$attack" -- "$memofs" virtiofsd --socket-path @SOCKET@ --shared-dir @SHARE@ --sandbox=none

# As a plain user: the programs where that user can reach them (a checkout in a private
# home directory is out of its reach), and a temporary directory of its own.
as_user=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
if ! "${as_user[@]}" test -x "$attack" || ! "${as_user[@]}" test -x "$memofs"; then
    shared=$(mktemp -d /tmp/memofs-attack-bin.XXXXXX)
    chmod 755 "$shared"
    cp "$attack" "$memofs" "$shared/"
    trap 'rm -rf "$shared"' EXIT
    attack=$shared/memofs-vhost-attack
    memofs=$shared/memofs
fi
tmp=$(mktemp -d /tmp/memofs-attack-user.XXXXXX)
chown nobody:nogroup "$tmp"
run env TMPDIR="$tmp" "${as_user[@]}" "$attack" -- "$memofs" virtiofsd --socket-path @SOCKET@
run env TMPDIR="$tmp" "${as_user[@]}" "$attack" -- "$memofs" virtiofsd --socket-path @SOCKET@ --shared-dir @SHARE@
run env TMPDIR="$tmp" "${as_user[@]}" "$attack" -- "$memofs" virtiofsd --socket-path @SOCKET@ --shared-dir @SHARE@ --sandbox=none
rm -rf "$tmp"
exit $failed
