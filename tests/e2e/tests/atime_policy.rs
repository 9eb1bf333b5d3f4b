//! atime policy (issue 5): strictatime, relatime (default) and noatime, nodiratime, and
//! unlinked-but-open files that never change atime. Times are set with utimensat, then a read
//! or a listing goes through the mount, then `stat` shows what the server decided.

use std::fs;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use memofs_e2e::sys::{utimensat, Ts};
use memofs_e2e::{ok, require_mount, Mount};

const HOUR: i64 = 3600;

fn now_s() -> i64 {
    memofs_e2e::sys::now().0
}

fn atime(p: &Path) -> (i64, i64) {
    let m = ok!(fs::metadata(p));
    (m.atime(), m.atime_nsec())
}

/// Reads the whole file through a fresh open (no page cache kept across opens).
fn read_through(p: &Path) {
    let mut buf = Vec::new();
    ok!(ok!(fs::File::open(p)).read_to_end(&mut buf));
    assert!(!buf.is_empty());
}

fn list(p: &Path) {
    ok!(fs::read_dir(p)).for_each(drop);
}

/// For one mount option, whether an access updates atime when (a) atime == mtime and (b)
/// atime is newer than mtime and ctime.
fn check(options: &[&str], update_when_equal: bool, update_when_newer: bool, dir_updates: bool) {
    require_mount!();
    let m = Mount::mem(options);
    let option = options.join(",");
    let f = m.join("file");
    let d = m.join("dir");
    ok!(fs::write(&f, b"some data"));
    ok!(fs::create_dir(&d));
    ok!(fs::write(d.join("entry"), b"e"));
    let old = now_s() - 2 * HOUR;
    let future = now_s() + HOUR;

    // (a) atime == mtime, both old.
    ok!(utimensat(&f, Ts::At(old, 0), Ts::At(old, 0), 0));
    read_through(&f);
    assert_eq!(
        atime(&f) != (old, 0),
        update_when_equal,
        "{option}: read with atime == mtime"
    );

    // (b) atime newer than mtime and ctime (utimensat sets ctime to now; atime is later).
    ok!(utimensat(&f, Ts::At(future, 0), Ts::At(old, 0), 0));
    read_through(&f);
    assert_eq!(
        atime(&f) != (future, 0),
        update_when_newer,
        "{option}: read with atime newer than mtime and ctime"
    );

    // Directories, listed with readdir: atime == mtime.
    ok!(utimensat(&d, Ts::At(old, 0), Ts::At(old, 0), 0));
    list(&d);
    assert_eq!(
        atime(&d) != (old, 0),
        dir_updates,
        "{option}: readdir with atime == mtime"
    );

    // utimensat always works, whatever the policy.
    ok!(utimensat(&f, Ts::At(12345, 678), Ts::Omit, 0));
    assert_eq!(atime(&f), (12345, 678), "{option}: utimensat");
}

#[test]
fn strictatime_updates_on_every_access() {
    check(&["strictatime"], true, true, true);
}

#[test]
fn relatime_updates_only_when_atime_is_not_newer() {
    check(&["relatime"], true, false, true);
}

#[test]
fn noatime_never_updates_on_access() {
    check(&["noatime"], false, false, false);
}

#[test]
fn nodiratime_spares_directories_only() {
    check(&["strictatime", "nodiratime"], true, true, false);
}

#[test]
fn unlinked_open_files_never_update_atime() {
    require_mount!();
    // memofs only: kernel tmpfs does update an unlinked file's atime.
    let m = Mount::memofs(&["strictatime"]);
    let p = m.join("gone");
    ok!(fs::write(&p, b"still readable"));
    let t = now_s() - HOUR;
    ok!(utimensat(&p, Ts::At(t, 0), Ts::At(t, 0), 0));
    let mut f = ok!(fs::File::open(&p));
    ok!(fs::remove_file(&p));
    let mut buf = Vec::new();
    ok!(f.read_to_end(&mut buf));
    assert_eq!(buf, b"still readable");
    let md = ok!(f.metadata());
    assert_eq!(md.nlink(), 0);
    assert_eq!(
        (md.atime(), md.atime_nsec()),
        (t, 0),
        "an unlinked file's atime changed on read"
    );
}

/// An export under `noatime` moves no host file's atime, whether a file is read or mapped
/// (the kernel's passthrough would read the host file with the opener's flags, which carry
/// no `O_NOATIME`; such a mount serves its files through the server instead).
#[test]
fn noatime_export_leaves_host_atime_alone() {
    require_mount!();
    if !memofs_e2e::is_root() {
        memofs_e2e::skip!(Root, "the export's host tmpfs needs root");
    }
    let (host, m) = memofs_e2e::checks::export_tmpfs("export", &["size=16m"], &["noatime"]);
    let on_host = host.join("export/f");
    ok!(fs::write(&on_host, b"read me"));
    // An atime older than mtime: the host's relatime would move it at the next read.
    ok!(utimensat(
        &on_host,
        Ts::At(now_s() - 7200, 0),
        Ts::At(now_s() - 3600, 0),
        0
    ));
    let before = atime(&on_host);
    read_through(&m.join("f"));
    let f = ok!(fs::File::open(m.join("f")));
    let map = ok!(memofs_e2e::map::Map::private(&f, 0, 4096));
    drop(map);
    drop(f);
    assert_eq!(atime(&on_host), before, "the host file's atime moved");
}
