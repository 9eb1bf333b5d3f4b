//! The passthrough backend (`memofs mount SOURCE MOUNTPOINT`): host files are served, changes
//! go through to the host, host-side changes show up, and ownership follows the caller.

use std::fs;
use std::os::unix::fs::{symlink, DirBuilderExt, MetadataExt};
use std::path::Path;
use std::time::Duration;

use memofs_e2e::user::{as_user, USER1};
use memofs_e2e::{assert_errno, checks, cli, ok, pattern, require_mount, skip, sys, Mount};

fn export() -> (Mount, Mount) {
    export_with(&[])
}

/// A fresh tmpfs exported through the passthrough backend with `opts` (and allow_other).
fn export_with(opts: &[&str]) -> (Mount, Mount) {
    let host = Mount::tmpfs(&["size=64m", "mode=1777"]);
    let opts: Vec<&str> = ["allow_other"].iter().chain(opts).copied().collect();
    let m = Mount::try_memofs_source(host.path(), &opts).unwrap_or_else(|e| panic!("{e}"));
    (host, m)
}

/// Poll (the watcher is asynchronous) until `cond` holds, for up to 10 s.
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    checks::eventually(what, Duration::from_secs(10), || (cond(), ()));
}

#[test]
fn host_files_are_served_and_changes_reach_the_host() {
    require_mount!();
    let (host, m) = export();
    ok!(fs::create_dir(host.join("d")));
    ok!(fs::write(host.join("d/f"), b"from the host"));
    ok!(symlink("d/f", host.join("l")));
    assert_eq!(ok!(fs::read(m.join("d/f"))), b"from the host");
    assert_eq!(ok!(fs::read_link(m.join("l"))), Path::new("d/f"));
    let data = pattern(3, 300_000);
    ok!(fs::write(m.join("d/new"), &data));
    assert_eq!(
        ok!(fs::read(host.join("d/new"))),
        data,
        "a write through the mount reaches the host"
    );
    ok!(fs::rename(m.join("d/new"), m.join("moved")));
    assert!(host.join("moved").exists() && !host.join("d/new").exists());
    // tmpfs has user.* attributes from Linux 6.6 on.
    match sys::setxattr(host.join("d/f"), "user.probe", b"1", 0) {
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
            eprintln!(
                "(this kernel's tmpfs has no user.* attributes: not checked through the export)"
            )
        }
        probe => {
            ok!(probe);
            ok!(sys::setxattr(m.join("moved"), "user.k", b"v", 0));
            assert_eq!(ok!(sys::getxattr(host.join("moved"), "user.k")), b"v");
        }
    }
    ok!(fs::remove_file(m.join("moved")));
    assert!(!host.join("moved").exists());
    let (hm, mm) = (
        ok!(fs::metadata(host.join("d/f"))),
        ok!(fs::metadata(m.join("d/f"))),
    );
    assert_eq!(
        (hm.mode(), hm.size(), hm.nlink(), hm.uid()),
        (mm.mode(), mm.size(), mm.nlink(), mm.uid())
    );
}

#[test]
fn host_side_changes_become_visible() {
    require_mount!();
    let (host, m) = export();
    // Look names up first, so the kernel has cached answers (positive and negative).
    assert!(!m.join("later").exists());
    ok!(fs::write(host.join("gone-soon"), b"x"));
    assert!(m.join("gone-soon").exists());
    ok!(fs::write(host.join("later"), b"created on the host"));
    eventually("a file created on the host", || m.join("later").exists());
    assert_eq!(ok!(fs::read(m.join("later"))), b"created on the host");
    ok!(fs::remove_file(host.join("gone-soon")));
    eventually("a file deleted on the host", || {
        !m.join("gone-soon").exists()
    });
    ok!(fs::write(
        host.join("later"),
        b"rewritten on the host, longer"
    ));
    eventually("content changed on the host", || {
        fs::read(m.join("later"))
            .map(|d| d == b"rewritten on the host, longer")
            .unwrap_or(false)
    });
}

