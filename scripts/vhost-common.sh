# vhost-common.sh: what scripts/attack.sh and scripts/migrate.sh share, sourced by both: the
# build, `run` (runs a command, remembers a failure in $failed), and a plain user's copies
# of the programs and a temporary directory of its own. Environment: CARGO.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
CARGO=${CARGO:-cargo}
"$CARGO" build -q -p memofs -p memofs-vhost-attack || exit 1
memofs=$PWD/target/debug/memofs
failed=0
run() {
    echo "run: $*"
    "$@" || failed=1
}

# As a plain user: `as_user CMD...` runs CMD as nobody with TMPDIR its own. `user_bin NAME`
# prints where that user reaches target/debug/NAME (a checkout in a private home directory
# is out of its reach: then a copy in a directory of its own).
user_tmp=$(mktemp -d /tmp/memofs-vhost-user.XXXXXX)
user_shared=$(mktemp -d /tmp/memofs-vhost-bin.XXXXXX)
trap 'rm -rf "$user_tmp" "$user_shared"' EXIT
chown nobody:nogroup "$user_tmp"
chmod 755 "$user_shared"
as_user() {
    env TMPDIR="$user_tmp" setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"
}
user_bin() {
    local bin=$PWD/target/debug/$1
    if as_user test -x "$bin"; then
        echo "$bin"
    else
        cp "$bin" "$user_shared/" && echo "$user_shared/$1"
    fi
}
