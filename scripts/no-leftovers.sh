#!/usr/bin/env bash
# no-leftovers.sh start STAMP | check STAMP: the first and last steps of `make test`.
#   start  writes the time (seconds since boot) and the run's mark, $MEMOFS_TEST_RUN (the
#          Makefile sets it and exports it, so every process the tests start inherits it),
#          to STAMP
#   check  fails, naming them, if processes the tests started are still running: any process
#          of the users only tests run as, and any process started after STAMP that runs one
#          of the programs the tests start (a memofs server, a guest, a container runtime and
#          its pause process, a benchmark's peer server) with the run's mark in its
#          environment. It ends them too, so that the next run starts clean, but the failure
#          stands: a leftover is a bug in the test that left it. Such a program without the
#          mark (a user's own mount, other work on the machine) is named and left alone.
set -euo pipefail
what=${1:?usage: no-leftovers.sh start|check STAMP}
stamp=${2:?usage: no-leftovers.sh start|check STAMP}
# Users that exist for the tests alone (scripts/setup.sh makes them).
TEST_USERS=(memofs-podman)
# What the tests and the harness's smoke runs start (comm names, at most 15 characters).
PROGRAMS='^(memofs|memofs-virtiof|mount.memofs|qemu-system-x86|virtiofsd|passthrough_hp|passthrough_ll|bindfs|podman|conmon|catatonit|runc|weed|juicefs|redis-server|fsstress|pjdfstest)$'

case $what in
start)
    [ -n "${MEMOFS_TEST_RUN:-}" ] || { echo "no-leftovers: MEMOFS_TEST_RUN is not set (make test sets it)" >&2; exit 2; }
    mkdir -p "$(dirname "$stamp")"
    echo "$(awk '{ print $1 }' /proc/uptime) $MEMOFS_TEST_RUN" >"$stamp"
    exit 0
    ;;
check) ;;
*) echo "usage: no-leftovers.sh start|check STAMP" >&2; exit 2 ;;
esac

read -r since mark <"$stamp" 2>/dev/null || { since=0; mark=; }
[ -n "$mark" ] || { echo "no-leftovers: $stamp has no run mark (run start first)" >&2; exit 2; }
hz=$(getconf CLK_TCK)
declare -A test_uid=()
for u in "${TEST_USERS[@]}"; do
    uid=$(id -u "$u" 2>/dev/null) && test_uid[$uid]=$u
done

left=()
for dir in /proc/[0-9]*; do
    pid=${dir#/proc/}
    [ "$pid" = $$ ] && continue
    stat=$(cat "$dir/stat" 2>/dev/null) || continue
    comm=$(cat "$dir/comm" 2>/dev/null) || continue
    # The fields after the command name, which may hold spaces: field 22 is the start time.
    rest=${stat##*) }
    read -r -a f <<<"$rest"
    # An exited process its parent has not reaped yet (PID 1 here may never reap orphans)
    # holds nothing and can be ended by nobody.
    [ "${f[0]}" = Z ] && continue
    started=$((f[19] / hz))
    uid=$(awk '/^Uid:/ { print $2 }' "$dir/status" 2>/dev/null) || continue
    if [ -n "${test_uid[$uid]:-}" ]; then
        left+=("$pid")
    elif [[ $comm =~ $PROGRAMS ]] && awk -v s="$started" -v t="$since" 'BEGIN { exit !(s >= int(t)) }'; then
        env=$(tr '\0' '\n' <"$dir/environ" 2>/dev/null) || env=
        if grep -qxF "MEMOFS_TEST_RUN=$mark" <<<"$env"; then
            left+=("$pid")
        else
            echo "no-leftovers: process $pid ($comm) started during the tests but not by them: left alone"
        fi
    fi
done

((${#left[@]})) || { echo "no-leftovers: no process of the tests is left"; exit 0; }
for pid in "${left[@]}"; do
    echo "no-leftovers: process $pid ($(cat "/proc/$pid/comm" 2>/dev/null), user $(stat -c %U "/proc/$pid" 2>/dev/null), parent $(awk '{ print $4 }' "/proc/$pid/stat" 2>/dev/null): $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)) outlived the tests" >&2
done
kill -KILL "${left[@]}" 2>/dev/null || true
exit 1
