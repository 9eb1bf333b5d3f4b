//! The host-change watcher reports changes made on the host, by another process, to the
//! invalidator; with both mechanisms. Polls, no fixed sleeps.

mod common;

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{eventually, is_root, n, setup_with, walk, Recorder, Report};
use memofs_core::{Backend, Caller, ROOT_INO};
use memofs_passthrough::{PassthroughConfig, PassthroughFs, WatchMechanism, WatchMode};

const LIMIT: Duration = Duration::from_secs(5);

/// Runs a shell command in another process (the watcher ignores the server's own changes);
/// returns when it started.
fn host(cmd: &str) -> Instant {
    let start = Instant::now();
    let status = Command::new("sh").arg("-c").arg(cmd).status().unwrap();
    assert!(status.success(), "{cmd}");
    start
}

fn config(mode: WatchMode) -> PassthroughConfig {
    PassthroughConfig {
        watch: mode,
        ..PassthroughConfig::default()
    }
}

/// Attaches a recorder to `fs`; `None` (and a skip message) if `mode`'s mechanism is not
/// available here.
fn watching(mode: WatchMode, fs: &memofs_passthrough::PassthroughFs) -> Option<Arc<Recorder>> {
    let rec = Arc::new(Recorder::default());
    fs.attach_invalidator(rec.clone());
    let want = match mode {
        WatchMode::Fanotify => Some(WatchMechanism::Fanotify),
        WatchMode::Inotify => Some(WatchMechanism::Inotify),
        _ => None,
    };
    match fs.watch_mechanism() {
        Some(m) if want.is_none_or(|w| w == m) => Some(rec),
        other => {
            let need = match mode {
                WatchMode::Inotify => memofs_e2e::skip::Need::Kernel("inotify"),
                _ => memofs_e2e::skip::Need::Fanotify,
            };
            let why = format!("{mode:?} unavailable here ({other:?})");
            memofs_e2e::skip::report(module_path!(), need, &why);
            None
        }
    }
}

fn started(
    mode: WatchMode,
) -> Option<(
    common::TempDir,
    std::path::PathBuf,
    memofs_passthrough::PassthroughFs,
    Arc<Recorder>,
)> {
    let (t, export, fs) = setup_with("watch", config(mode));
    let rec = watching(mode, &fs)?;
    Some((t, export, fs, rec))
}

/// Host-side create, modify and delete, in the root and in a known subdirectory.
fn reports_host_changes(mode: WatchMode) {
    let Some((_t, export, fs, rec)) = started(mode) else {
        return;
    };
    assert!(
        !fs.watches_whole_filesystem(),
        "a subdirectory export is watched directory by directory"
    );
    check_host_changes(mode, &export, &fs, &rec);
}

fn check_host_changes(
    mode: WatchMode,
    export: &std::path::Path,
    fs: &memofs_passthrough::PassthroughFs,
    rec: &Recorder,
) {
    let root_entry =
        |name: &'static str| move |r: &Report| matches!(r, Report::Entry(ROOT_INO, s) if s == name);

    let start = host(&format!("touch {}/created", export.display()));
    assert!(
        eventually(LIMIT, || rec.has(root_entry("created"))),
        "create: {:?}",
        rec.0.lock()
    );
    let at = rec
        .0
        .lock()
        .iter()
        .find(|(_, r)| root_entry("created")(r))
        .unwrap()
        .0;
    let latency = at.duration_since(start);
    eprintln!("{mode:?}: create reported {latency:?} after the host command started");
    assert!(latency < Duration::from_secs(1), "{latency:?}");

    let f = fs.lookup(&Caller::ROOT, ROOT_INO, n("created")).unwrap();
    host(&format!("echo data >> {}/created", export.display()));
    assert!(
        eventually(LIMIT, || rec.has(|r| *r == Report::Inode(f.ino))),
        "modify"
    );

    rec.clear();
    host(&format!("rm {}/created", export.display()));
    let deleted = |r: &Report| match r {
        Report::Deleted(ROOT_INO, child, s) => *child == f.ino && s == "created",
        Report::Entry(ROOT_INO, s) => s == "created",
        _ => false,
    };
    assert!(
        eventually(LIMIT, || rec.has(deleted)),
        "delete: {:?}",
        rec.0.lock()
    );
    if mode == WatchMode::Fanotify {
        // fanotify names the deleted inode.
        let gone = Report::Deleted(ROOT_INO, f.ino, "created".into());
        assert!(
            eventually(LIMIT, || rec.has(|r| *r == gone)),
            "{:?}",
            rec.0.lock()
        );
    }

    std::fs::create_dir(export.join("sub")).unwrap();
    let sub = walk(fs, "sub").unwrap();
    host(&format!(
        "mkdir {}/sub/inner && mv {}/sub/inner {}/moved",
        export.display(),
        export.display(),
        export.display()
    ));
    assert!(eventually(LIMIT, || rec
        .has(|r| *r == Report::Entry(sub.ino, "inner".into()))));
    assert!(eventually(LIMIT, || rec.has(root_entry("moved"))));

    fs.stop_watcher();
    assert_eq!(fs.watch_mechanism(), None);
}

