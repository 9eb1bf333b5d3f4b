#!/usr/bin/env bash
# attack.sh: the malicious-guest attack (tests/vhost-attack) on `memofs virtiofsd`, as `make
# attack` runs it: the mem backend and a shared directory served by root, with the default
# sandbox, and the shared directory in chroot mode and without a sandbox, then both served by a plain user
# (nobody), guest and server alike unprivileged. Prints each run's PASS/FAIL lines and its
# `attack: N passed, N failed`; exits 1 if any run failed. Environment: CARGO.
set -uo pipefail
source "$(dirname "$0")/vhost-common.sh"
attack=$PWD/target/debug/memofs-vhost-attack
run "$attack" -- "$memofs" virtiofsd --socket-path @SOCKET@
run "$attack" -- "$memofs" virtiofsd --socket-path @SOCKET@ --shared-dir @SHARE@
run "$attack" -- "$memofs" virtiofsd --socket-path @SOCKET@ --shared-dir @SHARE@ --sandbox=chroot
run "$attack" -- "$memofs" virtiofsd --socket-path @SOCKET@ --shared-dir @SHARE@ --sandbox=none

attack=$(user_bin memofs-vhost-attack)
memofs=$(user_bin memofs)
run as_user "$attack" -- "$memofs" virtiofsd --socket-path @SOCKET@
run as_user "$attack" -- "$memofs" virtiofsd --socket-path @SOCKET@ --shared-dir @SHARE@
run as_user "$attack" -- "$memofs" virtiofsd --socket-path @SOCKET@ --shared-dir @SHARE@ --sandbox=none
exit $failed
