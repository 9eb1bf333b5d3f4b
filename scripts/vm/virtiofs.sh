#!/usr/bin/env bash
# virtiofs.sh KERNEL-ID...: boots each pinned kernel (scripts/vm/kernels.tsv) in a QEMU guest
# (TCG) with four vhost-user-fs devices served by `memofs virtiofsd`: `mem` (the mem backend),
# `share` (a host directory, the passthrough backend), `ro` (one shared --readonly,
# -o no_xattr and --cache=always, with a filesystem mounted below it announced to the
# guest) and `ids` (one with translated ids and mapped extended attribute names), guest
# memory shared through memory-backend-memfd. The
# guest (scripts/vm/virtiofs-guest.sh) checks them through ordinary system calls; the host
# checks what the read-only and translated shares hold afterwards, counts the requests of
# the seed's loop (`memofs stats` on the device's socket), changes the shared directory
# under the guest, kills the VM in the middle of writes and checks that the servers end
# cleanly and that what the guest synced is on the host. Prints PASS/FAIL/SKIP lines and `vm-virtiofs-ID: N passed, N failed, N
# skipped`; exit 0 when nothing failed. A guest that cannot run here is skipped, or a
# failure with MEMOFS_VM_REQUIRED=1. Environment as scripts/vm/run.sh (MEMOFS_VM_CACHE,
# MEMOFS_VM_TIMEOUT, CARGO).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
label=vm-virtiofs
# shellcheck source=scripts/vm/common.sh
. "$here/common.sh"
[ $# -gt 0 ] || { echo "usage: scripts/vm/virtiofs.sh KERNEL-ID..." >&2; exit 1; }
memofs=$top/target/debug/memofs

# Waits up to $2 seconds for the file $1 to have a line matching the extended regular
# expression $3 (the serial port ends lines with CR LF).
wait_for() {
    local file=$1 secs=$2 re=$3 i=0
    while ! tr -d '\r' <"$file" 2>/dev/null | grep -qE -- "$re"; do
        [ $i -lt $((secs * 10)) ] || return 1
        sleep 0.1
        i=$((i + 1))
    done
}

# Waits up to 10 s for a socket file.
wait_socket() {
    local i=0
    while [ ! -S "$1" ]; do
        [ $i -lt 100 ] || return 1
        sleep 0.1
        i=$((i + 1))
    done
}

# The servers as the VMM sees them (PASS/FAIL lines): each runs sandboxed, in a child of the
# process started (namespaces of its own, its root the shared directory or an empty one, no
# capabilities but its backend's, no new privileges, a seccomp filter); its socket is 0600
# whatever the umask; a second server on the same socket is refused, naming the first, and
# the first goes on.
sandboxed() {
    local out=$1 mem_pid=$2 share_pid=$3 ro_pid=$4 name pid child st want same_root
    # The --readonly server's root (the shared directory, bound in its own mount namespace)
    # is read-only in the kernel, and so is the mount below it: a write through it from
    # outside, as a compromised server would make one, fails.
    child=$(pgrep -P "$ro_pid" | head -n1)
    for name in "" sub/; do
        st=$(touch "/proc/$child/root/${name}written" 2>&1) && rm -f "/proc/$child/root/${name}written"
        if [ -n "$child" ] && grep -q "Read-only file system" <<<"$st"; then
            echo "PASS sandbox-ro-root-read-only${name:+-submount}"
        else
            echo "FAIL sandbox-ro-root-read-only${name:+-submount}: ${st:-the write went through}"
        fi
    done
    for name in mem share; do
        pid=$([ $name = mem ] && echo "$mem_pid" || echo "$share_pid")
        child=$(pgrep -P "$pid" | head -n1)
        if [ -z "$child" ]; then
            echo "FAIL sandbox-$name: no server process under $pid"
            continue
        fi
        st=$(cat "/proc/$child/status")
        want=$([ $name = mem ] && echo 0000000000000000 || echo 00000000880000df)
        if grep -q '^Seccomp:[[:space:]]*2$' <<<"$st" && grep -q '^NoNewPrivs:[[:space:]]*1$' <<<"$st" &&
            grep -q "^CapEff:[[:space:]]*$want$" <<<"$st" && grep -q "^CapBnd:[[:space:]]*$want$" <<<"$st" &&
            [ "$(readlink "/proc/$child/ns/mnt")" != "$(readlink /proc/self/ns/mnt)" ] &&
            [ "$(readlink "/proc/$child/ns/pid")" != "$(readlink /proc/self/ns/pid)" ]; then
            echo "PASS sandbox-$name-status"
        else
            echo "FAIL sandbox-$name-status: $(grep -E '^(Seccomp|NoNewPrivs|CapEff|CapBnd):' <<<"$st" | tr '\n\t' '  ')"
        fi
        if [ $name = share ]; then
            same_root=$([ "$(stat -Lc %d:%i "/proc/$child/root")" = "$(stat -c %d:%i "$out/share")" ] && echo yes)
        else
            same_root=$([ -z "$(ls -A "/proc/$child/root")" ] && echo yes)
        fi
        if [ "$same_root" = yes ]; then echo "PASS sandbox-$name-root"; else echo "FAIL sandbox-$name-root: $(ls -A "/proc/$child/root" | head -5 | tr '\n' ' ')"; fi
        st=$(stat -c %a "$out/$name.sock")
        if [ "$st" = 600 ]; then echo "PASS socket-$name-private"; else echo "FAIL socket-$name-private: mode $st under umask 000"; fi
    done
    local second status=0
    second=$(timeout 10 "$memofs" virtiofsd --socket-path "$out/mem.sock" 2>&1) || status=$?
    if [ "$status" != 0 ] && [ "$status" != 124 ] && grep -q "pid $mem_pid" <<<"$second" && [ -S "$out/mem.sock" ] &&
        kill -0 "$mem_pid" 2>/dev/null; then
        echo "PASS second-server-refused"
    else
        echo "FAIL second-server-refused: status $status: $second"
    fi
}

# What a guest's root tried on /share/guarded (PASS/FAIL lines): no attribute only the
# host's root may set, no immutable flag; the `sync`s reached the server (each SYNCFS
# answered: one refused makes the kernel stop sending them).
guarded() {
    local out=$1 f=$1/share/guarded attrs syncs
    attrs=$(getfattr --absolute-names -d -m - "$f" 2>/dev/null | grep -E '^(trusted|security)\.' || true)
    if [ -z "$attrs" ]; then echo "PASS host-file-no-privileged-xattr"; else echo "FAIL host-file-no-privileged-xattr: $attrs"; fi
    if lsattr -d "$f" 2>/dev/null | cut -d' ' -f1 | grep -q i; then
        echo "FAIL host-file-not-immutable: $(lsattr -d "$f")"
        chattr -i "$f"
    else
        echo "PASS host-file-not-immutable"
    fi
    syncs=$("$memofs" stats --json "$out/share.sock" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["requests"].get("SYNCFS",{}).get("count",0))')
    if [ "${syncs:-0}" -ge 3 ]; then echo "PASS guest-sync-reaches-host ($syncs SYNCFS)"; else echo "FAIL guest-sync-reaches-host: $syncs SYNCFS for 3 syncs"; fi
}

run_one() {
    local id=$1 out
    find_kernel "$id" || return $(($? == 2 ? 0 : 1))
    out=$top/target/vm/virtiofs-$id
    umount -l "$out/ro/sub" 2>/dev/null || true
    rm -rf "$out"
    mkdir -p "$out/root"/{bin,dev,proc,sys,tmp,etc} "$out/share" "$out/ro" "$out/ids"
    # The read-only share's file, and the translated share: writable by the host id guest
    # 1000 maps to, with a file of that host id's and one of root's.
    echo "kept on the host" >"$out/ro/kept"
    # A filesystem mounted below the read-only share, announced to the guest.
    mkdir "$out/ro/sub"
    mount -t tmpfs -o size=1m memofs-vm-sub "$out/ro/sub"
    echo "in a submount" >"$out/ro/sub/inner"
    chmod 1777 "$out/ids"
    touch "$out/ids/host-owned" "$out/ids/by-root"
    chown 101000:101000 "$out/ids/host-owned"
    setfattr -n user.plain -v host "$out/ids/host-owned"
    cp "$(command -v busybox)" "$out/root/bin/busybox"
    cp "$here/virtiofs-guest.sh" "$out/root/init"
    cp "$here/fs-checks.sh" "$out/root/bin/fs-checks"
    chmod 755 "$out/root/init"
    # The POSIX conformance suite, where the host has it (scripts/setup.sh installs it), with
    # the users it switches to.
    local pjd
    pjd=$(command -v pjdfstest || echo "${HOME:-/root}/.cargo/bin/pjdfstest")
    if [ -x "$pjd" ]; then
        install_binary "$out/root" "$pjd" bin/pjdfstest
        cp tests/e2e/pjdfstest.toml "$out/root/etc/pjdfstest.toml"
    fi
    # What a guest's root tries on host files (busybox has neither): setfattr and chattr.
    local tool
    for tool in setfattr getfattr chattr; do
        if command -v "$tool" >/dev/null; then install_binary "$out/root" "$(command -v "$tool")" "bin/$tool"; fi
    done
    # The modules virtio-fs needs, where this kernel has them as modules (6.1), numbered in
    # the order they load.
    local n=0 m ko
    mkdir -p "$out/root/lib/modules"
    for m in fuse virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci virtiofs; do
        n=$((n + 1))
        ko=$(find "$kdir" -name "$m.ko*" | head -n1)
        case "$ko" in
            "") ;;
            *.xz) xz -dc "$ko" >"$out/root/lib/modules/$n-$m.ko" ;;
            *.zst) zstd -qdc "$ko" >"$out/root/lib/modules/$n-$m.ko" ;;
            *) cp "$ko" "$out/root/lib/modules/$n-$m.ko" ;;
        esac
    done
    printf 'root:x:0:0:root:/:/bin/sh\ndaemon:x:1:1::/:/bin/false\nuser:x:1000:1000::/:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n' >"$out/root/etc/passwd"
    printf 'root:x:0:\ndaemon:x:1:\nuser:x:1000:\nnogroup:x:65534:\n' >"$out/root/etc/group"
    (cd "$out/root" && find . | cpio -o -H newc --quiet) >"$out/initrd.cpio"
    : >"$out/output.log"

    # Started as a VMM starts virtiofsd, with the default sandbox, under a umask that would
    # let anyone connect to a socket that followed it.
    (umask 000 && exec "$memofs" virtiofsd --socket-path "$out/mem.sock") >"$out/mem.log" 2>&1 &
    local mem_pid=$!
    (umask 000 && exec "$memofs" virtiofsd --socket-path "$out/share.sock" --shared-dir "$out/share") >"$out/share.log" 2>&1 &
    local share_pid=$!
    "$memofs" virtiofsd --socket-path "$out/ro.sock" --shared-dir "$out/ro" --readonly -o no_xattr --cache=always >"$out/ro.log" 2>&1 &
    local ro_pid=$!
    "$memofs" virtiofsd --socket-path "$out/ids.sock" --shared-dir "$out/ids" \
        --translate-uid map:1000:101000:1 --translate-gid map:1000:101000:1 \
        --translate-uid forbid-guest:3000:1 --xattrmap ':map:security.:user.virtiofs.:' >"$out/ids.log" 2>&1 &
    local ids_pid=$!
    # Nothing outlives the run, however it ends.
    # (Expanded now: these are this run's.)
    # shellcheck disable=SC2064
    trap "kill -KILL $mem_pid $share_pid $ro_pid $ids_pid 2>/dev/null || true; pkill -KILL -f '$out/initrd.cpio' 2>/dev/null || true; umount -l '$out/ro/sub' 2>/dev/null || true" EXIT
    wait_socket "$out/mem.sock" && wait_socket "$out/share.sock" && wait_socket "$out/ro.sock" &&
        wait_socket "$out/ids.sock" || {
        echo "FAIL vm-virtiofs $id: the servers did not listen"
        kill $mem_pid $share_pid $ro_pid $ids_pid 2>/dev/null
        echo "vm-virtiofs-$id: 0 passed, 1 failed, 0 skipped"
        return 1
    }
    local host=$out/host.log
    : >"$host"
    sandboxed "$out" $mem_pid $share_pid $ro_pid >>"$host"
    echo "vm-virtiofs $id: booting $(basename "$kernel") (QEMU TCG; log in $out)" >&2
    timeout -k 10 "$limit" qemu-system-x86_64 -accel tcg -cpu max -smp 1 -m 1G \
        -nodefaults -no-reboot -display none -nic none \
        -object memory-backend-memfd,id=mem,size=1G,share=on -numa node,memdev=mem \
        -chardev socket,id=c0,path="$out/mem.sock" \
        -device vhost-user-fs-pci,queue-size=1024,num-request-queues=2,chardev=c0,tag=mem \
        -chardev socket,id=c1,path="$out/share.sock" \
        -device vhost-user-fs-pci,queue-size=1024,chardev=c1,tag=share \
        -chardev socket,id=c2,path="$out/ro.sock" \
        -device vhost-user-fs-pci,queue-size=1024,chardev=c2,tag=ro \
        -chardev socket,id=c3,path="$out/ids.sock" \
        -device vhost-user-fs-pci,queue-size=1024,chardev=c3,tag=ids \
        -kernel "$kernel" -initrd "$out/initrd.cpio" \
        -append "console=ttyS0 panic=-1 loglevel=4" \
        -serial "file:$out/console.log" -serial "file:$out/output.log" \
        >"$out/qemu.log" 2>&1 </dev/null &
    local qemu=$!
    # Kills the guest: QEMU itself, not only the `timeout` watching it.
    kill_guest() { pkill -KILL -P "$qemu" 2>/dev/null || true; kill -KILL "$qemu" 2>/dev/null || true; }
    # What the read-only and translated shares hold on the host once the guest is done.
    if wait_for "$out/output.log" "$limit" "^@@ IDS DONE$"; then
        local ro_now owners
        ro_now=$(cd "$out/ro" && ls -A | tr '\n' ' ')$(cat "$out/ro/kept")
        if [ "$ro_now" = "kept sub kept on the host" ]; then echo "PASS ro-host-unchanged"; else echo "FAIL ro-host-unchanged: $ro_now"; fi >>"$host"
        owners=$(stat -c %u:%g "$out/ids/by-user" "$out/ids/by-root" 2>&1 | tr '\n' ' ')
        if [ "$owners" = "101000:101000 101000:101000 " ]; then
            echo "PASS ids-host-owners"
        else
            echo "FAIL ids-host-owners: by-user, by-root: $owners"
        fi >>"$host"
        if command -v getfattr >/dev/null; then
            local mapped
            mapped=$(getfattr --absolute-names --only-values -n user.virtiofs.security.memofs "$out/ids/by-root" 2>&1)
            if [ "$mapped" = guest ] && ! getfattr --absolute-names -n security.memofs "$out/ids/by-root" >/dev/null 2>&1; then
                echo "PASS xattrmap-host-name"
            else
                echo "FAIL xattrmap-host-name: user.virtiofs.security.memofs is '$mapped'"
            fi >>"$host"
        fi
    else
        echo "FAIL ro-ids: the guest never got to them" >>"$host"
    fi
    # A guest's root tried what only the host's root may do: the host file is as it was.
    if wait_for "$out/output.log" "$limit" "^@@ GUARDED$"; then
        guarded "$out" >>"$host"
        touch "$out/share/guard-checked"
    else
        echo "FAIL guarded: the guest never got to it" >>"$host"
    fi
    # Requests of the given kinds device DEVICE's server counted: requests DEVICE KIND...
    requests() {
        local device=$1
        shift
        "$memofs" stats --json "$out/$device.sock" |
            python3 -c 'import json,sys; r=json.load(sys.stdin)["requests"]; print(sum(r.get(k,{}).get("count",0) for k in sys.argv[1:]))' "$@"
    }
    # The seed's loop: the guest answers repeated misses itself. LOOKUPs the mem device's
    # server counted before the loop and after it.
    lookups() { requests mem LOOKUP; }
    local before after
    if wait_for "$out/output.log" "$limit" "^@@ LOOK$"; then
        # --cache=always on the ro device: four listings in the guest, one OPENDIR at most
        # (declined once) and no RELEASEDIR.
        after=$(requests ro OPENDIR RELEASEDIR)
        if [ -n "$after" ] && [ "$after" -le 1 ]; then
            echo "PASS ro-listings-without-opendir ($after OPENDIR and RELEASEDIR for 4 listings)" >>"$host"
        else
            echo "FAIL ro-listings-without-opendir: '$after' OPENDIR and RELEASEDIR for 4 listings" >>"$host"
        fi
        # -o no_xattr on the ro device: five getxattrs and five listxattrs in the guest, one
        # request of each kind at most (the kernel remembers ENOSYS).
        after=$(requests ro GETXATTR LISTXATTR)
        if ! command -v getfattr >/dev/null; then
            echo "SKIP ro-no-xattr-requests: no getfattr on the host for the guest (scripts/setup.sh installs it)" >>"$host"
        elif [ -n "$after" ] && [ "$after" -ge 1 ] && [ "$after" -le 2 ]; then
            echo "PASS ro-no-xattr-requests ($after GETXATTR and LISTXATTR requests for 10 calls)" >>"$host"
        else
            echo "FAIL ro-no-xattr-requests: '$after' GETXATTR and LISTXATTR requests for 10 calls" >>"$host"
        fi
        before=$(lookups)
        touch "$out/share/go-look"
        if wait_for "$out/output.log" 300 "^@@ LOOKED 10000$"; then
            after=$(lookups)
            if [ -z "$before" ] || [ -z "$after" ]; then
                echo "FAIL seed-loop-lookups: memofs stats gave no LOOKUP count ('$before', '$after')" >>"$host"
            elif [ $((after - before)) -le 2 ]; then
                echo "PASS seed-loop-lookups ($((after - before)) LOOKUPs for 10000 lookups of a missing name)" >>"$host"
            else
                echo "FAIL seed-loop-lookups: $((after - before)) LOOKUPs reached the server" >>"$host"
            fi
        else
            echo "FAIL seed-loop: the guest never finished it" >>"$host"
        fi
    else
        echo "FAIL seed-loop: the guest never got to it" >>"$host"
    fi
    # Host-side changes under the guest.
    if wait_for "$out/output.log" 120 "^@@ SHARE READY$"; then
        echo "made on the host" >"$out/share/host-made"
        rm -f "$out/share/to-delete"
        touch "$out/share/host-done"
    fi
    # The guest dies in the middle of writes.
    local synced
    if wait_for "$out/output.log" 120 "^@@ SYNCED "; then
        synced=$(tr -d '\r' <"$out/output.log" | awk '$1 == "@@" && $2 == "SYNCED" { print $3 }')
        sleep 1
        kill_guest
        if [ "$(md5sum <"$out/share/synced" | cut -d' ' -f1)" = "$synced" ]; then
            echo "PASS synced-data-on-host" >>"$host"
        else
            echo "FAIL synced-data-on-host: the host's file differs from what the guest synced" >>"$host"
        fi
    else
        echo "FAIL synced: the guest never synced" >>"$host"
        kill_guest
    fi
    wait $qemu 2>/dev/null || true
    local status pid name
    for name in mem share ro ids; do
        case $name in mem) pid=$mem_pid ;; share) pid=$share_pid ;; ro) pid=$ro_pid ;; ids) pid=$ids_pid ;; esac
        status=0
        timeout 30 tail --pid="$pid" -f /dev/null || { kill -KILL "$pid" 2>/dev/null; status=timeout; }
        [ "$status" = timeout ] || { wait "$pid"; status=$?; } || true
        if [ "$status" = 0 ]; then
            echo "PASS server-$name-ends-cleanly" >>"$host"
        else
            echo "FAIL server-$name-ends-cleanly: status $status; log: $(tail -n 3 "$out/$name.log")" >>"$host"
        fi
    done
    umount -l "$out/ro/sub" 2>/dev/null || true
    tr -d '\r' <"$out/output.log" >"$out/guest.log"
    cat "$out/guest.log" "$host" | grep -E '^(PASS|FAIL|SKIP)' |
        sed "s/^\(PASS\|FAIL\|SKIP\) /\1 virtiofs-$id /"
    local npass nfail nskip
    npass=$(cat "$out/guest.log" "$host" | grep -c '^PASS' || true)
    nfail=$(cat "$out/guest.log" "$host" | grep -c '^FAIL' || true)
    nskip=$(cat "$out/guest.log" "$host" | grep -c '^SKIP' || true)
    if ! grep -q '^@@ BEGIN' "$out/output.log"; then
        echo "FAIL virtiofs-$id guest-booted: no output (see $out/console.log)"
        nfail=$((nfail + 1))
    fi
    echo "vm-virtiofs-$id: $npass passed, $nfail failed, $nskip skipped"
    [ "$nfail" = 0 ]
}

echo "vm-virtiofs: building memofs" >&2
"$CARGO" build -q -p memofs >&2
failed=0
for id in "$@"; do
    run_one "$id" || failed=1
done
exit $failed
