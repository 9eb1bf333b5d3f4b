//! A passthrough export keeps serving a tree many times larger than its server's descriptor
//! budget: cold inode descriptors are closed and opened again from their file handles, so no
//! caller ever sees `ENFILE` or `EMFILE` for a descriptor the server could free.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use memofs_e2e::checks::{rss_bytes, stats_usage};
use memofs_e2e::user::{as_user, USER1, USER2};
use memofs_e2e::{ok, require_mount, run, sys, Mount};

/// The server's `RLIMIT_NOFILE`: a budget of 400 descriptors after the 256 it reserves.
const NOFILE: u64 = 656;
const BUDGET: u64 = NOFILE - 256;
/// Directories each user makes, and files in each: 4 000 files, ten times the budget.
const DIRS: usize = 20;
const FILES: usize = 100;

fn content(dir: usize, file: usize) -> String {
    format!("file {file} of directory {dir}\n")
}

/// `DIRS` directories of `FILES` files under `top`, as `user`.
fn make_tree(user: (u32, u32), top: PathBuf) {
    as_user(user.0, user.1, &[], move || {
        ok!(fs::create_dir(&top));
        for d in 0..DIRS {
            let dir = top.join(format!("d{d}"));
            ok!(fs::create_dir(&dir));
            for f in 0..FILES {
                ok!(fs::write(dir.join(format!("f{f}")), content(d, f)));
            }
        }
    });
}

/// Open descriptors of process `pid`.
fn open_fds(pid: u32) -> u64 {
    ok!(fs::read_dir(format!("/proc/{pid}/fd"))).count() as u64
}

#[track_caller]
fn within_budget(m: &Mount, pid: u32, when: &str) {
    let usage = stats_usage(m.path()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(usage.descriptors_limit, BUDGET, "{when}: the budget");
    assert!(usage.descriptors_used <= BUDGET, "{when}: {usage:?}");
    assert!(open_fds(pid) <= NOFILE, "{when}: {} open", open_fds(pid));
}

fn run_ok(program: &str, args: &[&str], cwd: &Path) -> String {
    let out = run(program, args, Some(cwd), Duration::from_secs(300));
    out.assert_success();
    out.stdout
}

#[test]
fn an_export_serves_a_tree_ten_times_its_descriptor_budget() {
    require_mount!();
    let host = Mount::tmpfs(&["size=256m"]);
    let src = host.join("export");
    ok!(fs::create_dir(&src));
    ok!(sys::chmod(&src, 0o1777));
    let m = Mount::try_memofs_source_nofile(&src, &["allow_other"], NOFILE)
        .unwrap_or_else(|e| panic!("{e}"));
    let pid = m.server_pid().expect("a memofs server");
    within_budget(&m, pid, "at the start");
    let rss0 = rss_bytes(pid);

    // Two users each make 2 000 files through the mount at once; a host process makes a
    // tree of its own beside them, which the mount then serves too.
    let makers: Vec<_> = [(USER1, "u1"), (USER2, "u2")]
        .into_iter()
        .map(|(user, name)| {
            let top = m.join(name);
            std::thread::spawn(move || make_tree(user, top))
        })
        .collect();
    for d in 0..DIRS {
        let dir = src.join(format!("host/d{d}"));
        ok!(fs::create_dir_all(&dir));
        for f in 0..FILES {
            ok!(fs::write(dir.join(format!("f{f}")), content(d, f)));
        }
    }
    for t in makers {
        t.join().unwrap();
    }
    within_budget(&m, pid, "after the creates");

    // Everything the kernel now holds, listed with attributes, then read.
    let listed = run_ok("find", &[".", "-ls"], m.path());
    let expected = 1 + 3 * (1 + DIRS * (1 + FILES));
    assert_eq!(listed.lines().count(), expected, "find -ls lines");
    let matches = run_ok("grep", &["-r", "-c", "of directory", "."], m.path());
    let total: usize = matches
        .lines()
        .map(|l| l.rsplit(':').next().unwrap().parse::<usize>().unwrap())
        .sum();
    assert_eq!(total, 3 * DIRS * FILES, "grep -r matches");
    for (top, d, f) in [("u1", 3, 7), ("u2", 19, 99), ("host", 0, 0)] {
        let got = ok!(fs::read_to_string(m.join(format!("{top}/d{d}/f{f}"))));
        assert_eq!(got, content(d, f), "{top}/d{d}/f{f}");
    }
    within_budget(&m, pid, "after find -ls and grep -r");
    // Reads may all come from the kernel's page cache, and a read-only open of a file the
    // kernel caches needs no host descriptor: open more files for writing than the budget
    // holds, twice. A writer needs its host file's descriptor, so the second round must open
    // again some that the first one's later files made room by closing.
    let writers: Vec<PathBuf> = (0..BUDGET as usize / FILES + 1)
        .flat_map(|d| (0..FILES).map(move |f| format!("u1/d{d}/f{f}")))
        .map(|p| m.join(p))
        .collect();
    for _ in 0..2 {
        for p in &writers {
            ok!(fs::OpenOptions::new().append(true).open(p));
        }
    }
    within_budget(&m, pid, "after opening files to write");
    let usage = stats_usage(m.path()).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        usage.descriptors_reopened > 0,
        "none opened again: {usage:?}"
    );
    let rss = rss_bytes(pid);
    let per_inode = rss.saturating_sub(rss0) / (3 * (DIRS * (FILES + 1) + 1)) as u64;
    assert!(
        per_inode < 4096,
        "server memory grew {per_inode} bytes per inode"
    );

    // A host-side rename of a directory whose descriptor was closed: the mount follows.
    ok!(fs::rename(src.join("host/d5"), src.join("host/renamed")));
    let got = ok!(fs::read_to_string(m.join("host/renamed/f9")));
    assert_eq!(got, content(5, 9));

    // And everything goes, through the mount.
    for top in ["u1", "u2", "host"] {
        run_ok("rm", &["-rf", top], m.path());
    }
    assert_eq!(ok!(fs::read_dir(&src)).count(), 0, "the export is empty");
    within_budget(&m, pid, "after rm -rf");
}