#[test]
fn fanotify_reports_host_changes() {
    reports_host_changes(WatchMode::Fanotify);
}

#[test]
fn fanotify_filesystem_mark_reports_host_changes() {
    let mode = WatchMode::Fanotify;
    let Some((_t, export, _tmpfs, fs)) = common::setup_tmpfs("watch-fs", config(mode)) else {
        memofs_e2e::skip!(Root, "cannot mount a tmpfs here");
    };
    let Some(rec) = watching(mode, &fs) else {
        return;
    };
    assert!(
        fs.watches_whole_filesystem(),
        "an export that is its filesystem's root is watched with one filesystem mark"
    );
    check_host_changes(mode, &export, &fs, &rec);
}

/// Nothing changes a whole tmpfs under one filesystem mark unseen, so its listings need no
/// OPENDIR; a subdirectory export, or a filesystem mounted below the source (whose changes
/// the mark does not see), do.
#[test]
fn only_a_whole_local_filesystem_without_submounts_sees_every_change() {
    let mode = WatchMode::Fanotify;
    let (_t, _export, fs) = setup_with("sealed-sub", config(mode));
    let _rec = watching(mode, &fs);
    assert!(!fs.sees_every_change(), "a subdirectory export");
    let Some((_t, export, _tmpfs, fs)) = common::setup_tmpfs("sealed", config(mode)) else {
        memofs_e2e::skip!(Root, "cannot mount a tmpfs here");
    };
    let Some(_rec) = watching(mode, &fs) else {
        return;
    };
    if !fs.watches_whole_filesystem() || !fs.private_mount() {
        memofs_e2e::skip!(Fanotify, "no filesystem mark or no private mount here");
    }
    assert!(
        fs.sees_every_change(),
        "a whole tmpfs, nothing mounted below"
    );
    std::fs::create_dir(export.join("sub")).unwrap();
    let Some(_inner) = common::Tmpfs::mount(&export.join("sub")) else {
        memofs_e2e::skip!(Root, "cannot mount a tmpfs here");
    };
    let below = PassthroughFs::new(&export, config(mode)).unwrap();
    let Some(_rec) = watching(mode, &below) else {
        return;
    };
    assert!(below.watches_whole_filesystem());
    assert!(
        !below.sees_every_change(),
        "a filesystem mounted below the source"
    );
}

/// With the filesystem mark, an event names the file it is about by handle, so a change
/// made through a hard link in a directory the kernel does not hold is still reported.
#[test]
fn fanotify_filesystem_mark_finds_files_by_identity() {
    let mode = WatchMode::Fanotify;
    let Some((_t, export, _tmpfs, fs)) = common::setup_tmpfs("watch-fs-id", config(mode)) else {
        memofs_e2e::skip!(Root, "cannot mount a tmpfs here");
    };
    let Some(rec) = watching(mode, &fs) else {
        return;
    };
    if !fs.watches_whole_filesystem() {
        memofs_e2e::skip!(Fanotify, "no filesystem mark here");
    }
    host(&format!(
        "mkdir {0}/known {0}/unknown && echo a > {0}/known/f && ln {0}/known/f {0}/unknown/g",
        export.display()
    ));
    let f = walk(&fs, "known/f").unwrap();
    rec.clear();
    host(&format!("echo more >> {}/unknown/g", export.display()));
    assert!(
        eventually(LIMIT, || rec.has(|r| *r == Report::Inode(f.ino))),
        "{:?}",
        rec.0.lock()
    );
}

#[test]
fn inotify_reports_host_changes() {
    reports_host_changes(WatchMode::Inotify);
}

