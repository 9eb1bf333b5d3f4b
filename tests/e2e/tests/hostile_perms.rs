//! Hostile local users against permissions on an `allow_other` mount: set-user-ID and
//! set-group-ID bits that must not survive a user's write (also when the kernel passes the
//! write straight to the data), host POSIX ACLs on a passthrough export, permissions changed
//! through a hard link outside the export, hard links charged against `nr_inodes=`, and the
//! control socket, which only the mount's owner and root may reach.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use memofs_e2e::checks::{both_backends, eventually, export_tmpfs, rss_bytes};
use memofs_e2e::user::{as_user, USER1};
use memofs_e2e::{assert_errno, memofs, ok, require_mount, run, skip, sys, which, Mount};

/// A user opens a file for writing while it is `0666`; root then makes it set-user-ID and
/// set-group-ID; the user writes through the descriptor it holds. As on any Linux
/// filesystem, the write must clear both bits, through whichever path the data takes
/// (FUSE passthrough included), and the mount must show them gone at once.
#[test]
fn setuid_and_setgid_do_not_survive_a_users_write() {
    require_mount!();
    for t in both_backends(&[]) {
        let (name, m, host) = (t.name, &t.m, &t.host);
        let f = m.join("prog");
        ok!(fs::write(&f, b"#!/bin/sh\n"));
        ok!(sys::chmod(&f, 0o666));
        let (opened_tx, opened_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let writer = {
            let f = f.clone();
            std::thread::spawn(move || {
                as_user(USER1.0, USER1.1, &[], move || {
                    let mut fd = ok!(OpenOptions::new().write(true).open(&f));
                    opened_tx.send(()).unwrap();
                    go_rx.recv().unwrap();
                    ok!(fd.write_all(b"echo written by a user\n"));
                })
            })
        };
        opened_rx.recv().unwrap();
        ok!(sys::chmod(&f, 0o6775));
        assert_eq!(
            ok!(fs::metadata(&f)).mode() & 0o7777,
            0o6775,
            "{name}: root's chmod"
        );
        go_tx.send(()).unwrap();
        writer.join().unwrap();
        let mode = ok!(fs::metadata(&f)).mode() & 0o7777;
        assert_eq!(
            mode & 0o6000,
            0,
            "{name}: setuid/setgid survived a user's write (mode {mode:o})"
        );
        if let Some(h) = host {
            let on_host = ok!(fs::metadata(h.join("export/prog"))).mode() & 0o7777;
            assert_eq!(on_host & 0o6000, 0, "{name}: host file mode {on_host:o}");
        }
        // Root's own write leaves a set-user-ID file as it is on the mount's word.
        ok!(sys::chmod(&f, 0o4755));
        assert_eq!(ok!(fs::metadata(&f)).mode() & 0o7777, 0o4755, "{name}");
    }
}

/// `setfacl` on the host, as a user would run it.
fn setfacl(args: &[&str]) {
    let out = run("setfacl", args, None, Duration::from_secs(10));
    assert!(out.success(), "{}", out.describe("setfacl"));
}

/// An ACL on the host that refuses a user is refused through the export too.
#[test]
fn host_acls_hold_through_the_export() {
    require_mount!();
    if which("setfacl").is_none() {
        skip!(Tool("setfacl"));
    }
    let (host, m) = export_tmpfs("export", &["size=16m"], &["allow_other"]);
    let (file, dir) = (host.join("export/file"), host.join("export/dir"));
    ok!(fs::write(&file, b"not for user1"));
    ok!(sys::chmod(&file, 0o644));
    ok!(fs::create_dir(&dir));
    ok!(fs::write(dir.join("inside"), b"x"));
    ok!(sys::chmod(&dir, 0o755));
    let deny = format!("u:{}:---", USER1.0);
    setfacl(&["-m", &deny, file.to_str().unwrap()]);
    setfacl(&["-m", &deny, dir.to_str().unwrap()]);
    let (file, dir) = (m.join("file"), m.join("dir"));
    as_user(USER1.0, USER1.1, &[], move || {
        assert_errno!(
            fs::read(&file),
            libc::EACCES,
            "reading a file the ACL refuses"
        );
        assert_errno!(
            fs::read_dir(&dir).map(drop),
            libc::EACCES,
            "listing a directory the ACL refuses"
        );
    });
    // Another user, whom no ACL entry names, still reads by the mode bits.
    let other = m.join("file");
    as_user(USER1.0 + 1, USER1.1 + 1, &[], move || {
        assert_eq!(ok!(fs::read(&other)), b"not for user1");
    });
}

/// Root changes a file's mode through its other name, outside a subdirectory export (where
/// the watcher does not look): a user who could read it must be refused at the next open.
#[test]
fn permissions_changed_through_an_outside_link_hold_at_once() {
    require_mount!();
    let (host, m) = export_tmpfs("export", &["size=16m"], &["allow_other"]);
    let inside = host.join("export/shared");
    let outside = host.join("other-name");
    ok!(fs::write(&inside, b"public for now"));
    ok!(sys::chmod(&inside, 0o644));
    ok!(fs::hard_link(&inside, &outside));
    let through = m.join("shared");
    {
        let through = through.clone();
        as_user(USER1.0, USER1.1, &[], move || {
            assert_eq!(ok!(fs::read(&through)), b"public for now");
        });
    }
    ok!(sys::chmod(&outside, 0o600));
    ok!(fs::write(&outside, b"secret now"));
    as_user(USER1.0, USER1.1, &[], move || {
        assert_errno!(fs::read(&through), libc::EACCES, "read after chmod 600");
    });
}

/// `trusted.*` attributes are root's: a user does not see their names.
#[test]
fn trusted_xattr_names_are_hidden_from_users() {
    require_mount!();
    for t in both_backends(&[]) {
        let (name, m) = (t.name, &t.m);
        let f = m.join("f");
        ok!(fs::write(&f, b"x"));
        ok!(sys::setxattr(&f, "trusted.secret", b"v", 0));
        ok!(sys::setxattr(&f, "user.visible", b"v", 0));
        let root_sees = ok!(sys::listxattr(&f));
        assert!(
            root_sees.iter().any(|n| n == "trusted.secret"),
            "{name}: root"
        );
        as_user(USER1.0, USER1.1, &[], move || {
            let names = ok!(sys::listxattr(&f));
            assert!(
                !names.iter().any(|n| n.starts_with("trusted.")),
                "{name}: a user sees {names:?}"
            );
            assert!(
                names.iter().any(|n| n == "user.visible"),
                "{name}: {names:?}"
            );
        });
    }
}

/// As on tmpfs, every hard link beyond a file's first name takes an inode of `nr_inodes=`,
/// and removing it gives the inode back.
#[test]
fn hard_links_are_charged_against_nr_inodes() {
    require_mount!();
    let m = Mount::memofs(&["allow_other", "nr_inodes=40"]);
    ok!(sys::chmod(m.path(), 0o1777));
    let root = m.path().to_path_buf();
    as_user(USER1.0, USER1.1, &[], move || {
        let f = root.join("f");
        ok!(fs::write(&f, b"x"));
        let mut links = 0;
        loop {
            match fs::hard_link(&f, root.join(format!("l{links}"))) {
                Ok(()) => links += 1,
                Err(e) => {
                    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "link #{links}: {e}");
                    break;
                }
            }
            assert!(links < 100, "100 links on a mount of 40 inodes");
        }
        assert!(links >= 30, "only {links} links on a mount of 40 inodes");
        // Full: nothing new fits; deleting links makes room again.
        assert_errno!(fs::write(root.join("new"), b"y"), libc::ENOSPC);
        for i in 0..links {
            ok!(fs::remove_file(root.join(format!("l{i}"))));
        }
        eventually(
            "room after deleting the links",
            Duration::from_secs(5),
            || (fs::write(root.join("new"), b"y").is_ok(), ()),
        );
    });
}

