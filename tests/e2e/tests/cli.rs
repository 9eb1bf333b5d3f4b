//! The command line: option errors, bad mount points, double mounts, missing /dev/fuse,
//! --version and --help, background mode, signals, and recovering from a killed server.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use memofs_e2e::cli::sh;
use memofs_e2e::{
    assert_errno, is_memofs_info, is_mounted, is_root, memofs, memofs_bin, mountinfo_for, ok,
    require_mount, skip, sys, which, with_timeout, CliOutput, Mount, TempDir, UnmountGuard,
    FUSE_SUPER_MAGIC,
};

/// A fresh mount point that is unmounted (if anything got mounted) when dropped.
struct Target {
    _dir: TempDir,
    mnt: PathBuf,
    _guard: UnmountGuard,
}

fn target() -> Target {
    let dir = TempDir::new("memofs-e2e-cli-");
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    Target {
        _guard: UnmountGuard(mnt.clone()),
        mnt,
        _dir: dir,
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[track_caller]
fn assert_fails_cleanly(out: &CliOutput, mnt: &Path, what: &str) {
    assert!(
        out.status.is_some(),
        "{}",
        out.describe(&format!("{what}: must not hang"))
    );
    assert!(
        !out.success(),
        "{}",
        out.describe(&format!("{what}: must fail"))
    );
    assert!(
        !out.stderr.trim().is_empty(),
        "{}",
        out.describe(&format!("{what}: must say why on stderr"))
    );
    assert!(
        !is_mounted(mnt),
        "{what}: something is mounted at {} after a failed mount",
        mnt.display()
    );
}

const BAD_OPTIONS: &[(&str, &str)] = &[
    ("bogus", "bogus"),
    ("size=12q", "size=12q"),
    ("size=", "size"),
    ("size=-1", "size=-1"),
    ("mode=9", "mode=9"),
    ("mode=", "mode"),
    ("cache=sometimes", "cache=sometimes"),
    ("cache=", "cache"),
    ("threads=0", "threads=0"),
    ("threads=100000", "threads=100000"),
    ("threads=two", "threads=two"),
    ("busy_poll=fast", "busy_poll=fast"),
    ("busy_poll=20000", "busy_poll=20000"),
    ("entry_timeout=-1", "entry_timeout=-1"),
    ("attr_timeout=abc", "attr_timeout=abc"),
    ("negative_timeout=-3", "negative_timeout=-3"),
    ("nr_inodes=12x", "nr_inodes=12x"),
    ("uid=abc", "uid=abc"),
    ("gid=-1", "gid=-1"),
    ("writeback=maybe", "writeback=maybe"),
    ("passthrough=sometimes", "passthrough=sometimes"),
    ("huge=sometimes", "huge=sometimes"),
    ("direct_io=yes", "direct_io"),
    ("size=1m,bogus2", "bogus2"),
    ("mode=0755,cache=sometimes,size=1m", "cache=sometimes"),
];

#[test]
fn malformed_options_exit_2_and_name_the_option() {
    if !is_root() {
        skip!(Root, "needs root");
    }
    let mut failures = Vec::new();
    for (opt, named) in BAD_OPTIONS {
        let t = target();
        // Without -f: a wrongly accepted option would mount in the background (the guard cleans
        // up) instead of blocking the test.
        let out = memofs(&["mount", "-o", opt, s(&t.mnt)]);
        let mounted = is_mounted(&t.mnt);
        let lines = out.stderr.trim().lines().count();
        if out.code() != Some(2) || !out.stderr.contains(named) || lines != 1 || mounted {
            failures.push(format!(
                "-o {opt}: exit {:?} (want 2), stderr {:?} (want one line naming {named:?}), mounted afterwards: {mounted}",
                out.code(),
                out.stderr.trim()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "malformed options not rejected properly:\n{}",
        failures.join("\n")
    );
}

#[test]
fn unknown_command_line_arguments_fail() {
    let out = memofs(&["frobnicate"]);
    assert!(
        !out.success() && !out.stderr.trim().is_empty(),
        "{}",
        out.describe("unknown subcommand")
    );
    let t = target();
    let out = memofs(&["mount", "--no-such-flag", s(&t.mnt)]);
    assert!(!out.success(), "{}", out.describe("unknown flag"));
    assert!(!is_mounted(&t.mnt));
}

#[test]
fn missing_mount_point() {
    if !is_root() {
        skip!(Root, "needs root");
    }
    let t = target();
    let missing = t.mnt.join("does-not-exist");
    let out = memofs(&["mount", s(&missing)]);
    assert_fails_cleanly(&out, &missing, "mount on a missing directory");
    assert!(
        out.stderr.contains("does-not-exist"),
        "{}",
        out.describe("the message should name the mount point")
    );
}

#[test]
fn mount_point_is_a_regular_file() {
    if !is_root() {
        skip!(Root, "needs root");
    }
    let t = target();
    let file = t.mnt.join("plain-file");
    ok!(fs::write(&file, b"x"));
    let out = memofs(&["mount", s(&file)]);
    assert_fails_cleanly(&out, &file, "mount on a regular file");
    assert!(
        out.stderr.contains("plain-file"),
        "{}",
        out.describe("the message should name the mount point")
    );
    assert_eq!(ok!(fs::read(&file)), b"x");
}

#[test]
fn backends_reject_each_others_options_and_missing_sources() {
    if !is_root() {
        skip!(Root, "needs root");
    }
    let src = TempDir::new("memofs-e2e-src-");
    for opt in [
        "size=1m",
        "nr_inodes=100",
        "mode=0755",
        "uid=1",
        "gid=1",
        "huge=never",
    ] {
        let t = target();
        let out = memofs(&["mount", "-o", opt, s(src.path()), s(&t.mnt)]);
        let name = opt.split('=').next().unwrap();
        assert_eq!(
            out.code(),
            Some(2),
            "{}",
            out.describe(&format!("-o {opt} with a SOURCE must be refused"))
        );
        assert!(
            out.stderr.contains(name),
            "{}",
            out.describe("the message should name the option")
        );
        assert!(
            !is_mounted(&t.mnt),
            "-o {opt} with a SOURCE: something got mounted"
        );
    }
    // ... and the other way round: a passthrough-only option without a SOURCE.
    let t = target();
    let out = memofs(&["mount", "-o", "watch=off", s(&t.mnt)]);
    assert_eq!(
        out.code(),
        Some(2),
        "{}",
        out.describe("-o watch=off without a SOURCE must be refused")
    );
    assert!(
        out.stderr.contains("watch") && out.stderr.contains("passthrough"),
        "{}",
        out.describe("the message should name the option and the backend")
    );
    assert!(
        !is_mounted(&t.mnt),
        "-o watch=off without a SOURCE: mounted"
    );
    let t = target();
    let missing = src.path().join("no-such-source");
    let out = memofs(&["mount", s(&missing), s(&t.mnt)]);
    assert_fails_cleanly(&out, &t.mnt, "mount of a missing SOURCE");
    assert!(
        out.stderr.contains("no-such-source"),
        "{}",
        out.describe("the message should name the source")
    );
}

#[test]
fn already_mounted_target_fails_and_first_mount_keeps_working() {
    require_mount!();
    let m = Mount::memofs(&["size=16m"]);
    ok!(fs::write(m.join("before"), b"first mount"));
    let count = |p: &Path| {
        memofs_e2e::mount::mounts()
            .iter()
            .filter(|i| i.mount_point == p)
            .count()
    };
    assert_eq!(count(m.path()), 1);
    let out = memofs(&["mount", s(m.path())]);
    let stacked = count(m.path());
    if stacked > 1 {
        // Take the second one off again so the first can be checked and cleaned up.
        let _ = memofs(&["umount", s(m.path())]);
    }
    assert!(
        !out.success() && !out.stderr.trim().is_empty(),
        "{}",
        out.describe("mounting on an already-mounted target must fail with a message")
    );
    assert_eq!(stacked, 1, "a second mount was stacked on the first");
    assert_eq!(
        ok!(fs::read(m.join("before"))),
        b"first mount",
        "the first mount still serves its files"
    );
    ok!(fs::write(m.join("after"), b"still works"));
    assert_eq!(ok!(fs::read(m.join("after"))), b"still works");
}

#[test]
fn missing_dev_fuse() {
    if !is_root() {
        skip!(Root, "needs root");
    }
    if which("unshare").is_none() {
        skip!(Tool("unshare"));
    }
    let t = target();
    let script = format!(
        "mount -t tmpfs none /dev && exec {} mount {}",
        memofs_bin().display(),
        t.mnt.display()
    );
    let out = memofs_e2e::run(
        "unshare",
        &["-m", "sh", "-c", &script],
        None,
        Duration::from_secs(30),
    );
    if out.stderr.contains("unshare failed") || out.stderr.contains("mount: ") {
        skip!(
            MountNamespace,
            "cannot make a mount namespace here: {}",
            out.stderr.trim()
        );
    }
    assert!(
        out.status.is_some() && !out.success(),
        "{}",
        out.describe("mount without /dev/fuse must fail")
    );
    assert!(
        out.stderr.contains("/dev/fuse"),
        "{}",
        out.describe("the message should mention /dev/fuse")
    );
    assert!(!is_mounted(&t.mnt));
}

#[test]
fn version() {
    let out = memofs(&["--version"]);
    out.assert_success();
    assert!(
        out.stdout.contains("memofs"),
        "{}",
        out.describe("--version should name the program")
    );
    assert!(
        out.stdout.contains(env!("CARGO_PKG_VERSION")),
        "{}",
        out.describe("--version should print the workspace version")
    );
}

/// Every option name of the contract.
const OPTION_NAMES: &[&str] = &[
    "size",
    "nr_inodes",
    "mode",
    "uid",
    "gid",
    "allow_other",
    "default_permissions",
    "fsname",
    "cache",
    "entry_timeout",
    "attr_timeout",
    "negative_timeout",
    "strictatime",
    "relatime",
    "noatime",
    "nodiratime",
    "writeback",
    "direct_io",
    "threads",
    "busy_poll",
    "passthrough",
    "watch",
    "ro",
    "nosuid",
    "nodev",
    "noexec",
    "sync",
    "dirsync",
    "debug",
];

#[test]
fn mount_help_lists_every_option() {
    let out = memofs(&["mount", "--help"]);
    out.assert_success();
    let text = format!("{}{}", out.stdout, out.stderr);
    let words: std::collections::BTreeSet<&str> = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect();
    let missing: Vec<_> = OPTION_NAMES
        .iter()
        .filter(|o| !words.contains(**o))
        .collect();
    assert!(
        missing.is_empty(),
        "mount --help does not mention {missing:?}:\n{text}"
    );
    assert!(
        text.to_lowercase().contains("default"),
        "mount --help should give defaults:\n{text}"
    );
    assert!(
        text.contains("50%"),
        "mount --help should give size's default (50%):\n{text}"
    );
}

#[test]
fn background_mount_returns_once_live() {
    require_mount!();
    let t = target();
    let out = memofs(&["mount", "-o", "size=16m", s(&t.mnt)]);
    out.assert_success();
    // No polling: the contract says it returns only once the mount is live.
    let info = mountinfo_for(&t.mnt).unwrap_or_else(|| {
        panic!(
            "`memofs mount` returned 0 but nothing is mounted at {}",
            t.mnt.display()
        )
    });
    assert!(
        is_memofs_info(&info),
        "mountinfo: type {} source {}",
        info.fstype,
        info.source
    );
    assert_eq!(ok!(sys::statfs(&t.mnt)).f_type as i64, FUSE_SUPER_MAGIC);
    ok!(fs::write(t.mnt.join("f"), b"served in the background"));
    assert_eq!(ok!(fs::read(t.mnt.join("f"))), b"served in the background");
    let out = memofs(&["umount", s(&t.mnt)]);
    out.assert_success();
    assert!(!is_mounted(&t.mnt), "still mounted after memofs umount");
}

#[test]
fn a_mount_made_right_after_an_unmount_stays() {
    require_mount!();
    // The server of the mount just unmounted must not take down the next one at the same
    // place when it ends, whether `memofs umount`
    // (which waits for the server) or umount(8) (which does not) unmounted it.
    let t = target();
    for round in 0..12 {
        memofs(&["mount", s(&t.mnt)]).assert_success();
        // Long enough for a server that is still ending to act.
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            is_mounted(&t.mnt),
            "round {round}: the mount made right after `memofs umount` went away"
        );
        ok!(fs::write(t.mnt.join("f"), b"x"));
        if round % 2 == 0 {
            memofs(&["umount", s(&t.mnt)]).assert_success();
        } else {
            let out = memofs_e2e::run("umount", &[s(&t.mnt)], None, Duration::from_secs(20));
            assert!(out.success(), "{}", out.describe("umount"));
        }
        assert!(
            !t.mnt.join("f").exists(),
            "round {round}: a file written to the mount landed in the directory below"
        );
    }
}

#[test]
fn filesystem_type_and_fsname() {
    require_mount!();
    let m = Mount::memofs(&["size=16m"]);
    let info = mountinfo_for(m.path()).expect("mountinfo");
    assert!(
        info.fstype == "fuse.memofs" || (info.fstype == "fuse" && info.source == "memofs"),
        "type {} source {}: want fuse.memofs, or fuse with source memofs",
        info.fstype,
        info.source
    );
    assert_eq!(ok!(sys::statfs(m.path())).f_type as i64, FUSE_SUPER_MAGIC);
    let m = Mount::memofs(&["size=16m", "fsname=e2e-name"]);
    let info = mountinfo_for(m.path()).expect("mountinfo");
    assert_eq!(
        info.source, "e2e-name",
        "fsname= sets the source in mountinfo"
    );
}

#[test]
fn umount_of_a_plain_directory_fails() {
    let t = target();
    let out = memofs(&["umount", s(&t.mnt)]);
    assert!(
        out.status.is_some() && !out.success(),
        "{}",
        out.describe("umount of something not mounted must fail")
    );
    assert!(
        !out.stderr.trim().is_empty(),
        "{}",
        out.describe("with a message")
    );
}

fn signal_unmounts(sig: i32, name: &str) {
    let mut m = Mount::memofs(&["size=16m"]);
    ok!(fs::write(m.join("f"), b"x"));
    m.signal_server(sig);
    let status = m.wait_server(Duration::from_secs(10));
    let log = m.log();
    assert!(
        status.is_some(),
        "server still running 10 s after {name}; output:\n{log}"
    );
    assert!(
        status.unwrap().success(),
        "server exited with {:?} after {name} (want 0); output:\n{log}",
        status
    );
    assert!(!m.is_mounted(), "{name} left the mount in place");
}

#[test]
fn sigterm_unmounts_cleanly() {
    require_mount!();
    signal_unmounts(libc::SIGTERM, "SIGTERM");
}

#[test]
fn sigint_unmounts_cleanly() {
    require_mount!();
    signal_unmounts(libc::SIGINT, "SIGINT");
}

#[test]
fn killed_server_gives_enotconn_and_umount_recovers() {
    require_mount!();
    let base = TempDir::new("memofs-e2e-kill-");
    let mnt = base.path().join("mnt");
    ok!(fs::create_dir(&mnt));
    let _guard = UnmountGuard(mnt.clone());
    let mut m = Mount::try_memofs_on(&mnt, &["size=16m"]).unwrap_or_else(|e| panic!("{e}"));
    ok!(fs::write(m.join("f"), b"x"));
    m.signal_server(libc::SIGKILL);
    assert!(
        m.wait_server(Duration::from_secs(10)).is_some(),
        "server survived SIGKILL"
    );
    // With the io_uring transport the kernel tears the rings down asynchronously after the
    // server dies; until it has, requests end with ECONNABORTED, then with ENOTCONN.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let res = loop {
        let p = mnt.clone();
        let res = with_timeout(Duration::from_secs(10), move || {
            fs::metadata(&p).map(|_| ())
        })
        .expect("stat of the mount point hangs after the server was killed");
        let aborting = matches!(&res, Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED));
        if !aborting || std::time::Instant::now() > deadline {
            break res;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_errno!(
        res,
        libc::ENOTCONN,
        "stat of a mount whose server was killed"
    );
    assert!(is_mounted(&mnt), "the dead mount stays until unmounted");
    let out = memofs(&["umount", s(&mnt)]);
    assert!(
        out.success(),
        "{}",
        out.describe("memofs umount of a dead (ENOTCONN) mount")
    );
    assert!(!is_mounted(&mnt), "memofs umount left the dead mount");
    drop(m); // nothing left for it to clean up
             // The directory is usable again.
    let m2 = Mount::try_memofs_on(&mnt, &["size=16m"])
        .unwrap_or_else(|e| panic!("remount after recovery: {e}"));
    ok!(fs::write(m2.join("g"), b"again"));
    assert_eq!(ok!(fs::read(m2.join("g"))), b"again");
    assert!(!m2.join("f").exists(), "a fresh mem mount starts empty");
}

#[test]
fn valid_options_are_accepted() {
    require_mount!();
    let sets: &[&[&str]] = &[
        &["size=64k"],
        &["size=1g", "nr_inodes=1k", "mode=0755", "uid=0", "gid=0"],
        &["huge=never"],
        &["huge=always"],
        &["size=10%"],
        &["fsname=x", "cache=never"],
        &[
            "cache=auto",
            "entry_timeout=0.5",
            "attr_timeout=2",
            "negative_timeout=0",
        ],
        &["cache=always", "negative_dentry_timeout=1"],
        &["strictatime", "nodiratime"],
        &["relatime"],
        &["noatime"],
        &["writeback=on"],
        &["writeback=off", "direct_io"],
        &["threads=1"],
        &["threads=4"],
        &["busy_poll=0"],
        &["busy_poll=500", "threads=1"],
        &["passthrough=off"],
        &["passthrough=auto"],
        &["rw", "suid", "dev", "exec", "async"],
        &["nosuid", "nodev", "noexec", "sync", "dirsync"],
        &["default_permissions", "allow_other"],
        &["debug"],
    ];
    let mut failures = Vec::new();
    for set in sets {
        match Mount::try_memofs(set) {
            Ok(m) => {
                if let Err(e) = fs::write(m.join("f"), b"ok").and_then(|_| fs::read(m.join("f"))) {
                    failures.push(format!(
                        "-o {}: mounted, but writing a file failed: {e}",
                        set.join(",")
                    ));
                }
            }
            Err(e) => failures.push(format!(
                "-o {}: {}",
                set.join(","),
                e.lines().take(3).collect::<Vec<_>>().join(" / ")
            )),
        }
    }
    assert!(
        failures.is_empty(),
        "valid options refused:\n{}",
        failures.join("\n")
    );
    let _ = sh; // (kept for tests that need a shell)
}