#[test]
fn fanotify_skips_the_servers_own_changes() {
    let Some((_t, export, fs, rec)) = started(WatchMode::Fanotify) else {
        return;
    };
    let (a, o) = fs
        .create(
            &Caller::ROOT,
            ROOT_INO,
            n("by-server"),
            0o644,
            0,
            libc::O_RDWR,
        )
        .unwrap();
    fs.write(a.ino, o.fh, 0, b"x").unwrap();
    fs.release(a.ino, o.fh).unwrap();
    // Events arrive in order: once the host's marker is reported, the server's earlier
    // changes would have been too.
    host(&format!("touch {}/marker", export.display()));
    assert!(eventually(LIMIT, || rec
        .has(|r| matches!(r, Report::Entry(_, s) if s == "marker"))));
    assert!(
        !rec.has(|r| matches!(r, Report::Entry(_, s) if s == "by-server")),
        "{:?}",
        rec.0.lock()
    );
    assert!(!rec.has(|r| *r == Report::Inode(a.ino)));
}

#[test]
fn forgotten_directories_are_no_longer_watched_and_new_invalidator_replaces_old() {
    let Some((_t, export, fs, rec)) = started(WatchMode::Auto) else {
        return;
    };
    std::fs::create_dir(export.join("d")).unwrap();
    let d = walk(&fs, "d").unwrap();
    fs.forget(d.ino, 1);
    let second = Arc::new(Recorder::default());
    fs.attach_invalidator(second.clone());
    host(&format!(
        "touch {}/d/inner {}/marker",
        export.display(),
        export.display()
    ));
    assert!(eventually(LIMIT, || second.has(
        |r| matches!(r, Report::Entry(ROOT_INO, s) if s == "marker")
    )));
    assert!(!second.has(|r| matches!(r, Report::Entry(_, s) if s == "inner")));
    assert!(!rec.has(|r| matches!(r, Report::Entry(_, s) if s == "marker")));
}

#[test]
fn fanotify_ignores_writes_through_the_servers_mount_but_not_the_hosts() {
    let Some((_t, export, fs, rec)) = started(WatchMode::Fanotify) else {
        return;
    };
    if !fs.private_mount() {
        memofs_e2e::skip!(
            MountNamespace,
            "no private mount here (needs CAP_SYS_ADMIN)"
        );
    }
    let (a, o) = fs
        .create(&Caller::ROOT, ROOT_INO, n("shared"), 0o644, 0, libc::O_RDWR)
        .unwrap();
    // Another process writes through a file the server opened (as the kernel's FUSE
    // passthrough does for a process using the mount): its pid is not the server's, but
    // the write goes through the server's private mount.
    let mut fd = None;
    assert!(fs.with_backing_fd(a.ino, o.fh, &mut |f| fd =
        Some(std::os::fd::AsRawFd::as_raw_fd(&f))));
    let via_server = format!("/proc/{}/fd/{}", std::process::id(), fd.unwrap());
    host(&format!("echo through-the-mount >> {via_server}"));
    assert_eq!(
        std::fs::read(export.join("shared")).unwrap(),
        b"through-the-mount\n"
    );
    host(&format!("touch {}/marker", export.display()));
    assert!(eventually(LIMIT, || rec
        .has(|r| matches!(r, Report::Entry(_, s) if s == "marker"))));
    assert!(
        !rec.has(|r| *r == Report::Inode(a.ino)),
        "a write through the server's mount was reported: {:?}",
        rec.0.lock()
    );
    // The same file written through the host's own mount is a host change.
    host(&format!(
        "echo from-the-host >> {}/shared",
        export.display()
    ));
    assert!(
        eventually(LIMIT, || rec.has(|r| *r == Report::Inode(a.ino))),
        "{:?}",
        rec.0.lock()
    );
    fs.release(a.ino, o.fh).unwrap();
}

/// `security.capability` granting `cap_net_raw+ep` (revision 2, little endian).
const CAPS: [u8; 20] = [
    0x01, 0, 0, 0x02, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
];

fn set_caps_on_host(path: &std::path::Path) -> Instant {
    let hex: String = CAPS.iter().map(|b| format!("{b:02x}")).collect();
    host(&format!(
        "setfattr -n security.capability -v 0x{hex} {}",
        path.display()
    ))
}

/// Whether this process may set `security.capability` (root); says why not.
fn can_set_caps() -> bool {
    if !is_root() {
        memofs_e2e::skip::report(
            module_path!(),
            memofs_e2e::skip::Need::Root,
            "setting security.capability needs root",
        );
    }
    is_root()
}

fn caps(
    fs: &memofs_passthrough::PassthroughFs,
    ino: memofs_core::Ino,
) -> memofs_core::Result<Vec<u8>> {
    fs.getxattr(ino, n("security.capability"))
}

