# common.sh: what the guest-VM runners (run.sh, virtiofs.sh) share; sourced with `here` set
# to scripts/vm and `label` to what a guest is reported as (vm, vm-virtiofs). Works from the
# repository's top; sets CARGO, limit (MEMOFS_VM_TIMEOUT) and required (MEMOFS_VM_REQUIRED).
top=$(cd "$here/../.." && pwd)
cd "$top"
CARGO=${CARGO:-cargo}
limit=${MEMOFS_VM_TIMEOUT:-600}
required=${MEMOFS_VM_REQUIRED:-0}

# A guest that cannot run: skipped here, a failure where it is required.
cannot() {
    local id=$1
    shift
    if [ "$required" = 1 ]; then
        echo "FAIL $label $id: cannot run the guest: $*"
        echo "$label-$id: 0 passed, 1 failed, 0 skipped"
        return 1
    fi
    echo "SKIP $label $id: cannot run the guest here: $*"
    echo "$label-$id: 0 passed, 0 failed, 1 skipped"
}

# Finds guest `id`'s kernel (QEMU and busybox checked first): sets `kdir` to the unpacked
# package and `kernel` to its image. Returns 0; or, having reported why, 2 when the guest is
# skipped, 1 when that is a failure.
find_kernel() {
    local id=$1 got=0
    kernel=
    command -v qemu-system-x86_64 >/dev/null ||
        { cannot "$id" "qemu-system-x86_64 is not installed (bash scripts/setup.sh installs it)" && return 2 || return 1; }
    command -v busybox >/dev/null ||
        { cannot "$id" "busybox is not installed (apt-get install busybox-static)" && return 2 || return 1; }
    kdir=$("$here/fetch.sh" "$id") || got=$?
    case $got in
        0) ;;
        2) cannot "$id" "the kernel package could not be fetched (see above)" && return 2 || return 1 ;;
        *) echo "$label-$id: 0 passed, 1 failed, 0 skipped"; return 1 ;;
    esac
    kernel=$(find "$kdir" -name 'vmlinuz*' -type f | head -n1)
    [ -n "$kernel" ] ||
        { cannot "$id" "no vmlinuz in the package unpacked at $kdir" && return 2 || return 1; }
}

# Copies `bin` into the initramfs tree `root` as `dest`, stripped, with the libraries ldd lists.
install_binary() {
    local root=$1 bin=$2 dest=$3
    mkdir -p "$root/$(dirname "$dest")"
    strip --strip-debug -o "$root/$dest" "$bin"
    ldd "$bin" 2>/dev/null | grep -o '/[^ ]*' | while read -r lib; do
        [ -e "$root$lib" ] || cp -L --parents "$lib" "$root"
    done
}
