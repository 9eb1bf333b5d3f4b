//! `memofs stats` and `memofs invalidate` where the server can make no control socket file
//! (no writable `/run`, as in a guest or a minimal container): the mount tells its abstract
//! socket to root and the server's user, and to nobody else.

use std::fs;
use std::time::Duration;

use memofs_e2e::cli::sh;
use memofs_e2e::{memofs_bin, require_mount, skip, which, TempDir, UnmountGuard};

/// Runs `script` as root in a mount namespace of its own whose `/run` is an empty read-only
/// tmpfs, with `$M` the memofs binary and `$MNT` a mount point (unmounted on the way out);
/// it must succeed and print `done`. Skips the running test where no such namespace can be
/// made.
fn without_run(script: &str) {
    let dir = TempDir::new("memofs-e2e-control-");
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let _guard = UnmountGuard(mnt.clone());
    let whole = format!(
        "M='{}'; MNT='{}'; trap '\"$M\" umount -l \"$MNT\" 2>/dev/null || true' EXIT; \
         mount -t tmpfs -o ro,size=1m tmpfs /run || exit 99; set -e; {script}",
        memofs_bin().display(),
        mnt.display()
    );
    let quoted = whole.replace('\'', r"'\''");
    let out = sh(
        &format!("unshare -m --propagation private sh -c '{quoted}'"),
        None,
        Duration::from_secs(60),
    );
    if out.code() == Some(99) {
        skip!(
            MountNamespace,
            "cannot mount a read-only tmpfs over /run here"
        );
    }
    out.assert_success();
    assert!(
        out.stdout.contains("done"),
        "{}",
        out.describe("the script")
    );
}

#[test]
fn stats_and_invalidate_work_without_a_writable_run() {
    require_mount!();
    if which("unshare").is_none() {
        skip!(Tool("unshare"));
    }
    without_run(
        r#"
        "$M" mount -o size=16m "$MNT"
        echo data > "$MNT/f"
        test ! -e /run/memofs
        "$M" stats --json "$MNT" > /tmp/memofs-e2e-control-stats.$$
        grep -q '"requests"' /tmp/memofs-e2e-control-stats.$$
        grep -q '"bytes_used"' /tmp/memofs-e2e-control-stats.$$
        rm -f /tmp/memofs-e2e-control-stats.$$
        "$M" invalidate "$MNT"
        "$M" umount "$MNT"
        ! grep -q " $MNT " /proc/self/mountinfo
        echo done
        "#,
    );
}

#[test]
fn another_user_cannot_learn_or_reach_the_abstract_control_socket() {
    require_mount!();
    for tool in ["unshare", "setpriv"] {
        if which(tool).is_none() {
            skip!(Tool(tool));
        }
    }
    without_run(
        r#"
        "$M" mount -o size=16m,allow_other "$MNT"
        "$M" stats "$MNT" > /dev/null
        if setpriv --reuid=nobody --regid=nogroup --clear-groups "$M" stats "$MNT" 2> /tmp/memofs-e2e-control-err.$$; then
            echo "another user read the stats"; exit 1
        fi
        grep -q "only root and the mount's owner" /tmp/memofs-e2e-control-err.$$
        rm -f /tmp/memofs-e2e-control-err.$$
        "$M" umount "$MNT"
        echo done
        "#,
    );
}