#[test]
fn invalidate_drops_names_the_server_did_not_see_change() {
    // No watcher and hour-long timeouts: the kernel keeps stale answers until told.
    require_mount!();
    let (host, m) = export_with(&["watch=off"]);
    assert!(!m.join("later").exists());
    ok!(fs::write(host.join("gone-soon"), b"x"));
    assert!(m.join("gone-soon").exists());
    ok!(fs::write(host.join("later"), b"created on the host"));
    ok!(fs::remove_file(host.join("gone-soon")));
    assert!(
        !m.join("later").exists() && m.join("gone-soon").exists(),
        "with watch=off the kernel should still hold its cached answers"
    );
    // Other users may not flush the mount's cache.
    let root = m.path().to_path_buf();
    let out = as_user(USER1.0, USER1.1, &[], move || {
        cli::memofs(&["invalidate", root.to_str().unwrap()])
    });
    assert_eq!(
        out.code(),
        Some(1),
        "{}",
        out.describe("invalidate by another user")
    );
    assert!(
        out.stderr.contains("owner"),
        "{}",
        out.describe("the refusal says why")
    );
    assert!(
        !m.join("later").exists(),
        "a refused invalidate changed nothing"
    );
    let out = cli::memofs(&["invalidate", m.path().to_str().unwrap()]);
    out.assert_success();
    eventually("a host-created file after memofs invalidate", || {
        m.join("later").exists()
    });
    assert_eq!(ok!(fs::read(m.join("later"))), b"created on the host");
    if out.stderr.contains("INC_EPOCH") {
        // Without the epoch notification (before Linux 6.16) only the cached misses the
        // server knows are dropped, and the command says so.
        assert!(
            out.stderr.contains("as present were not dropped"),
            "{}",
            out.describe("invalidate says what it could not do")
        );
    } else {
        eventually("a host-deleted file after memofs invalidate", || {
            !m.join("gone-soon").exists()
        });
    }
}

#[test]
fn invalidate_without_anything_to_drop_says_so_unless_the_kernel_has_the_epoch() {
    require_mount!();
    let (_host, m) = export_with(&["watch=off"]);
    let out = cli::memofs(&["invalidate", m.path().to_str().unwrap()]);
    if out.success() {
        // The epoch notification dropped everything; nothing to report.
        assert!(out.stderr.is_empty(), "{}", out.describe("invalidate"));
    } else {
        assert_eq!(out.code(), Some(1), "{}", out.describe("invalidate"));
        assert!(
            out.stderr.contains("nothing was invalidated") && out.stderr.contains("INC_EPOCH"),
            "{}",
            out.describe("invalidate that could do nothing says why")
        );
    }
}

