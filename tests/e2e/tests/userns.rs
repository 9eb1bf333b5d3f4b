//! memofs inside a user namespace (`unshare -Urm`, as a rootless container runs it): it
//! mounts, serves with the namespace's ids, keeps file data in its page store behind the
//! writeback cache (the namespace's root cannot use FUSE passthrough), reports its stats and
//! unmounts.

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
            echo "$s" | grep -q "\"file_data\":\"server pages\""
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