/// A capability set on the host or through the server shows, whether or not the server
/// answers "no capability" from memory.
fn check_capability_answers(export: &std::path::Path, fs: &memofs_passthrough::PassthroughFs) {
    use memofs_core::Errno;
    // Created by the server (with a filesystem mark: known to have none).
    let (a, o) = fs
        .create(&Caller::ROOT, ROOT_INO, n("made"), 0o755, 0, libc::O_RDWR)
        .unwrap();
    fs.release(a.ino, o.fh).unwrap();
    assert_eq!(caps(fs, a.ino), Err(Errno::ENODATA));
    set_caps_on_host(&export.join("made"));
    assert!(
        eventually(LIMIT, || caps(fs, a.ino).as_deref() == Ok(&CAPS[..])),
        "a capability set on the host never showed: {:?}",
        caps(fs, a.ino)
    );
    // Made on the host, asked once (the host says none), then given one on the host.
    host(&format!("touch {}/host-made", export.display()));
    let h = walk(fs, "host-made").unwrap();
    assert_eq!(caps(fs, h.ino), Err(Errno::ENODATA));
    assert_eq!(caps(fs, h.ino), Err(Errno::ENODATA));
    set_caps_on_host(&export.join("host-made"));
    assert!(eventually(LIMIT, || caps(fs, h.ino).as_deref() == Ok(&CAPS[..])));
    // Through the server: seen at once.
    let name = n("security.capability");
    fs.removexattr(&Caller::ROOT, h.ino, name).unwrap();
    assert_eq!(caps(fs, h.ino), Err(Errno::ENODATA));
    fs.setxattr(&Caller::ROOT, h.ino, name, &CAPS, 0).unwrap();
    assert_eq!(caps(fs, h.ino).as_deref(), Ok(&CAPS[..]));
}

/// With one mark on the whole filesystem every host change is seen, and the server answers
/// "no capability" from memory for files it created or the host said had none.
#[test]
fn fanotify_filesystem_mark_capability_answers_follow_host_and_server_changes() {
    if !can_set_caps() {
        return;
    }
    let mode = WatchMode::Fanotify;
    let Some((_t, export, _tmpfs, fs)) = common::setup_tmpfs("watch-caps", config(mode)) else {
        memofs_e2e::skip!(Root, "cannot mount a tmpfs here");
    };
    if watching(mode, &fs).is_none() {
        return;
    }
    assert!(fs.watches_whole_filesystem());
    check_capability_answers(&export, &fs);
}

/// [`check_capability_answers`] on an export watched by `mode` (per-directory marks).
fn capability_answers_follow_changes(mode: WatchMode) {
    if !can_set_caps() {
        return;
    }
    if let Some((_t, export, fs, _rec)) = started(mode) {
        check_capability_answers(&export, &fs);
    }
}

#[test]
fn fanotify_capability_answers_follow_host_and_server_changes() {
    capability_answers_follow_changes(WatchMode::Fanotify);
}

#[test]
fn inotify_capability_answers_follow_host_and_server_changes() {
    capability_answers_follow_changes(WatchMode::Inotify);
}

/// With marks on the export's directories only, a change made through a hard link outside
/// the export raises no event: the server must not answer from memory there.
#[test]
fn capability_is_asked_of_the_host_when_changes_can_go_unseen() {
    use memofs_core::Errno;
    if !can_set_caps() {
        return;
    }
    let Some((t, export, fs, _rec)) = started(WatchMode::Fanotify) else {
        return;
    };
    assert!(!fs.watches_whole_filesystem());
    let (a, o) = fs
        .create(&Caller::ROOT, ROOT_INO, n("made"), 0o755, 0, libc::O_RDWR)
        .unwrap();
    fs.release(a.ino, o.fh).unwrap();
    assert_eq!(caps(&fs, a.ino), Err(Errno::ENODATA));
    let outside = t.join("outside-link");
    std::fs::hard_link(export.join("made"), &outside).unwrap();
    set_caps_on_host(&outside);
    assert_eq!(caps(&fs, a.ino).as_deref(), Ok(&CAPS[..]));
}

/// Without a watcher nothing is answered from memory.
#[test]
fn capability_is_asked_of_the_host_when_unwatched() {
    use memofs_core::Errno;
    if !can_set_caps() {
        return;
    }
    let (_t, export, fs) = setup_with("watch-off", config(WatchMode::Off));
    let (a, o) = fs
        .create(&Caller::ROOT, ROOT_INO, n("made"), 0o755, 0, libc::O_RDWR)
        .unwrap();
    fs.release(a.ino, o.fh).unwrap();
    assert_eq!(caps(&fs, a.ino), Err(Errno::ENODATA));
    set_caps_on_host(&export.join("made"));
    assert_eq!(caps(&fs, a.ino).as_deref(), Ok(&CAPS[..]));
}
