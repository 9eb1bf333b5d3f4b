#!/usr/bin/env bash
# Reports and ends what a run left behind: processes that still hold the run's output open
# (whoever reads that output would wait for them) and FUSE mounts of memofs or the benchmark
# servers. Usage: leftovers.sh PID, where PID is the run's shell; its own output is the one
# looked for. Exits 0: it cleans up after the run, the run's own status stands.
run=${1:?usage: leftovers.sh PID}
out=$(readlink "/proc/$run/fd/1" 2>/dev/null || true)
err=$(readlink "/proc/$run/fd/2" 2>/dev/null || true)

# This script and the processes it runs under hold the output too, and are not leftovers.
keep=" $$ $run "
p=$$
while [ "$p" -gt 1 ] 2>/dev/null; do
    keep+=" $p "
    p=$(awk '{ print $4 }' "/proc/$p/stat" 2>/dev/null || echo 1)
done

found=()
for dir in /proc/[0-9]*; do
    pid=${dir#/proc/}
    [[ $keep == *" $pid "* ]] && continue
    for fd in 1 2; do
        target=$(readlink "$dir/fd/$fd" 2>/dev/null) || continue
        if [ -n "$target" ] && { [ "$target" = "$out" ] || [ "$target" = "$err" ]; }; then
            found+=("$pid")
            break
        fi
    done
done
for pid in "${found[@]}"; do
    echo "leftovers: process $pid ($(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)) outlived the run; killing it" >&2
    kill -TERM "$pid" 2>/dev/null || true
done
if ((${#found[@]})); then
    sleep 1
    for pid in "${found[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
fi

while read -r _ mnt type _; do
    case $type in
    fuse.memofs | fuse.passthrough* | fuse.bindfs)
        echo "leftovers: $type mount at $mnt outlived the run; detaching it" >&2
        umount -l "$mnt" 2>/dev/null || true
        ;;
    esac
done </proc/self/mounts
exit 0
