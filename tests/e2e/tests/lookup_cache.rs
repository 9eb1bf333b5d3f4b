//! Lookup caching (issue 4): negative entries are cached by the kernel, and every namespace
//! operation through the mount is visible at once to every process, even with hour-long
//! timeouts. The counters of `memofs stats` show whether a lookup reached the server.

use std::fs;
use std::os::unix::fs::{symlink, OpenOptionsExt};
use std::path::Path;
use std::process::Command;

use memofs_e2e::checks::{counter, settled};
use memofs_e2e::{assert_errno, memofs, ok, require_mount, Mount};

const LONG: &[&str] = &[
    "negative_timeout=3600",
    "entry_timeout=3600",
    "attr_timeout=3600",
];

/// `stat` of `p` from another process: true if it exists.
fn exists_elsewhere(p: &Path) -> bool {
    Command::new("stat")
        .arg("-c")
        .arg("%i")
        .arg(p)
        .output()
        .expect("run stat")
        .status
        .success()
}

fn assert_missing_everywhere(p: &Path) {
    assert_errno!(
        fs::symlink_metadata(p),
        libc::ENOENT,
        "stat {} here",
        p.display()
    );
    assert!(
        !exists_elsewhere(p),
        "{} still visible to another process",
        p.display()
    );
}

fn assert_present_everywhere(p: &Path) {
    ok!(fs::symlink_metadata(p), "stat {} here", p.display());
    assert!(
        exists_elsewhere(p),
        "{} not visible to another process",
        p.display()
    );
}

#[test]
fn misses_are_cached_only_with_a_negative_timeout() {
    require_mount!();
    for (opts, cached) in [(LONG, true), (&["negative_timeout=0"][..], false)] {
        let m = Mount::memofs(opts);
        let p = m.join("non-existent.txt");
        assert_missing_everywhere(&p);
        let before = settled(&m, "LOOKUP");
        for _ in 0..200 {
            assert!(fs::metadata(&p).is_err());
        }
        let lookups = settled(&m, "LOOKUP") - before;
        if cached {
            assert!(
                lookups <= 2,
                "{opts:?}: 200 stats of a cached miss sent {lookups} LOOKUPs"
            );
            assert!(counter(&m, "negative_entries") >= 1);
        } else {
            assert!(
                lookups >= 200,
                "{opts:?}: expected every miss to reach the server, saw {lookups}"
            );
            assert_eq!(counter(&m, "negative_entries"), 0);
        }
    }
}

/// Each way of making a name appear, tried on a name whose miss is cached.
#[test]
fn creations_are_visible_at_once_despite_cached_misses() {
    require_mount!();
    let m = Mount::memofs(LONG);
    ok!(fs::write(m.join("src"), b"x"));
    ok!(fs::write(m.join("rename-me"), b"y"));
    type Make = fn(&Path, &Path);
    let makers: [(&str, Make); 7] = [
        ("open(O_CREAT)", |_, p| {
            drop(ok!(fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o644)
                .open(p)))
        }),
        ("open(O_CREAT|O_EXCL)", |_, p| {
            drop(ok!(fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(p)))
        }),
        ("mkdir", |_, p| ok!(fs::create_dir(p))),
        ("mknod(fifo)", |_, p| {
            ok!(memofs_e2e::sys::mknod(p, libc::S_IFIFO | 0o644, 0))
        }),
        ("symlink", |_, p| ok!(symlink("target", p))),
        ("link", |root, p| ok!(fs::hard_link(root.join("src"), p))),
        ("rename onto", |root, p| {
            ok!(fs::rename(root.join("rename-me"), p))
        }),
    ];
    for (i, (what, make)) in makers.iter().enumerate() {
        let p = m.join(format!("new-{i}"));
        assert_missing_everywhere(&p);
        make(m.path(), &p);
        assert!(
            fs::symlink_metadata(&p).is_ok(),
            "{what}: not visible to the creating process"
        );
        assert!(
            exists_elsewhere(&p),
            "{what}: not visible to another process"
        );
    }
    // Case matters: a cached miss of one spelling never hides another.
    let lower = m.join("readme");
    assert_missing_everywhere(&lower);
    ok!(fs::write(m.join("README"), b"r"));
    assert_present_everywhere(&m.join("README"));
    assert_missing_everywhere(&lower);
}

/// Each way of making a cached name disappear.
#[test]
fn removals_are_visible_at_once_despite_cached_entries() {
    require_mount!();
    let m = Mount::memofs(LONG);
    ok!(fs::create_dir(m.join("dir")));
    ok!(fs::write(m.join("file"), b"f"));
    ok!(fs::write(m.join("moved"), b"m"));
    ok!(fs::write(m.join("victim"), b"v"));
    ok!(fs::write(m.join("winner"), b"w"));
    for name in ["dir", "file", "moved", "victim", "winner"] {
        assert_present_everywhere(&m.join(name));
    }
    ok!(fs::remove_dir(m.join("dir")));
    assert_missing_everywhere(&m.join("dir"));
    ok!(fs::remove_file(m.join("file")));
    assert_missing_everywhere(&m.join("file"));
    ok!(fs::rename(m.join("moved"), m.join("elsewhere")));
    assert_missing_everywhere(&m.join("moved"));
    assert_present_everywhere(&m.join("elsewhere"));
    // Rename over a cached name: the name now shows the new file.
    ok!(fs::rename(m.join("winner"), m.join("victim")));
    assert_eq!(ok!(fs::read(m.join("victim"))), b"w");
    let out = Command::new("cat").arg(m.join("victim")).output().unwrap();
    assert_eq!(out.stdout, b"w", "another process reads the replaced file");
    assert_missing_everywhere(&m.join("winner"));
}

/// A miss cached inside a directory stays correct when the directory is renamed and a file of
/// that name is created under the new name.
#[test]
fn cached_misses_follow_directory_renames() {
    require_mount!();
    let m = Mount::memofs(LONG);
    ok!(fs::create_dir(m.join("a")));
    assert_missing_everywhere(&m.join("a/x"));
    ok!(fs::rename(m.join("a"), m.join("b")));
    assert_missing_everywhere(&m.join("a"));
    assert_missing_everywhere(&m.join("b/x"));
    ok!(fs::write(m.join("b/x"), b"1"));
    assert_present_everywhere(&m.join("b/x"));
}

#[test]
fn stats_report_the_policy_and_usage() {
    require_mount!();
    let m = Mount::memofs(&["cache=auto", "negative_timeout=2.5", "size=8m"]);
    ok!(fs::write(m.join("f"), vec![1u8; 10_000]));
    let out = memofs(&["stats", "--json", m.path().to_str().unwrap()]);
    out.assert_success();
    for want in [
        "\"mode\":\"auto\"",
        "\"negative_timeout\":2.5",
        "\"entry_timeout\":1",
        "\"bytes_used\":12288",
        "\"bytes_limit\":8388608",
    ] {
        assert!(
            out.stdout.contains(want),
            "stats lacks {want}: {}",
            out.stdout
        );
    }
    let human = memofs(&["stats", m.path().to_str().unwrap()]);
    human.assert_success();
    for want in [
        "8.0 MiB",
        "Lookups",
        "missing",
        "negative_timeout",
        "2.5 s",
        "Requests",
    ] {
        assert!(
            human.stdout.contains(want),
            "the table lacks {want}: {}",
            human.stdout
        );
    }
    let not_memofs = memofs(&["stats", "/"]);
    assert!(!not_memofs.success());
}
