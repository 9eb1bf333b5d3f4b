//! memofs inside a user namespace (`unshare -Urm`, as a rootless container runs it): it
//! mounts, serves with the namespace's ids, keeps file data in its page store behind the
//! writeback cache (the namespace's root cannot use FUSE passthrough), reports its stats and
//! unmounts.

use std::path::PathBuf;
use std::time::Duration;

use memofs_e2e::cli::sh;
use memofs_e2e::{memofs_bin, require_mount, skip, which, TempDir};

#[test]
fn memofs_mounts_and_serves_inside_a_user_namespace() {
    require_mount!();
    if which("unshare").is_none() {
        skip!(Tool("unshare"));
    }
    let dir = TempDir::new("memofs-e2e-userns-");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let script = format!(
        r#"M='{bin}'; MNT='{mnt}'
        unshare -Urm --propagation private sh -c '
            trap "\"$0\" umount -l \"$1\" 2>/dev/null || true" EXIT
            set -e
            test "$(id -u)" = 0
            "$0" mount -o size=16m "$1"
            echo data > "$1/f"
            mkdir "$1/d"
            test "$(cat "$1/f")" = data
            test "$(stat -c %u:%g "$1/f")" = 0:0
            test "$(stat -c %u:%g "$1/d")" = 0:0
            s=$("$0" stats --json "$1")
            echo "$s" | grep -q "\"requests\""
            echo "$s" | grep -q "\"file_data\":\"server.pages\""
            echo "$s" | grep -q "\"writeback\":\"true\""
            "$0" umount "$1"
            ! grep -q " $1 " /proc/self/mountinfo
            echo done
        ' "$M" "$MNT""#,
        bin = memofs_bin().display(),
        mnt = mnt.display()
    );
    let probe = sh("unshare -Urm true", None, Duration::from_secs(10));
    if !probe.success() {
        skip!(
            MountNamespace,
            "no user namespaces here: {}",
            probe.stderr.trim()
        );
    }
    let out = sh(&script, None, Duration::from_secs(60));
    out.assert_success();
    assert!(
        out.stdout.contains("done"),
        "{}",
        out.describe("the script")
    );
}

/// The user `scripts/setup.sh` makes for rootless containers (with subordinate ids).
const PODMAN_USER: &str = "memofs-podman";

/// memofs in a rootless podman container given `/dev/fuse` (`--device /dev/fuse --cap-add
/// SYS_ADMIN`, as a container that mounts FUSE filesystems is run): the container's root
/// mounts, serves from the page store behind the writeback cache, reports its stats and
/// unmounts. The container's root filesystem is busybox and the memofs binary with its
/// libraries (no image registry is needed). For the run `/dev/fuse` is opened to users, as
/// Debian's udev leaves it, and put back.
#[test]
fn memofs_serves_in_a_rootless_podman_container() {
    require_mount!();
    for tool in ["podman", "busybox", "su"] {
        if which(tool).is_none() {
            skip!(Tool(tool));
        }
    }
    if !sh(
        &format!("id -u {PODMAN_USER}"),
        None,
        Duration::from_secs(10),
    )
    .success()
    {
        skip!(
            Tool("podman"),
            "no user {PODMAN_USER} (scripts/setup.sh makes it)"
        );
    }
    let home = PathBuf::from(format!("/home/{PODMAN_USER}"));
    let rootfs = home.join(format!("rootfs-{}", std::process::id()));
    let _fuse = DevFuseOpen::for_the_run();
    let script = format!(
        r#"set -e
        R='{rootfs}'; M='{bin}'; U={user}
        rm -rf "$R"; mkdir -p "$R/bin" "$R/dev" "$R/proc" "$R/sys" "$R/tmp" "$R/run" "$R/etc" "$R/m"
        cp "$(command -v busybox)" "$R/bin/busybox"
        for a in sh id cat mkdir stat dd grep test echo ls; do ln -s busybox "$R/bin/$a"; done
        cp "$M" "$R/bin/memofs"
        for l in $(ldd "$M" | grep -o '/[^ ]*'); do mkdir -p "$R$(dirname "$l")"; cp -L "$l" "$R$l"; done
        echo 'root:x:0:0::/:/bin/sh' >"$R/etc/passwd"
        chown -R "$U:$U" "$R"
        su "$U" -s /bin/sh -c "cd && XDG_RUNTIME_DIR= podman --log-level=error --runtime runc \
            --cgroup-manager=cgroupfs --events-backend=file run --rm --network=none \
            --device /dev/fuse --cap-add SYS_ADMIN --security-opt label=disable \
            --rootfs '$R' /bin/sh -c '
                set -e
                test \$(id -u) = 0
                memofs mount -o size=16m /m
                echo data >/m/f
                mkdir /m/d
                test \$(cat /m/f) = data
                test \$(stat -c %u:%g /m/f) = 0:0
                dd if=/dev/zero of=/m/big bs=4k count=1024 conv=fsync 2>/dev/null
                test \$(stat -c %s /m/big) = 4194304
                s=\$(memofs stats --json /m)
                echo \"\$s\" | grep -q \\\"file_data\\\":\\\"server.pages\\\"
                echo \"\$s\" | grep -q \\\"writeback\\\":\\\"true\\\"
                memofs umount /m
                echo done'"
        "#,
        rootfs = rootfs.display(),
        bin = memofs_bin().display(),
        user = PODMAN_USER,
    );
    let out = sh(&script, None, Duration::from_secs(180));
    let _ = std::fs::remove_dir_all(&rootfs);
    // Rootless podman leaves a pause process holding the user's namespaces, and with them a
    // copy of every mount there was when it started: a memofs mounted before would never
    // see its server's end after `memofs umount`. Nothing the test started may outlive it.
    let left = end_processes_of(PODMAN_USER);
    out.assert_success();
    assert!(left.is_empty(), "left running as {PODMAN_USER}: {left}");
    assert!(
        out.stdout.contains("done"),
        "{}",
        out.describe("the container")
    );
}

/// Ends every process of `user` (a user only tests run as) and waits until they are gone;
/// returns what is still there after 10 s (empty when all ended).
fn end_processes_of(user: &str) -> String {
    let left = || {
        sh(
            &format!("pgrep -a -u {user} || true"),
            None,
            Duration::from_secs(10),
        )
    };
    let _ = sh(
        &format!("pkill -KILL -u {user}"),
        None,
        Duration::from_secs(10),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now = left().stdout.trim().to_string();
        if now.is_empty() || std::time::Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `/dev/fuse` readable and writable by every user while it lives (Debian's udev rule makes
/// it so; some hosts leave it 0600), then its mode as it was.
struct DevFuseOpen(Option<u32>);

impl DevFuseOpen {
    fn for_the_run() -> DevFuseOpen {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata("/dev/fuse").unwrap().permissions().mode() & 0o7777;
        if mode & 0o006 == 0o006 {
            return DevFuseOpen(None);
        }
        std::fs::set_permissions("/dev/fuse", std::fs::Permissions::from_mode(mode | 0o666))
            .unwrap();
        DevFuseOpen(Some(mode))
    }
}

impl Drop for DevFuseOpen {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        if let Some(mode) = self.0 {
            let _ = std::fs::set_permissions("/dev/fuse", std::fs::Permissions::from_mode(mode));
        }
    }
}
