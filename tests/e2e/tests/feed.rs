//! A change feed (`-o changes=exec:PROGRAM`): a program whose output names paths changed
//! where memofs cannot see them. Here the source is a local directory with the watcher off,
//! changed behind memofs's back, and the program reads the names the test gives it from a
//! FIFO: each change stays hidden behind the kernel's hour-long caches until the feed names
//! its path, and shows through memofs once it has; file pages the kernel keeps across opens
//! too.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use memofs_e2e::checks::{settled, stats_json};
use memofs_e2e::{ok, require_mount, Mount, TempDir};

/// How long a named change may take to show (a loaded machine's slack included).
const BOUND: Duration = Duration::from_secs(3);

fn shows(cond: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < BOUND {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// Holds for `d`: what the kernel keeps is not dropped by anything but the feed.
fn stays(d: Duration, cond: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < d {
        if !cond() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

fn exists(p: &Path) -> bool {
    fs::symlink_metadata(p).is_ok()
}

#[test]
fn a_feed_program_names_the_paths_changed_behind_memofs() {
    require_mount!();
    let base = TempDir::new("memofs-e2e-feed-");
    let (src, fifo, program) = (
        base.path().join("src"),
        base.path().join("changes"),
        base.path().join("feed.sh"),
    );
    ok!(fs::create_dir(&src));
    let path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("no NUL");
    // SAFETY: `path` is a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0, "mkfifo");
    ok!(fs::write(
        &program,
        format!("#!/bin/sh\nexec cat '{}'\n", fifo.display())
    ));
    ok!(fs::set_permissions(
        &program,
        fs::Permissions::from_mode(0o755)
    ));
    // Read-write, so that opening it waits for no reader and the feed never sees its end.
    let mut feed = ok!(fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo));
    ok!(fs::write(src.join("f"), b"old"));
    let changes = format!("changes=exec:{}", program.display());
    let m = Mount::try_memofs_source(
        &src,
        &[
            "watch=off",
            "cache=always",
            "negative_timeout=3600",
            &changes,
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let doc = stats_json(m.path()).unwrap_or_else(|e| panic!("{e}"));
    assert!(doc.contains("feed.sh"), "the feed runs: {doc}");
    let mut name = |path: &str| {
        ok!(feed.write_all(format!("{path}\n").as_bytes()));
    };

    // A name created behind memofs after it answered a miss.
    assert!(!exists(&m.join("new")));
    ok!(fs::write(src.join("new"), b"made behind memofs"));
    assert!(
        stays(Duration::from_millis(300), || !exists(&m.join("new"))),
        "something besides the feed showed the new name"
    );
    name("new");
    assert!(
        shows(|| exists(&m.join("new"))),
        "the named path never showed"
    );

    // A name below a directory, and data rewritten.
    ok!(fs::create_dir(m.join("d")));
    assert!(!exists(&m.join("d/x")));
    assert_eq!(ok!(fs::read(m.join("f"))), b"old");
    ok!(fs::write(src.join("d/x"), b"x"));
    ok!(fs::write(src.join("f"), b"new and longer"));
    name("/d/x");
    name("f");
    assert!(shows(|| exists(&m.join("d/x"))), "d/x never showed");
    assert!(
        shows(|| fs::read(m.join("f")).is_ok_and(|d| d == b"new and longer")),
        "the rewritten data never showed"
    );

    // File pages are kept across opens (the feed is to name every data change): a file read
    // again sends no READ; and a rewrite of the same size behind memofs shows once named.
    ok!(fs::write(m.join("kept"), b"read again"));
    assert_eq!(ok!(fs::read(m.join("kept"))), b"read again");
    let reads = settled(&m, "READ");
    for _ in 0..3 {
        assert_eq!(ok!(fs::read(m.join("kept"))), b"read again");
    }
    assert_eq!(settled(&m, "READ"), reads, "reads again reached memofs");
    ok!(fs::write(src.join("kept"), b"READ AGAIN"));
    name("kept");
    assert!(
        shows(|| fs::read(m.join("kept")).is_ok_and(|d| d == b"READ AGAIN")),
        "the rewrite of the same size never showed"
    );

    // A directory named by the feed that is some process's working directory stays one
    // (git fails with "unable to get current working directory" otherwise).
    let mut inside = ok!(std::process::Command::new("sleep")
        .arg("60")
        .current_dir(m.join("d"))
        .spawn());
    name("d");
    ok!(fs::write(src.join("after-d"), b""));
    name("after-d");
    assert!(
        shows(|| exists(&m.join("after-d"))),
        "the name after d never showed"
    );
    let cwd = ok!(fs::read_link(format!("/proc/{}/cwd", inside.id())));
    let _ = inside.kill();
    let _ = inside.wait();
    assert_eq!(cwd, m.join("d"), "the working directory was dropped");

    // A name no line can hold, as a JSON string; and a deletion.
    assert!(!exists(&m.join("two\nlines")));
    ok!(fs::write(src.join("two\nlines"), b""));
    ok!(fs::remove_file(src.join("new")));
    name(r#""two\nlines""#);
    name("new");
    assert!(
        shows(|| exists(&m.join("two\nlines"))),
        "the odd name never showed"
    );
    assert!(shows(|| !exists(&m.join("new"))), "the deleted name stayed");
    drop(m);
}