/// The names in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = ok!(fs::read_dir(dir))
        .map(|e| ok!(e).file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn host_changes_reach_listings_the_kernel_keeps() {
    require_mount!();
    // noatime: no listing could move a directory's atime, so every one may be kept.
    let (host, m) = export_with(&["noatime"]);
    let doc = ok!(checks::stats_json(m.path()).map_err(std::io::Error::other));
    if !doc.contains("one mark on the whole filesystem") {
        skip!(
            Fanotify,
            "the watcher does not mark the whole filesystem, so no listing is kept"
        );
    }
    ok!(fs::create_dir(host.join("d")));
    for n in ["a", "b", "c"] {
        ok!(fs::write(host.join("d").join(n), b"x"));
    }
    // Listed again: served by the kernel, once the watcher has reported the host's own
    // creates above (each drops the kept listing, however late it arrives).
    let reads = |m: &Mount| checks::settled(m, "READDIR") + checks::settled(m, "READDIRPLUS");
    eventually("a listing served by the kernel", || {
        let before = reads(&m);
        assert_eq!(listing(&m.join("d")), ["a", "b", "c"]);
        reads(&m) == before
    });
    // A name created on the host, which the kernel never looked up: only the watcher's
    // invalidation of the directory drops the kept listing.
    ok!(fs::write(host.join("d/new"), b"x"));
    eventually(
        "a name created on the host in a listing the kernel keeps",
        || listing(&m.join("d")) == ["a", "b", "c", "new"],
    );
    // Deleted and renamed names (these the listing's READDIRPLUS made the kernel know).
    ok!(fs::remove_file(host.join("d/a")));
    ok!(fs::rename(host.join("d/b"), host.join("d/b2")));
    ok!(fs::rename(host.join("d/c"), host.join("c-moved-out")));
    eventually("host changes in a listing the kernel keeps", || {
        listing(&m.join("d")) == ["b2", "new"]
    });
    assert_eq!(listing(m.path()), ["c-moved-out", "d"]);
    // Changes through the mount show at once, as on any filesystem.
    ok!(fs::write(m.join("d/mine"), b"x"));
    assert_eq!(listing(&m.join("d")), ["b2", "mine", "new"]);
}

/// A whole tmpfs exported as root (one fanotify mark on all of it, the server's private copy
/// of the mount, nothing mounted below): nothing can change it unseen, so OPENDIR is declined
/// once and every listing stays in the kernel until a change drops it. A subdirectory export
/// (which one mark cannot watch alone) asks OPENDIR at every listing.
#[test]
fn listings_of_a_whole_watched_filesystem_need_no_opendir() {
    require_mount!();
    let (host, m) = export();
    let doc = ok!(checks::stats_json(m.path()).map_err(std::io::Error::other));
    if !doc.contains("one mark on the whole filesystem")
        || !doc.contains(r#""private_mount":"true""#)
    {
        skip!(
            Fanotify,
            "no filesystem mark or no private mount, so every listing asks OPENDIR"
        );
    }
    ok!(fs::create_dir(host.join("d")));
    ok!(fs::write(host.join("d/a"), b"x"));
    let reads = |m: &Mount| checks::settled(m, "READDIR") + checks::settled(m, "READDIRPLUS");
    eventually("a listing served by the kernel", || {
        let before = reads(&m);
        assert_eq!(listing(&m.join("d")), ["a"]);
        reads(&m) == before
    });
    let opendirs = checks::settled(&m, "OPENDIR");
    assert!(
        opendirs <= 1,
        "OPENDIR is declined once, not {opendirs} times"
    );
    for _ in 0..3 {
        assert_eq!(listing(&m.join("d")), ["a"]);
        assert_eq!(listing(m.path()), ["d"]);
    }
    assert_eq!(checks::settled(&m, "OPENDIR"), opendirs);
    // Host changes still reach the kept listing (the watcher's invalidation drops it).
    ok!(fs::write(host.join("d/b"), b"x"));
    eventually("a host create in a listing kept without OPENDIR", || {
        listing(&m.join("d")) == ["a", "b"]
    });

    let (_host, sub) = checks::export_tmpfs("export", &["size=16m"], &["allow_other"]);
    ok!(fs::create_dir(sub.join("e")));
    let before = checks::settled(&sub, "OPENDIR");
    for _ in 0..3 {
        assert!(listing(&sub.join("e")).is_empty());
    }
    assert!(checks::settled(&sub, "OPENDIR") >= before + 3);
}

#[test]
fn host_renames_become_visible_despite_hour_long_caches() {
    require_mount!();
    let (host, m) = export_with(&[
        "negative_timeout=3600",
        "entry_timeout=3600",
        "attr_timeout=3600",
    ]);
    ok!(fs::create_dir(host.join("d")));
    ok!(fs::write(host.join("d/old"), b"renamed on the host"));
    // Cache the old name's entry and the new names' misses, in the root and in a directory.
    assert!(m.join("d/old").exists());
    assert!(!m.join("d/new").exists() && !m.join("top").exists());
    ok!(fs::rename(host.join("d/old"), host.join("d/new")));
    eventually("the new name of a file renamed on the host", || {
        m.join("d/new").exists()
    });
    eventually("the old name of a file renamed on the host", || {
        !m.join("d/old").exists()
    });
    ok!(fs::rename(host.join("d/new"), host.join("top")));
    eventually("a file moved to another directory on the host", || {
        m.join("top").exists() && !m.join("d/new").exists()
    });
    assert_eq!(ok!(fs::read(m.join("top"))), b"renamed on the host");
    let stats = ok!(checks::stats_json(m.path()).map_err(std::io::Error::other));
    assert!(
        stats.contains("\"inval_fallback\":"),
        "memofs stats counts the fallback: {stats}"
    );
}

/// `memofs stats` on an export counts inodes as `df -i` does on the host, and the host
/// descriptors the server holds against its budget under their own name.
#[test]
fn stats_of_an_export_show_host_inodes_and_descriptors_apart() {
    require_mount!();
    let (host, m) = export();
    ok!(fs::write(host.join("f"), b"x"));
    let u = checks::stats_usage(m.path()).unwrap_or_else(|e| panic!("{e}"));
    let h = ok!(sys::statfs(host.path()));
    assert_eq!(u.inodes_limit, h.f_files, "{u:?}");
    assert!(u.inodes_used >= 2, "the root and f: {u:?}");
    assert!(
        u.descriptors_used >= 1 && u.descriptors_limit > u.descriptors_used,
        "{u:?}"
    );
    let text = cli::memofs(&["stats", m.path().to_str().unwrap()]);
    assert!(text.stdout.contains("host descriptors"), "{}", text.stdout);
    let mem = Mount::memofs(&[]);
    let u = checks::stats_usage(mem.path()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((u.descriptors_used, u.descriptors_limit), (0, 0));
}

/// Whether `path` shows up through the mount within 10 s (polling).
fn shows_up(path: &Path) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        if path.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

/// A name the kernel holds as present is deleted on the host, looked up through the mount
/// at once (a miss the kernel may cache), and made again on the host: the new name must
/// show, on kernels that drop a cached miss by name and on those that keep it, in every
/// round. Then the same with renames (away on the host, a lookup of the old name, back).
#[test]
fn a_name_deleted_looked_up_and_made_again_on_the_host_shows() {
    require_mount!();
    let (host, m) = export_with(&[
        "negative_timeout=3600",
        "entry_timeout=3600",
        "attr_timeout=3600",
    ]);
    let rounds = checks::scaled(200, 2000) as usize;
    let mut hidden = Vec::new();
    for i in 0..rounds {
        let (h, v) = (host.join(format!("r{i}")), m.join(format!("r{i}")));
        ok!(fs::write(&h, b"1"));
        assert!(
            shows_up(&v),
            "round {i}: a file made on the host never showed"
        );
        ok!(fs::remove_file(&h));
        let _ = v.exists();
        ok!(fs::write(&h, b"2"));
        if !shows_up(&v) {
            hidden.push(format!("r{i}"));
        }
    }
    for i in 0..rounds {
        let (a, b) = (host.join(format!("a{i}")), host.join(format!("b{i}")));
        let v = m.join(format!("a{i}"));
        ok!(fs::write(&a, b"1"));
        assert!(
            shows_up(&v),
            "round {i}: a file made on the host never showed"
        );
        ok!(fs::rename(&a, &b));
        let _ = v.exists();
        ok!(fs::rename(&b, &a));
        if !shows_up(&v) {
            hidden.push(format!("a{i} (renamed back)"));
        }
    }
    assert!(
        hidden.is_empty(),
        "{} of {} names made again on the host stayed hidden: {hidden:?}",
        hidden.len(),
        2 * rounds
    );
}

#[test]
fn chown_through_the_export_clears_setuid_and_setgid() {
    require_mount!();
    let (host, m) = export();
    ok!(fs::write(m.join("prog"), b"#!/bin/sh\n"));
    ok!(sys::chmod(m.join("prog"), 0o6755));
    assert_eq!(ok!(fs::metadata(m.join("prog"))).mode() & 0o7777, 0o6755);
    ok!(sys::chown(m.join("prog"), USER1.0, USER1.1));
    for (p, what) in [
        (m.join("prog"), "through the mount"),
        (host.join("prog"), "on the host"),
    ] {
        let md = ok!(fs::metadata(&p));
        assert_eq!(
            md.mode() & 0o7777,
            0o755,
            "chown keeps no setuid/setgid {what}"
        );
        assert_eq!((md.uid(), md.gid()), USER1, "owner {what}");
    }
}

#[test]
fn chown_to_the_same_owner_updates_ctime_as_on_tmpfs() {
    require_mount!();
    let (host, m) = export();
    ok!(fs::create_dir(m.join("d")));
    ok!(fs::write(m.join("f"), b""));
    for name in ["d", "f"] {
        let p = m.join(name);
        let before = ok!(fs::metadata(&p));
        sys::wait_clock_past((before.ctime(), before.ctime_nsec()));
        ok!(sys::chown(&p, u32::MAX, u32::MAX), "chown {name} -1 -1");
        for (q, what) in [
            (p.clone(), "through the mount"),
            (host.join(name), "on the host"),
        ] {
            let after = ok!(fs::metadata(&q));
            assert!(
                (after.ctime(), after.ctime_nsec()) > (before.ctime(), before.ctime_nsec()),
                "chown({name}, -1, -1) updates ctime {what}"
            );
        }
    }
}

/// `security.capability` granting `cap_net_raw+ep` (revision 2, little endian).
const CAPS: [u8; 20] = [
    0x01, 0, 0, 0x02, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
];

#[test]
fn file_capabilities_set_on_the_host_show_and_writes_drop_them() {
    // The server answers "no capability" from memory for files it created (the kernel asks
    // before the first write and every chown); a capability set on the host must show
    // anyway, and a write through the mount must drop it as on any filesystem.
    require_mount!();
    let (host, m) = export();
    let caps = |p: &Path| sys::getxattr(p, "security.capability");
    ok!(fs::write(m.join("prog"), b"first"));
    assert_errno!(caps(&m.join("prog")), libc::ENODATA);
    ok!(sys::setxattr(
        host.join("prog"),
        "security.capability",
        &CAPS,
        0
    ));
    eventually("a capability set on the host", || {
        caps(&m.join("prog")).is_ok_and(|v| v == CAPS)
    });
    ok!(fs::OpenOptions::new()
        .append(true)
        .open(m.join("prog"))
        .and_then(|mut f| std::io::Write::write_all(&mut f, b" second")));
    assert_errno!(
        caps(&host.join("prog")),
        libc::ENODATA,
        "caps on the host after a write"
    );
    assert_errno!(
        caps(&m.join("prog")),
        libc::ENODATA,
        "caps through the mount after a write"
    );
}

#[test]
fn created_files_belong_to_the_caller_on_the_host() {
    require_mount!();
    let (host, m) = export();
    let root = m.path().to_path_buf();
    as_user(USER1.0, USER1.1, &[], move || {
        ok!(fs::write(root.join("userfile"), b"u"));
        ok!(fs::create_dir(root.join("userdir")));
    });
    for p in ["userfile", "userdir"] {
        let md = ok!(fs::metadata(host.join(p)));
        assert_eq!(
            (md.uid(), md.gid()),
            USER1,
            "{p} on the host belongs to the creating user"
        );
    }
    ok!(fs::write(host.join("rootonly"), b"r"));
    ok!(sys::chmod(host.join("rootonly"), 0o600));
    let p = m.join("rootonly");
    as_user(USER1.0, USER1.1, &[], move || {
        assert_errno!(
            fs::read(&p),
            libc::EACCES,
            "a user reading a 0600 root file through the export"
        );
    });
}

/// Modes of a file, a directory, a FIFO and a regular file made by mknod, created as `name-*` under `umask`.
fn create_modes(m: &Mount, host: &Mount, name: &str, umask: u32) -> [u32; 4] {
    let p = |what: &str| m.join(format!("{name}-{what}"));
    sys::with_umask(umask, || {
        ok!(sys::open(p("f"), libc::O_CREAT | libc::O_WRONLY, 0o620));
        ok!(fs::DirBuilder::new().mode(0o777).create(p("d")));
        ok!(sys::mkfifo(p("p"), 0o620));
        ok!(sys::mknod(p("n"), libc::S_IFREG | 0o666, 0));
    });
    ["f", "d", "p", "n"].map(|w| {
        let on_host = ok!(fs::symlink_metadata(host.join(format!("{name}-{w}"))));
        on_host.mode() & 0o7777
    })
}

/// pjdfstest's open/02, open/03, chmod/12 and rename/21 create with a umask of their own:
/// the server's (077 here) must never show.
#[test]
fn created_modes_follow_the_callers_umask_never_the_servers() {
    require_mount!();
    let (host, m) = sys::with_umask(0o077, export);
    assert_eq!(
        create_modes(&m, &host, "u0", 0),
        [0o620, 0o777, 0o620, 0o666]
    );
    assert_eq!(
        create_modes(&m, &host, "u22", 0o022),
        [0o600, 0o755, 0o600, 0o644]
    );
    // A host default ACL (user::rwx group::rwx other::---) replaces the caller's umask.
    ok!(fs::create_dir(host.join("acl")));
    let acl = sys::acl_xattr(&[
        (0x01, 7, u32::MAX),
        (0x04, 7, u32::MAX),
        (0x20, 0, u32::MAX),
    ]);
    ok!(sys::setxattr(
        host.join("acl"),
        "system.posix_acl_default",
        &acl,
        0
    ));
    sys::with_umask(0o077, || ok!(fs::write(m.join("acl/f"), b"")));
    assert_eq!(ok!(fs::metadata(host.join("acl/f"))).mode() & 0o777, 0o660);
}

/// A directory a host user moves out of a subdirectory export is no longer part of it:
/// through a descriptor a plain user still holds on it, nothing is created, linked, renamed
/// or removed there (the host's directory outside the export stays as it was); moved back,
/// it works again.
#[test]
fn nothing_is_made_in_a_directory_moved_out_of_the_export() {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{symlink, PermissionsExt};
    require_mount!();
    let host = Mount::tmpfs(&["size=16m", "mode=1777"]);
    let (src, out) = (host.join("src"), host.join("out"));
    for d in [&src, &src.join("d"), &out] {
        ok!(fs::create_dir(d));
        ok!(fs::set_permissions(d, fs::Permissions::from_mode(0o777)));
    }
    ok!(fs::write(src.join("d/old"), b"o"));
    ok!(fs::write(src.join("f"), b"f"));
    ok!(fs::set_permissions(
        src.join("f"),
        fs::Permissions::from_mode(0o666)
    ));
    let m = Mount::try_memofs_source(&src, &["allow_other"]).unwrap_or_else(|e| panic!("{e}"));
    let (d, f, moved) = (m.join("d"), m.join("f"), out.join("d"));
    let host_d = src.join("d");
    let listing = |p: &Path| -> Vec<String> {
        let mut v: Vec<String> = ok!(fs::read_dir(p))
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    as_user(USER1.0, USER1.1, &[], move || {
        // The user's shell sits in d while root moves it out of the export on the host.
        let held = ok!(fs::File::open(&d));
        let at = |name: &str| format!("/proc/thread-self/fd/{}/{name}", held.as_raw_fd());
        ok!(fs::rename(&host_d, &moved));
        let tries: Vec<(&str, std::io::Result<()>)> = vec![
            ("create", fs::write(at("new"), b"n")),
            ("mkdir", fs::create_dir(at("newdir"))),
            ("symlink", symlink("x", at("link"))),
            ("link", fs::hard_link(&f, at("hard"))),
            ("rename into", fs::rename(&f, at("renamed"))),
            ("unlink", fs::remove_file(at("old"))),
        ];
        for (what, r) in tries {
            assert_eq!(
                r.as_ref().err().and_then(|e| e.raw_os_error()),
                Some(libc::ENOENT),
                "{what} in a directory moved out of the export: {r:?}"
            );
        }
        assert_eq!(
            listing(&moved),
            ["old"],
            "nothing changed outside the export"
        );
        // Moved back, it is part of the export again.
        ok!(fs::rename(&moved, &host_d));
        ok!(fs::write(at("new"), b"n"));
        assert_eq!(listing(&host_d), ["new", "old"]);
    });
}

/// The same for a directory deep below one a host user moves out: the whole branch has left
/// the export, whatever the depth; moved back, it works again.
#[test]
fn nothing_is_made_deep_below_a_directory_moved_out_of_the_export() {
    require_mount!();
    let host = Mount::tmpfs(&["size=16m"]);
    let (src, out) = (host.join("src"), host.join("out"));
    let deep: std::path::PathBuf = (0..64).map(|i| format!("d{i}")).collect();
    ok!(fs::create_dir_all(src.join(&deep)));
    ok!(fs::create_dir(&out));
    let m = Mount::try_memofs_source(&src, &[]).unwrap_or_else(|e| panic!("{e}"));
    let held = ok!(fs::File::open(m.join(&deep)));
    let at = |name: &str| {
        use std::os::fd::AsRawFd;
        format!("/proc/self/fd/{}/{name}", held.as_raw_fd())
    };
    ok!(fs::write(at("before"), b"in"));
    ok!(fs::rename(src.join("d0"), out.join("d0")));
    assert_errno!(fs::write(at("new"), b"n"), libc::ENOENT);
    assert_errno!(fs::create_dir(at("newdir")), libc::ENOENT);
    assert_errno!(fs::remove_file(at("before")), libc::ENOENT);
    let outside = out.join(&deep);
    let mut names: Vec<String> = ok!(fs::read_dir(&outside))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["before"], "nothing changed outside the export");
    ok!(fs::rename(out.join("d0"), src.join("d0")));
    ok!(fs::write(at("new"), b"n"));
    assert!(src.join(&deep).join("new").exists());
}

/// A plain user holds a root-owned file open for writing through the export; root then makes
/// it setuid, on the host or through the mount; the user's next write clears the bit, as a
/// write by an unprivileged user does on the host (else the user could plant a setuid-root
/// program).
#[test]
fn a_users_write_clears_setuid_set_after_the_open_from_either_side() {
    use std::os::unix::fs::{FileExt, PermissionsExt};
    require_mount!();
    let (host, m) = export();
    for (name, on_host) in [("via-host", true), ("via-mount", false)] {
        let (h, v) = (host.join(name), m.join(name));
        ok!(fs::write(&h, b"#!/bin/sh\n"));
        ok!(fs::set_permissions(&h, fs::Permissions::from_mode(0o666)));
        let (opened_tx, opened_rx) = std::sync::mpsc::channel();
        let (chmodded_tx, chmodded_rx) = std::sync::mpsc::channel::<()>();
        let writer = std::thread::spawn(move || {
            as_user(USER1.0, USER1.1, &[], move || {
                let f = ok!(fs::OpenOptions::new().write(true).open(&v));
                opened_tx.send(()).unwrap();
                chmodded_rx.recv().unwrap();
                ok!(f.write_at(b"# a user's line\n", 10));
            })
        });
        opened_rx.recv().unwrap();
        let target = if on_host { &h } else { &m.join(name) };
        ok!(fs::set_permissions(
            target,
            fs::Permissions::from_mode(0o4755)
        ));
        chmodded_tx.send(()).unwrap();
        writer.join().unwrap();
        let mode = ok!(fs::metadata(&h)).mode() & 0o7777;
        assert_eq!(
            mode & 0o6000,
            0,
            "{name}: setuid set after the open survived a user's write (mode {mode:o})"
        );
    }
}

/// A plain user looks a file up through a subdirectory export; then root links it on the
/// host from outside the export (which no watcher of the export sees) and makes it private
/// through that name. The user's next open is refused at once, as on the host; and the same
/// through the mount.
#[test]
fn a_chmod_through_a_late_hard_link_holds_at_the_next_open() {
    use std::os::unix::fs::PermissionsExt;
    require_mount!();
    let host = Mount::tmpfs(&["size=16m", "mode=1777"]);
    let (src, out) = (host.join("src"), host.join("out"));
    ok!(fs::create_dir(&src));
    ok!(fs::create_dir(&out));
    ok!(fs::set_permissions(&src, fs::Permissions::from_mode(0o755)));
    let long = ["allow_other", "entry_timeout=3600", "attr_timeout=3600"];
    let m = Mount::try_memofs_source(&src, &long).unwrap_or_else(|e| panic!("{e}"));
    for (name, on_host) in [("late", true), ("mount", false)] {
        ok!(fs::write(src.join(name), b"secret"));
        ok!(fs::set_permissions(
            src.join(name),
            fs::Permissions::from_mode(0o644)
        ));
        let v = m.join(name);
        let v2 = v.clone();
        as_user(USER1.0, USER1.1, &[], move || {
            assert_eq!(ok!(fs::read(&v2)), b"secret", "readable while 0644");
        });
        if on_host {
            let link = out.join(format!("{name}-link"));
            ok!(fs::hard_link(src.join(name), &link));
            ok!(fs::set_permissions(
                &link,
                fs::Permissions::from_mode(0o600)
            ));
        } else {
            ok!(fs::set_permissions(&v, fs::Permissions::from_mode(0o600)));
        }
        as_user(USER1.0, USER1.1, &[], move || {
            assert_errno!(
                fs::read(&v),
                libc::EACCES,
                "{name}: a user's open after the file was made private"
            );
        });
    }
}
