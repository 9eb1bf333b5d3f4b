#!/usr/bin/env bash
# migrate.sh: live migration of `memofs virtiofsd` (tests/vhost-attack's memofs-vhost-migrate),
# as `make migrate` runs it: a guest's mem filesystem of 10 000 files and 1 GiB moved from one
# server to another mid-stream, served by root (data in the kernel-backed store, default
# sandbox) and by a plain user (nobody: the server's page store); and a guest of a shared
# directory (2 000 files, 64 MiB) whose files the destination finds again, by path (as root
# and as nobody) and by file handle (root). Prints each run's PASS/FAIL lines; exits 1 if
# any run failed. Environment: CARGO.
set -uo pipefail
source "$(dirname "$0")/vhost-common.sh"
run "$PWD/target/debug/memofs-vhost-migrate" -- "$memofs" virtiofsd --socket-path @SOCKET@
run as_user "$(user_bin memofs-vhost-migrate)" -- "$(user_bin memofs)" virtiofsd --socket-path @SOCKET@
shared=(--files 2000 --mib 64)
run "$PWD/target/debug/memofs-vhost-migrate" "${shared[@]}" -- "$memofs" virtiofsd --socket-path @SOCKET@ --shared-dir @SHARE@ --migration-verify-handles
run "$PWD/target/debug/memofs-vhost-migrate" "${shared[@]}" -- "$memofs" virtiofsd --socket-path @SOCKET@ --shared-dir @SHARE@ --migration-mode file-handles
run as_user "$(user_bin memofs-vhost-migrate)" "${shared[@]}" -- "$(user_bin memofs)" virtiofsd --socket-path @SOCKET@ --shared-dir @SHARE@
exit $failed