/// The control socket: a user cannot read `memofs stats` of root's mount, nor take the
/// socket's place, nor redirect `memofs umount`.
#[test]
fn the_control_socket_belongs_to_the_mount() {
    require_mount!();
    let m = Mount::memofs(&["allow_other"]);
    let mnt = m.path().to_str().unwrap().to_string();
    let dev = ok!(fs::metadata(m.path())).dev();
    let sock = PathBuf::from(format!("/run/memofs/{dev}.sock"));
    assert!(
        sock.exists(),
        "the socket of a root server is {}",
        sock.display()
    );
    assert_eq!(ok!(fs::metadata(&sock)).permissions().mode() & 0o777, 0o600);
    memofs(&["stats", &mnt]).assert_success();
    let (m2, sock2) = (mnt.clone(), sock.clone());
    as_user(USER1.0, USER1.1, &[], move || {
        let out = memofs(&["stats", &m2]);
        assert!(
            !out.success(),
            "{}",
            out.describe("a user's memofs stats of root's mount")
        );
        // Neither the socket nor its directory can be replaced by a user.
        assert_errno!(fs::remove_file(&sock2), libc::EACCES);
        assert_errno!(
            UnixListener::bind("/run/memofs/squat.sock").map(drop),
            libc::EACCES
        );
    });
    let out = memofs(&["stats", "--json", &mnt]);
    out.assert_success();
    assert!(out.stdout.contains("\"requests\""), "{}", out.stdout);
    // After the unmount the socket is gone.
    memofs(&["umount", &mnt]).assert_success();
    eventually("the socket removed", Duration::from_secs(5), || {
        (!sock.exists(), ())
    });
}

/// Memory of deleted extended attributes goes back to the system: a user fills 48 MB of
/// xattrs and deletes them; the server's resident memory falls back within seconds.
#[test]
fn memory_of_deleted_xattrs_goes_back() {
    require_mount!();
    let m = Mount::memofs(&["allow_other", "size=256m"]);
    let pid = m.server_pid().expect("the server's pid");
    ok!(sys::chmod(m.path(), 0o1777));
    let root = m.path().to_path_buf();
    let files = 800;
    {
        let root = root.clone();
        as_user(USER1.0, USER1.1, &[], move || {
            for i in 0..files {
                ok!(fs::write(root.join(format!("f{i}")), b""));
            }
        });
    }
    let before = rss_bytes(pid);
    {
        let root = root.clone();
        as_user(USER1.0, USER1.1, &[], move || {
            for i in 0..files {
                let value = vec![i as u8; 60_000];
                ok!(sys::setxattr(
                    root.join(format!("f{i}")),
                    "user.big",
                    &value,
                    0
                ));
            }
        });
    }
    let full = rss_bytes(pid);
    assert!(
        full > before + (30 << 20),
        "48 MB of xattrs grew the server by {} MiB only",
        (full - before) >> 20
    );
    as_user(USER1.0, USER1.1, &[], move || {
        for i in 0..files {
            ok!(sys::removexattr(root.join(format!("f{i}")), "user.big"));
        }
    });
    let grown = full - before;
    eventually(
        "the xattrs' memory handed back",
        Duration::from_secs(10),
        || {
            let now = rss_bytes(pid);
            (
                now < before + grown / 4,
                (now >> 20, before >> 20, full >> 20),
            )
        },
    );
}
