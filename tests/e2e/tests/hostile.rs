//! Hostile local users on an `allow_other` mount: exceeding `size=`/`nr_inodes=` (the limits
//! hold while they try), reading other users' private files, escaping a passthrough export
//! (symlinks pointing above SOURCE, `..` at the root, links and renames across the boundary,
//! and a host-side race swapping a directory for such a symlink while files are created through
//! the mount), over-long names, huge and numerous xattrs, trees deeper than PATH_MAX, and a
//! directory with 200 000 entries (server memory per entry is reported).
//!
//! Environment: `MEMOFS_LONG=1` makes the big directory 2 000 000 entries and the race longer.

use std::collections::BTreeSet;
use std::fs::{self, OpenOptions};
use std::os::unix::fs::{symlink, FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use memofs_e2e::checks::{
    both_backends, eventually, export_tmpfs, process_alive, rm_rf, rss_bytes, scaled, stats_usage,
    Dir, Usage,
};
use memofs_e2e::tree::{self, Detail};
use memofs_e2e::user::{as_user, USER1, USER2};
use memofs_e2e::{assert_errno, errno_name, ok, pattern, require_mount, skip, sys, Mount};

fn errno_of(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(-1)
}

/// Repeat `attempt(i)` until it fails; return how many succeeded and the error (must be
/// ENOSPC, else panic naming `what`).
fn until_enospc(what: &str, mut attempt: impl FnMut(usize) -> std::io::Result<()>) -> usize {
    for i in 0..100_000 {
        if let Err(e) = attempt(i) {
            assert_eq!(errno_of(&e), libc::ENOSPC, "{what} #{i}: {e}, want ENOSPC");
            return i;
        }
    }
    panic!("{what}: no ENOSPC after 100000 successes");
}

/// One user filling the mount with file data, then (with `metadata`) xattrs and long symlink
/// targets, then empty files until no inode is left; returns (file, bytes) acknowledged.
fn fill_as(user: (u32, u32), dir: PathBuf, metadata: bool) -> Vec<(PathBuf, Vec<u8>)> {
    as_user(user.0, user.1, &[], move || {
        let tag = user.0;
        let mut acked = Vec::new();
        let data_files = until_enospc("data file", |i| {
            let p = dir.join(format!("u{tag}-data{i}"));
            let data = pattern(tag as u64 * 1000 + i as u64, 100_000);
            // Under the writeback cache ENOSPC comes at close, not at write.
            let r = fs::File::create(&p)
                .and_then(|f| f.write_all_at(&data, 0).map(|()| f))
                .and_then(sys::close);
            if r.is_ok() {
                let got = fs::read(&p).unwrap_or_default();
                assert!(got == data, "{}: content differs", p.display());
                acked.push((p, got));
            }
            r
        });
        let xattr_file = dir.join(format!("u{tag}-xattrs"));
        let xattrs = match fs::write(&xattr_file, b"") {
            Ok(()) if !metadata => 0,
            Ok(()) => until_enospc("xattr", |i| {
                sys::setxattr(&xattr_file, &format!("user.k{i}"), &[7u8; 16 << 10], 0)
            }),
            Err(e) => {
                assert_eq!(errno_of(&e), libc::ENOSPC, "create for xattrs: {e}");
                0
            }
        };
        let links = match metadata {
            false => 0,
            true => until_enospc("symlink", |i| {
                symlink("t".repeat(2000), dir.join(format!("u{tag}-link{i}")))
            }),
        };
        let inodes = until_enospc("empty file", |i| {
            fs::write(dir.join(format!("u{tag}-empty{i}")), b"")
        });
        eprintln!("user {tag}: {data_files} data files, {xattrs} xattrs of 16 KiB, {links} long symlinks, {inodes} empty files before ENOSPC");
        acked
    })
}

/// Two users fill a `size=4m,nr_inodes=400` mount at once while statfs and `memofs stats`
/// are sampled: usage never goes above the limits, and what was acknowledged stays intact.
fn users_fill_and_limits_hold(metadata: bool) {
    require_mount!();
    let m = Mount::memofs(&["allow_other", "size=4m", "nr_inodes=400"]);
    let over: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let check = {
        let (mnt, over) = (m.path().to_path_buf(), over.clone());
        move || {
            let s = sys::statfs(&mnt).unwrap();
            let u: Usage = stats_usage(&mnt).unwrap_or_else(|e| panic!("{e}"));
            let mut v = over.lock().unwrap();
            if s.f_bfree > s.f_blocks || s.f_ffree > s.f_files || s.f_files != 400 {
                v.push(format!(
                    "statfs blocks {}/{} free, files {}/{} free",
                    s.f_bfree, s.f_blocks, s.f_ffree, s.f_files
                ));
            }
            if u.bytes_used > u.bytes_limit || u.inodes_used > u.inodes_limit {
                v.push(format!("memofs stats {u:?}"));
            }
        }
    };
    let sampler = {
        let (stop, check) = (stop.clone(), check.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                check();
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let users: Vec<_> = [USER1, USER2]
        .into_iter()
        .map(|u| {
            let dir = m.path().to_path_buf();
            std::thread::spawn(move || fill_as(u, dir, metadata))
        })
        .collect();
    let acked: Vec<_> = users.into_iter().flat_map(|h| h.join().unwrap()).collect();
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    check();
    let over = over.lock().unwrap();
    assert!(
        over.is_empty(),
        "usage above the limits while users filled the mount:\n{}",
        over.join("\n")
    );
    for (p, data) in &acked {
        assert_eq!(&ok!(fs::read(p)), data, "{} changed", p.display());
    }
}

#[test]
fn users_cannot_exceed_size_or_nr_inodes() {
    users_fill_and_limits_hold(false);
}

#[test]

fn users_cannot_exceed_size_with_data_xattrs_and_symlinks() {
    users_fill_and_limits_hold(true);
}

#[test]
fn other_users_private_files_stay_private() {
    require_mount!();
    for t in both_backends(&[]) {
        let (name, m) = (t.name, &t.m);
        let root = m.path().to_path_buf();
        as_user(USER2.0, USER2.1, &[], {
            let root = root.clone();
            move || {
                ok!(fs::write(root.join("secret"), b"user2 only"));
                ok!(sys::chmod(root.join("secret"), 0o600));
                ok!(sys::setxattr(root.join("secret"), "user.k", b"v", 0));
                ok!(fs::create_dir(root.join("private")));
                ok!(sys::chmod(root.join("private"), 0o700));
            }
        });
        as_user(USER1.0, USER1.1, &[], move || {
            let s = root.join("secret");
            let calls: Vec<(&str, std::io::Result<()>, i32)> = vec![
                ("read", fs::read(&s).map(drop), libc::EACCES),
                (
                    "open for writing",
                    OpenOptions::new().write(true).open(&s).map(drop),
                    libc::EACCES,
                ),
                ("truncate", sys::truncate(&s, 0), libc::EACCES),
                (
                    "getxattr",
                    sys::getxattr(&s, "user.k").map(drop),
                    libc::EACCES,
                ),
                ("chmod", sys::chmod(&s, 0o666), libc::EPERM),
                (
                    "unlink in the sticky root",
                    fs::remove_file(&s),
                    libc::EPERM,
                ),
                (
                    "rename over it",
                    fs::write(root.join("mine"), b"")
                        .and_then(|_| fs::rename(root.join("mine"), &s)),
                    libc::EPERM,
                ),
                (
                    "list a 0700 directory",
                    fs::read_dir(root.join("private")).map(drop),
                    libc::EACCES,
                ),
                (
                    "create in a 0700 directory",
                    fs::write(root.join("private/x"), b""),
                    libc::EACCES,
                ),
            ];
            for (what, r, want) in calls {
                assert_errno!(r, want, "{name}: {what} (another user's private file)");
            }
        });
        assert_eq!(
            ok!(fs::read(m.join("secret"))),
            b"user2 only",
            "{name}: secret intact"
        );
    }
}

/// A host tmpfs with `export/` (SOURCE) and a sentinel `outside/` beside it; `export/up` is a
/// symlink to `../outside`. Returns (host, mount) with the memofs mount last (dropped first).
fn escape_setup() -> (Mount, Mount) {
    let (host, m) = export_tmpfs("export", &["size=64m"], &["allow_other"]);
    ok!(fs::create_dir(host.join("outside")));
    ok!(fs::write(host.join("outside/secret"), b"host only"));
    ok!(fs::create_dir(host.join("outside/sub")));
    ok!(sys::chmod(host.join("outside"), 0o777));
    ok!(symlink("../outside", host.join("export/up")));
    ok!(symlink(
        "../../../../../../../../outside",
        host.join("export/updeep")
    ));
    ok!(fs::write(host.join("export/file"), b"inside"));
    ok!(fs::create_dir(host.join("export/dir")));
    (host, m)
}

fn sentinel(host: &Mount) -> tree::Tree {
    let d = Detail {
        nlink: true,
        dir_size: true,
        mtime: true,
        content: true,
        xattrs: true,
    };
    ok!(tree::describe(&host.join("outside"), d))
}

#[track_caller]
fn assert_sentinel_unchanged(host: &Mount, before: &tree::Tree, m: &Mount, after: &str) {
    let diff = tree::diff(before, &sentinel(host), "before", "after");
    assert!(
        diff.is_empty(),
        "{after}: the directory outside SOURCE changed:\n{}",
        diff.join("\n")
    );
    let beside_mount = m.path().parent().unwrap().join("outside");
    assert!(
        !beside_mount.exists(),
        "{after}: {} was created",
        beside_mount.display()
    );
}

#[test]
fn passthrough_export_cannot_be_escaped() {
    require_mount!();
    let (host, m) = escape_setup();
    let before = sentinel(&host);
    // `..` at the root of the mount is the mount point's parent, never SOURCE's.
    assert_eq!(
        ok!(fs::metadata(m.join(".."))).ino(),
        ok!(fs::metadata(m.path().parent().unwrap())).ino()
    );
    assert_errno!(
        fs::metadata(m.join("../outside")),
        libc::ENOENT,
        "outside seen through .."
    );
    let root = m.path().to_path_buf();
    as_user(USER1.0, USER1.1, &[], move || {
        for link in ["up", "updeep"] {
            assert_eq!(
                ok!(fs::read_link(root.join(link))).to_str(),
                Some(if link == "up" {
                    "../outside"
                } else {
                    "../../../../../../../../outside"
                })
            );
            let l = root.join(link);
            let attempts: Vec<(&str, std::io::Result<()>)> = vec![
                ("read through", fs::read(l.join("secret")).map(drop)),
                ("mkdir through", fs::create_dir(l.join("x"))),
                ("create through", fs::write(l.join("f"), b"x")),
                ("mv into", fs::rename(root.join("file"), l.join("file"))),
                ("ln into", fs::hard_link(root.join("file"), l.join("x"))),
                ("symlink into", symlink("/etc/passwd", l.join("s"))),
                ("mkdir through sub", fs::create_dir(l.join("sub/y"))),
            ];
            for (what, r) in attempts {
                assert!(r.is_err(), "{link}: {what} succeeded");
            }
        }
    });
    assert_sentinel_unchanged(
        &host,
        &before,
        &m,
        "operations through symlinks above the root",
    );
    // Hard links and renames across the export boundary: EXDEV both ways.
    for (what, r) in [
        (
            "link out",
            fs::hard_link(m.join("file"), host.join("outside/x")),
        ),
        (
            "rename out",
            fs::rename(m.join("file"), host.join("outside/file")),
        ),
        (
            "link in",
            fs::hard_link(host.join("outside/secret"), m.join("s")),
        ),
        (
            "rename in",
            fs::rename(host.join("outside/secret"), m.join("s")),
        ),
        (
            "rename dir in",
            fs::rename(host.join("outside/sub"), m.join("sub")),
        ),
    ] {
        assert_errno!(r, libc::EXDEV, "{what} across the export boundary");
    }
    assert_sentinel_unchanged(&host, &before, &m, "links and renames across the boundary");
    assert_eq!(ok!(fs::read(m.join("file"))), b"inside");
}

/// Names (not paths) of everything below `dir`, without following symlinks.
fn names_below(dir: &Path) -> BTreeSet<String> {
    ok!(tree::describe(dir, Detail::default()))
        .into_keys()
        .filter_map(|k| k.rsplit('/').next().map(str::to_string))
        .collect()
}

#[test]
fn racing_symlink_swaps_cannot_redirect_the_server() {
    require_mount!();
    let (host, m) = escape_setup();
    ok!(fs::create_dir(host.join("export/dir/sub")));
    for d in ["export/dir", "export/dir/sub"] {
        ok!(sys::chmod(host.join(d), 0o777));
    }
    ok!(sys::chown(host.join("export/file"), USER1.0, USER1.1));
    ok!(symlink("../outside", host.join("export/swap")));
    ok!(symlink("../../outside", host.join("export/dir/subswap")));
    let before = sentinel(&host);
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = scaled(300, 10_000);
    let swapper = {
        let (stop, e) = (stop.clone(), host.join("export"));
        std::thread::spawn(move || {
            for k in 0..swaps {
                let (a, b) = match k % 2 {
                    0 => (e.join("dir"), e.join("swap")),
                    _ => (e.join("dir/sub"), e.join("dir/subswap")),
                };
                // Either pair may be mid-swap (the second lives inside the first).
                let _ = sys::renameat2(a, b, libc::RENAME_EXCHANGE);
                // Leave the mount side time in each state (this is no timing assertion).
                std::thread::sleep(Duration::from_millis(1));
            }
            stop.store(true, Ordering::Relaxed);
        })
    };
    let root = m.path().to_path_buf();
    let (ops, made, errors) = as_user(USER1.0, USER1.1, &[], move || {
        let mut made = Vec::new();
        let mut errors = std::collections::BTreeMap::<String, u64>::new();
        let mut i = 0;
        while !stop.load(Ordering::Relaxed) {
            let d = root.join(if i % 2 == 0 { "dir" } else { "dir/sub" });
            let (name, r) = match i % 4 {
                0 => (format!("c{i}"), fs::write(d.join(format!("c{i}")), b"x")),
                1 => (format!("m{i}"), fs::create_dir(d.join(format!("m{i}")))),
                2 => (
                    format!("r{i}"),
                    fs::write(d.join(format!("t{i}")), b"")
                        .and_then(|_| fs::rename(d.join(format!("t{i}")), d.join(format!("r{i}")))),
                ),
                _ => (
                    format!("l{i}"),
                    fs::hard_link(root.join("file"), d.join(format!("l{i}"))),
                ),
            };
            match r {
                Ok(()) => made.push(name),
                Err(e) => *errors.entry(errno_name(errno_of(&e))).or_default() += 1,
            }
            i += 1;
        }
        (i, made, errors)
    });
    swapper.join().unwrap();
    eprintln!(
        "{ops} operations against {swaps} host-side swaps: {} succeeded, errors {errors:?}",
        made.len()
    );
    assert!(!made.is_empty(), "nothing could be created during the race");
    for e in errors.keys() {
        assert!(
            ["ENOENT", "ENOTDIR", "EXDEV", "ELOOP"].contains(&e.as_str()),
            "unexpected error {e} during the race: {errors:?}"
        );
    }
    assert_sentinel_unchanged(&host, &before, &m, "the symlink-swap race");
    let found = names_below(&host.join("export"));
    let lost: Vec<_> = made.iter().filter(|n| !found.contains(*n)).collect();
    assert!(
        lost.is_empty(),
        "created through the mount but not below SOURCE: {lost:?}"
    );
}

#[test]
fn long_names_and_huge_xattrs_are_refused_cleanly() {
    require_mount!();
    for t in both_backends(&["size=1m"]) {
        let (name, m) = (t.name, &t.m);
        let root = m.path().to_path_buf();
        as_user(USER1.0, USER1.1, &[], move || {
            let f = root.join("f");
            ok!(fs::write(&f, b"x"));
            for len in [256, 1000, 1024, 1025, 4000] {
                let long = root.join("n".repeat(len));
                for (what, r) in [
                    ("create", fs::write(&long, b"")),
                    ("mkdir", fs::create_dir(&long)),
                    ("symlink", symlink("t", &long)),
                    ("link", fs::hard_link(&f, &long)),
                    ("rename", fs::rename(&f, &long)),
                    ("mkfifo", sys::mkfifo(&long, 0o644)),
                ] {
                    assert_errno!(r, libc::ENAMETOOLONG, "{name}: {what} of a {len}-byte name");
                }
            }
            assert!(
                ok!(sys::list(&root)).iter().all(|n| n.len() <= 255),
                "{name}: a long name was created"
            );
            let target = "t".repeat(4095);
            ok!(
                symlink(&target, root.join("longtarget")),
                "{name}: symlink to a 4095-byte target"
            );
            assert_eq!(
                ok!(fs::read_link(root.join("longtarget")))
                    .as_os_str()
                    .len(),
                4095
            );
            assert_errno!(
                sys::setxattr(&f, &format!("user.{}", "k".repeat(251)), b"v", 0),
                libc::ERANGE,
                "{name}: 256-byte xattr name"
            );
            assert_errno!(
                sys::setxattr(&f, "user.big", &vec![1u8; (64 << 10) + 1], 0),
                libc::E2BIG,
                "{name}: xattr value over 64 KiB"
            );
            ok!(
                sys::setxattr(&f, "user.max", &vec![2u8; 32 << 10], 0),
                "{name}: a 32 KiB xattr value"
            );
            assert_errno!(
                sys::getxattr_sized(&f, "user.max", 100),
                libc::ERANGE,
                "{name}: getxattr into a small buffer"
            );
            assert_eq!(ok!(sys::getxattr(&f, "user.max")), vec![2u8; 32 << 10]);
        });
        assert!(
            ok!(fs::metadata(m.join("f"))).is_file(),
            "{name}: the server keeps working"
        );
    }
}

#[test]
fn many_xattrs_stop_at_enospc_and_come_back() {
    require_mount!();
    let m = Mount::memofs(&["allow_other", "size=1m"]);
    let root = m.path().to_path_buf();
    as_user(USER1.0, USER1.1, &[], move || {
        let f = root.join("f");
        ok!(fs::write(&f, b""));
        let set =
            |i: usize| sys::setxattr(&f, &format!("user.x{i}"), &pattern(i as u64, 30_000), 0);
        let n = until_enospc("xattr of 30 kB", set);
        assert!((16..=34).contains(&n), "{n} xattrs of 30 kB fit in size=1m");
        for i in 0..n {
            assert_eq!(
                ok!(sys::getxattr(&f, &format!("user.x{i}"))),
                pattern(i as u64, 30_000)
            );
        }
        for i in 0..n {
            ok!(sys::removexattr(&f, &format!("user.x{i}")));
        }
        assert_eq!(
            until_enospc("xattr after freeing", set),
            n,
            "the same number fits again"
        );
    });
}

#[test]
fn trees_deeper_than_path_max() {
    require_mount!();
    for t in both_backends(&[]) {
        let (name, m) = (t.name, &t.m);
        let root = m.path().to_path_buf();
        let seg = "d".repeat(200);
        let top = m.join(&seg);
        let depth = as_user(USER1.0, USER1.1, &[], move || {
            let mut dir = ok!(Dir::open(&root));
            let mut path = root.clone();
            let mut depth = 0;
            // Descend with *at() calls until the path form is too long, then 10 levels more.
            let mut past = None;
            while past.is_none_or(|p| depth < p + 10) {
                ok!(
                    dir.mkdir(seg.as_bytes(), 0o755),
                    "{name}: mkdirat at depth {depth}"
                );
                dir = ok!(dir.sub(seg.as_bytes()));
                path.push(&seg);
                depth += 1;
                if past.is_none() {
                    if let Err(e) = fs::metadata(&path) {
                        assert_eq!(
                            errno_of(&e),
                            libc::ENAMETOOLONG,
                            "{name}: stat by path at depth {depth}: {e}"
                        );
                        assert!(path.as_os_str().len() >= libc::PATH_MAX as usize);
                        past = Some(depth);
                    }
                }
                assert!(
                    depth < 100,
                    "{name}: no ENAMETOOLONG by path at {} bytes",
                    path.as_os_str().len()
                );
            }
            let data = pattern(5, 10_000);
            let f = ok!(dir.openat(b"leaf", libc::O_CREAT | libc::O_RDWR, 0o644));
            ok!(std::os::unix::fs::FileExt::write_all_at(&f, &data, 0));
            assert_eq!(
                ok!(sys::pread_full(&f, 0, 20_000)),
                data,
                "{name}: data at depth {depth}"
            );
            assert_eq!(ok!(dir.stat(b"leaf")).st_size, 10_000);
            depth
        });
        assert!(
            ok!(fs::metadata(m.path())).is_dir(),
            "{name}: server works after depth {depth}"
        );
        rm_rf(&top);
        if let Some(h) = &t.host {
            assert_eq!(
                ok!(sys::list(h.join("export"))),
                Vec::<String>::new(),
                "{name}: host tree removed"
            );
        }
        eprintln!(
            "{name}: {depth} levels ({} bytes of path) created, used and removed",
            depth * 201
        );
    }
}

/// Soft `RLIMIT_NOFILE` of a process.
fn nofile_limit(pid: u32) -> u64 {
    let text = ok!(fs::read_to_string(format!("/proc/{pid}/limits")));
    text.lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse().ok())
        .expect("Max open files in /proc/PID/limits")
}

/// Create `n` entries named `e0000000`.. in `dir` from two threads with `mknodat(mode)`.
fn make_entries(dir: &Path, n: u64, mode: u32) {
    std::thread::scope(|s| {
        for t in 0..2u64 {
            s.spawn(move || {
                let d = ok!(Dir::open(dir));
                for i in (t..n).step_by(2) {
                    ok!(
                        d.mknod(format!("e{i:07}").as_bytes(), mode),
                        "entry {i} of {n}"
                    );
                }
            });
        }
    });
}

#[test]
fn directory_with_many_entries() {
    require_mount!();
    let n = scaled(200_000, 2_000_000);
    let m = Mount::memofs(&["allow_other"]);
    let pid = m.server_pid().unwrap();
    let baseline = stats_usage(m.path()).unwrap_or_else(|e| panic!("{e}"));
    let big = m.join("big");
    ok!(fs::create_dir(&big));
    let rss0 = rss_bytes(pid);
    // FIFOs: full inodes and names without a data file each (see
    // `regular_files_beyond_the_server_descriptor_limit`).
    make_entries(&big, n, libc::S_IFIFO | 0o644);
    let dir = ok!(sys::open_dir(&big));
    let mut seen = BTreeSet::new();
    loop {
        let batch = ok!(sys::getdents(&dir, 32 << 10));
        if batch.is_empty() {
            break;
        }
        for e in batch {
            let name = String::from_utf8(e.name).unwrap();
            if name != "." && name != ".." {
                assert!(seen.insert(name), "an entry listed twice");
            }
        }
    }
    drop(dir);
    assert_eq!(seen.len() as u64, n, "entries listed");
    assert!(
        seen.iter()
            .enumerate()
            .all(|(i, s)| *s == format!("e{i:07}")),
        "listed names differ from those created"
    );
    let rss1 = rss_bytes(pid);
    let per_entry = rss1.saturating_sub(rss0) / n;
    eprintln!(
        "{n} entries: server RSS {} -> {} MiB, {per_entry} bytes per entry",
        rss0 >> 20,
        rss1 >> 20
    );
    assert!(
        per_entry < 2048,
        "server memory grows by {per_entry} bytes per directory entry"
    );
    assert!(process_alive(pid));
    rm_rf(&big);
    eventually(
        "inodes given back after rm -rf",
        Duration::from_secs(30),
        || {
            let u = stats_usage(m.path()).unwrap_or_else(|e| panic!("{e}"));
            (u.inodes_used == baseline.inodes_used, u)
        },
    );
}

#[test]

fn regular_files_beyond_the_server_descriptor_limit() {
    require_mount!();
    let m = Mount::memofs(&["allow_other"]);
    let n = nofile_limit(m.server_pid().unwrap()) + 100;
    if n > 300_000 {
        skip!(
            Limit("nofile"),
            "the server may open {n} files: too many to create here"
        );
    }
    let big = m.join("files");
    ok!(fs::create_dir(&big));
    ok!(sys::chmod(&big, 0o1777));
    let dir = big.clone();
    as_user(USER1.0, USER1.1, &[], move || {
        make_entries(&dir, n, libc::S_IFREG | 0o644)
    });
    ok!(
        fs::write(m.join("after"), b"root can still create files"),
        "a create by another user"
    );
    rm_rf(&big);
}
