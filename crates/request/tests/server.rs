//! The request layer against a fake backend and a fake kernel: no root, no mount.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use memofs_core::{Caller, Errno, SetAttr};
use memofs_request::{Granted, Op, WriteData};

mod common;
use common::*;

#[test]
fn a_miss_is_a_negative_entry_unless_negative_caching_is_off() {
    let s = setup(&[], false, Granted::default());
    match s.ask(1, USER, Op::Lookup { name: name("nope") }) {
        Reply::Entry(e) => {
            assert_eq!(e.attr, None);
            assert_eq!(e.entry_timeout, Duration::from_secs(3600));
        }
        r => panic!("{r:?}"),
    }
    let snap = s.server.stats().snapshot();
    assert!(snap.events.contains(&("negative_entries", 1)));
    assert_eq!((snap.ops[0].name, snap.ops[0].count), ("LOOKUP", 1));
    let s = setup(&["negative_timeout=0"], false, Granted::default());
    assert_eq!(
        s.ask(1, USER, Op::Lookup { name: name("nope") }),
        Reply::Error(Errno::ENOENT)
    );
    match s.ask(1, USER, Op::Lookup { name: name("f") }) {
        Reply::Entry(e) => assert_eq!(e.attr.map(|a| a.ino), Some(2)),
        r => panic!("{r:?}"),
    }
}

#[test]
fn the_umask_reaches_the_backend_only_when_the_kernel_left_it() {
    for (dont_mask, want) in [(false, "umask 0"), (true, "umask 22")] {
        let granted = Granted {
            dont_mask,
            ..Granted::default()
        };
        let s = setup(&[], false, granted);
        s.ask(
            1,
            USER,
            Op::Mkdir {
                name: name("d"),
                mode: 0o777,
                umask: 0o22,
            },
        );
        assert_eq!(s.fake.calls(), [format!("mkdir 777 {want}")]);
    }
}

#[test]
fn writeback_opens_write_only_files_read_write_and_append_reaches_the_backend() {
    let granted = Granted {
        writeback: true,
        ..Granted::default()
    };
    let s = setup(&[], false, granted);
    let flags = libc::O_WRONLY | libc::O_APPEND;
    match s.ask(
        2,
        USER,
        Op::Open {
            flags,
            kill_suidgid: false,
        },
    ) {
        Reply::Opened(o) => assert!(o.noflush && o.backing_id.is_none() && !o.direct_io),
        r => panic!("{r:?}"),
    }
    assert_eq!(
        s.fake.calls(),
        [format!("open 2 {:o}", libc::O_RDWR | libc::O_APPEND)]
    );
}

/// A write the kernel flags for clearing setuid/setgid.
fn flagged_write() -> Op<'static> {
    Op::Write {
        fh: 42,
        offset: 0,
        data: WriteData::Bytes(b"abc"),
        kill_suidgid: true,
        cached: false,
    }
}

#[test]
fn privileges_that_cannot_be_dropped_fail_the_write_or_open() {
    let s = setup(&[], false, Granted::default());
    *s.fake.refuse_chmod.lock().unwrap() = Some(Errno::EROFS);
    let op = flagged_write();
    assert_eq!(s.ask(2, USER, op), Reply::Error(Errno::EROFS));
    assert!(s.fake.calls().is_empty(), "{:?}", s.fake.calls());
    *s.fake.refuse_chmod.lock().unwrap() = Some(Errno::EIO);
    let op = Op::Open {
        flags: libc::O_RDWR,
        kill_suidgid: true,
    };
    assert_eq!(s.ask(2, USER, op), Reply::Error(Errno::EIO));
    // The handle the backend opened is given back: the kernel never saw it.
    assert_eq!(s.fake.calls().last().map(String::as_str), Some("release 2"));
}

#[test]
fn a_flagged_write_clears_setuid_and_tells_the_kernel() {
    let s = setup(&[], false, Granted::default());
    s.fake
        .xattrs
        .lock()
        .unwrap()
        .push(("security.capability".into(), vec![1]));
    let op = flagged_write();
    assert_eq!(s.ask(2, USER, op), Reply::Written(3));
    let calls = s.fake.calls();
    assert_eq!(calls[0], "chmod 2 755");
    assert_eq!(calls[1], "removexattr 2 security.capability");
    assert!(s.kernel_log_eventually("inval_inode 2"));
    // An unflagged write by root leaves the bits alone.
    s.fake.perms.lock().unwrap().insert(2, 0o4755);
    let op = Op::Write {
        fh: 42,
        offset: 0,
        data: WriteData::Bytes(b"abc"),
        kill_suidgid: false,
        cached: false,
    };
    s.ask(2, Caller::ROOT, op);
    assert_eq!(s.fake.calls().len(), 2);
    // fallocate by an unprivileged caller carries no flag but must clear them too.
    let op = Op::Fallocate {
        fh: 42,
        offset: 0,
        length: 10,
        mode: 0,
    };
    assert_eq!(s.ask(2, USER, op), Reply::Empty);
    assert_eq!(s.fake.calls()[2], "chmod 2 755");
}

#[test]
fn trusted_xattrs_are_listed_to_privileged_callers_only() {
    let s = setup(&[], false, Granted::default());
    for n in ["user.a", "trusted.secret", "security.b"] {
        let op = Op::Setxattr {
            name: name(n),
            value: b"v",
            flags: 0,
            acl_kill_sgid: false,
        };
        assert_eq!(s.ask(2, Caller::ROOT, op), Reply::Empty);
    }
    assert_eq!(
        s.ask(2, USER, Op::Listxattr { size: 100 }),
        Reply::Data(b"user.a\0security.b\0".to_vec())
    );
    assert_eq!(s.ask(2, USER, Op::Listxattr { size: 0 }), Reply::Size(18));
    assert_eq!(
        s.ask(2, Caller::ROOT, Op::Listxattr { size: 0 }),
        Reply::Size(33)
    );
    assert_eq!(
        s.ask(
            2,
            USER,
            Op::Getxattr {
                name: name("user.a"),
                size: 0
            }
        ),
        Reply::Size(1)
    );
    let op = Op::Setxattr {
        name: name("user.long"),
        value: b"0123456789",
        flags: 0,
        acl_kill_sgid: false,
    };
    s.ask(2, USER, op);
    assert_eq!(
        s.ask(
            2,
            USER,
            Op::Getxattr {
                name: name("user.long"),
                size: 4
            }
        ),
        Reply::Error(Errno::ERANGE)
    );
}

#[test]
fn without_xattrs_every_xattr_request_is_enosys_and_reaches_no_backend() {
    let s = setup(&["xattr=off"], false, Granted::default());
    let before = s.fake.calls().len();
    let set = Op::Setxattr {
        name: name("user.a"),
        value: b"v",
        flags: 0,
        acl_kill_sgid: false,
    };
    let get = Op::Getxattr {
        name: name("security.capability"),
        size: 0,
    };
    let remove = Op::Removexattr {
        name: name("user.a"),
    };
    for op in [set, get, Op::Listxattr { size: 100 }, remove] {
        assert_eq!(s.ask(2, Caller::ROOT, op), Reply::Error(Errno::ENOSYS));
    }
    assert_eq!(s.fake.calls().len(), before, "{:?}", s.fake.calls());
    assert!(!s.server.plan().posix_acl, "ACLs are extended attributes");
}

/// A server granted FUSE passthrough over a backend that lends descriptors and, if `keeps`,
/// keeps lending the same one after the last close.
fn lending(keeps: bool) -> Setup {
    let granted = Granted {
        passthrough: true,
        ..Granted::default()
    };
    let s = setup(&[], true, granted);
    s.fake.keeps_backing.store(keeps, Ordering::Relaxed);
    s
}

/// The backing id a read-only OPEN of `ino` is answered with.
fn open_backing_id(s: &Setup, ino: u64) -> Option<u32> {
    let op = Op::Open {
        flags: libc::O_RDONLY,
        kill_suidgid: false,
    };
    match s.ask(ino, Caller::ROOT, op) {
        Reply::Opened(o) => o.backing_id,
        r => panic!("{r:?}"),
    }
}

fn event(s: &Setup, name: &str) -> u64 {
    let snap = s.server.stats().snapshot();
    snap.events.iter().find(|e| e.0 == name).unwrap().1
}

#[test]
fn one_backing_id_per_inode_across_opens() {
    let s = lending(false);
    for _ in 0..2 {
        assert_eq!(open_backing_id(&s, 2), Some(5));
    }
    assert_eq!(*s.kernel.lock().unwrap(), ["open_backing"]);
    s.ask(2, Caller::ROOT, Op::Release { fh: 42 });
    assert_eq!(s.kernel.lock().unwrap().len(), 1);
    s.ask(2, Caller::ROOT, Op::Release { fh: 42 });
    assert_eq!(
        *s.kernel.lock().unwrap(),
        ["open_backing", "close_backing 5"]
    );
    // Without passthrough granted, the same backend's opens go through the server.
    let s = setup(&["direct_io"], true, Granted::default());
    match s.ask(
        2,
        Caller::ROOT,
        Op::Open {
            flags: libc::O_RDONLY,
            kill_suidgid: false,
        },
    ) {
        Reply::Opened(o) => assert!(o.backing_id.is_none() && o.direct_io),
        r => panic!("{r:?}"),
    }
}

#[test]
fn kept_backing_registrations_serve_later_opens_until_the_backend_lets_go() {
    let s = lending(true);
    let log = |s: &Setup| s.kernel.lock().unwrap().clone();
    assert_eq!(open_backing_id(&s, 2), Some(5));
    s.ask(2, Caller::ROOT, Op::Release { fh: 42 });
    assert_eq!(log(&s), ["open_backing"], "the last release keeps it");
    assert_eq!(event(&s, "backings_kept"), 1);
    assert_eq!(event(&s, "backings_registered"), 1);
    // A release the map did not count (its open was not passthrough) changes nothing.
    s.ask(2, Caller::ROOT, Op::Release { fh: 42 });
    assert_eq!(
        open_backing_id(&s, 2),
        Some(5),
        "reused, not registered again"
    );
    assert_eq!(open_backing_id(&s, 2), Some(5));
    assert_eq!(log(&s), ["open_backing"]);
    assert_eq!(event(&s, "backings_registered"), 1);
    s.ask(2, Caller::ROOT, Op::Release { fh: 42 });
    s.ask(2, Caller::ROOT, Op::Release { fh: 42 });
    // FORGET keeps it while the backend keeps the file, and closes it once it does not.
    s.ask(2, Caller::ROOT, Op::Forget { nlookup: 1 });
    assert_eq!(log(&s), ["open_backing"]);
    s.fake.keeps_backing.store(false, Ordering::Relaxed);
    s.ask(2, Caller::ROOT, Op::Forget { nlookup: 1 });
    assert_eq!(log(&s), ["open_backing", "close_backing 5"]);
    // Gone for good: the next open registers again, and an open one is never closed by
    // FORGET.
    assert_eq!(open_backing_id(&s, 2), Some(6));
    s.ask(2, Caller::ROOT, Op::Forget { nlookup: 1 });
    assert_eq!(log(&s).len(), 3);
    // A last release the backend does not keep closes at once.
    s.ask(2, Caller::ROOT, Op::Release { fh: 42 });
    assert_eq!(log(&s).last().unwrap(), "close_backing 6");
}

#[test]
fn idle_backing_registrations_are_bounded_longest_idle_first() {
    let s = lending(true);
    const IDLE_MAX: u64 = 16 * 1024;
    for ino in 10..10 + IDLE_MAX + 1 {
        assert!(open_backing_id(&s, ino).is_some());
        s.ask(ino, Caller::ROOT, Op::Release { fh: 40 + ino });
    }
    let log = s.kernel.lock().unwrap().clone();
    assert_eq!(log.len() as u64, IDLE_MAX + 2);
    assert_eq!(log.last().unwrap(), "close_backing 5", "the first one went");
    // The second is still there; the first registers again.
    assert_eq!(open_backing_id(&s, 11), Some(6));
    let fresh = open_backing_id(&s, 10).unwrap();
    assert_eq!(fresh as u64, 5 + IDLE_MAX + 1);
}

#[test]
fn fsync_runs_off_the_request_thread_and_forgets_get_no_reply() {
    let s = setup(&[], false, Granted::default());
    assert_eq!(
        s.ask(
            2,
            USER,
            Op::Fsync {
                fh: 42,
                datasync: true
            }
        ),
        Reply::Empty
    );
    s.ask(2, USER, Op::Forget { nlookup: 3 });
    s.ask(
        0,
        USER,
        Op::BatchForget {
            forgets: &[[2, 1], [3, 4]],
        },
    );
    assert_eq!(
        s.fake.calls(),
        ["fsync 2 true", "forget 2 3", "forget 2 1", "forget 3 4"]
    );
}

#[test]
fn readdirplus_entries_carry_the_policy_timeouts() {
    let s = setup(&["attr_timeout=5"], false, Granted::default());
    match s.ask(
        1,
        USER,
        Op::Readdir {
            fh: 7,
            offset: 0,
            size: 4096,
            plus: true,
        },
    ) {
        Reply::Dir(d) => {
            let e = d[0].1.unwrap();
            assert_eq!(
                (e.entry_timeout, e.attr_timeout),
                (Duration::from_secs(3600), Duration::from_secs(5))
            );
        }
        r => panic!("{r:?}"),
    }
}

#[test]
fn inode_flags_through_the_fileattr_ioctls() {
    let s = setup(&[], false, Granted::default());
    let getflags = 0x8008_6601;
    match s.ask(
        2,
        USER,
        Op::Ioctl {
            fh: 1,
            cmd: getflags,
            input: &[],
            out_size: 4,
        },
    ) {
        Reply::Data(d) => assert_eq!(d, 0x10u32.to_ne_bytes()),
        r => panic!("{r:?}"),
    }
    let fsgetxattr = 0x801c_581f;
    match s.ask(
        2,
        USER,
        Op::Ioctl {
            fh: 1,
            cmd: fsgetxattr,
            input: &[],
            out_size: 28,
        },
    ) {
        Reply::Data(d) => assert_eq!(&d[..4], &0x8u32.to_ne_bytes()),
        r => panic!("{r:?}"),
    }
    assert_eq!(
        s.ask(
            2,
            USER,
            Op::Ioctl {
                fh: 1,
                cmd: 0x5401,
                input: &[],
                out_size: 0
            }
        ),
        Reply::Error(Errno::ENOTTY)
    );
}

#[test]
fn listings_stay_in_the_kernel_only_where_every_change_is_seen() {
    let opendir = || Op::Opendir { flags: 0 };
    let kept = |r: Reply| match r {
        Reply::Opened(o) => {
            assert_eq!(o.keep_cache, o.cache_dir, "{o:?}");
            o.cache_dir
        }
        Reply::Error(Errno::ENOSYS) => true,
        r => panic!("OPENDIR answered {r:?}"),
    };
    // The only writer: OPENDIR is declined once and the kernel keeps every listing.
    let s = setup(&["noatime"], false, Granted::default());
    assert_eq!(s.ask(1, USER, opendir()), Reply::Error(Errno::ENOSYS));
    // Others write too, and their name changes are reported: kept per open.
    let s = setup_with(&["noatime"], Fake::shared(true), Granted::default());
    assert!(kept(s.ask(1, USER, opendir())));
    // ... unless a listing could move the directory's atime now (relatime, atime not after
    // mtime), or every listing must (strictatime).
    let s = setup_with(&["relatime"], Fake::shared(true), Granted::default());
    assert!(!kept(s.ask(1, USER, opendir())));
    let s = setup_with(&["strictatime"], Fake::shared(true), Granted::default());
    assert!(!kept(s.ask(1, USER, opendir())));
    // Changes nobody reports: never kept.
    let s = setup_with(&["noatime"], Fake::shared(false), Granted::default());
    assert!(!kept(s.ask(1, USER, opendir())));
    // ... unless the mount keeps everything anyway (a guest's --cache=always): declined
    // where no listing moves a directory's atime; under relatime kept per open, while a
    // listing could not move it.
    let guest = |opts: &[&str]| {
        setup_planned(opts, Fake::shared(false), Granted::default(), |p| {
            p.without_notifications().unwrap()
        })
    };
    for atime in ["noatime", "nodiratime"] {
        let s = guest(&[atime, "cache=always"]);
        assert_eq!(
            s.ask(1, USER, opendir()),
            Reply::Error(Errno::ENOSYS),
            "{atime}"
        );
    }
    let s = guest(&["relatime", "cache=always"]);
    assert!(matches!(s.ask(1, USER, opendir()), Reply::Opened(_)));
    let s = guest(&["strictatime", "cache=always"]);
    assert!(!kept(s.ask(1, USER, opendir())));
    let s = guest(&["noatime", "cache=auto"]);
    assert!(!kept(s.ask(1, USER, opendir())));
}

#[test]
fn file_pages_stay_in_the_kernel_across_opens_only_where_every_data_change_is_reported() {
    let kept = |s: &Setup| match s.ask(
        2,
        USER,
        Op::Open {
            flags: libc::O_RDONLY,
            kill_suidgid: false,
        },
    ) {
        Reply::Opened(o) => o.keep_cache,
        r => panic!("OPEN answered {r:?}"),
    };
    // Others write too (the kernel can be told of their changes): not kept, since nothing
    // reports changes to data...
    let fake = Fake::shared(true);
    let s = setup_with(&["noatime"], fake.clone(), Granted::default());
    assert!(!kept(&s));
    // ... until the backend reports every one (a change feed).
    fake.data_reported.store(true, Ordering::Relaxed);
    assert!(kept(&s));
    // And then still not where a read could move atime now.
    let fake = Fake::shared(true);
    fake.data_reported.store(true, Ordering::Relaxed);
    let s = setup_with(&["strictatime"], fake, Granted::default());
    assert!(!kept(&s));
}

#[test]
fn unsupported_opcodes_are_enosys() {
    let s = setup(&[], false, Granted::default());
    assert_eq!(
        s.ask(1, USER, Op::Unsupported { opcode: 31 }),
        Reply::Error(Errno::ENOSYS)
    );
}

#[test]
fn a_chown_clears_privileges_of_non_directories_only() {
    let s = setup(&[], false, Granted::default());
    s.fake
        .xattrs
        .lock()
        .unwrap()
        .push(("security.capability".into(), vec![1]));
    let chown = SetAttr {
        uid: Some(5),
        ..SetAttr::default()
    };
    s.ask(
        2,
        USER,
        Op::Setattr {
            set: chown,
            kill_suidgid: false,
        },
    );
    assert_eq!(
        s.fake.calls(),
        ["chmod 2 755", "removexattr 2 security.capability"]
    );
    s.fake.perms.lock().unwrap().insert(1, 0o6777);
    s.ask(
        1,
        USER,
        Op::Setattr {
            set: chown,
            kill_suidgid: false,
        },
    );
    assert_eq!(s.fake.calls().len(), 2, "a directory keeps its set-id bits");
    // chown(f, -1, -1) sets nothing and still counts as a chown.
    s.fake.perms.lock().unwrap().insert(2, 0o4755);
    let nothing = SetAttr {
        fh: Some(42),
        ..SetAttr::default()
    };
    match s.ask(
        2,
        USER,
        Op::Setattr {
            set: nothing,
            kill_suidgid: false,
        },
    ) {
        Reply::Attr(a, _) => assert_eq!(a.perm, 0o755),
        r => panic!("{r:?}"),
    }
}

/// A read-write OPEN of file 2 as root.
fn open_rw(s: &Setup) -> Reply {
    let op = Op::Open {
        flags: libc::O_RDWR,
        kill_suidgid: false,
    };
    s.ask(2, Caller::ROOT, op)
}

#[test]
fn close_errors_reach_close_where_the_backend_has_something_to_flush() {
    // Nothing to flush: the kernel is told to send no FLUSH.
    let s = setup(&[], false, Granted::default());
    assert!(matches!(open_rw(&s), Reply::Opened(o) if o.noflush));
    // A backend whose close can fail: FLUSH is asked for, and its error is the answer.
    let s = setup(&[], false, Granted::default());
    *s.fake.flushes.lock().unwrap() = Some(Err(Errno(libc::EDQUOT)));
    assert!(matches!(open_rw(&s), Reply::Opened(o) if !o.noflush));
    assert_eq!(
        s.ask(2, USER, Op::Flush { fh: 42 }),
        Reply::Error(Errno(libc::EDQUOT))
    );
    assert!(s.fake.calls().contains(&"flush 2".to_string()));
}

#[test]
fn a_passing_refusal_of_a_backing_file_fails_that_open_only() {
    let s = lending(false);
    s.refusals.lock().unwrap().push(libc::EMFILE);
    assert_eq!(open_rw(&s), Reply::Error(Errno::ENFILE));
    assert_eq!(event(&s, "backings_refused"), 1);
    assert!(
        s.fake.calls().contains(&"release 2".to_string()),
        "the backend's handle of the failed open is released"
    );
    assert_eq!(open_backing_id(&s, 2), Some(5), "passthrough stays on");
}

#[test]
fn a_file_the_kernel_cannot_pass_through_is_served_through_the_server() {
    let s = lending(false);
    s.refusals.lock().unwrap().push(libc::ELOOP);
    assert_eq!(open_backing_id(&s, 2), None);
    assert_eq!(
        open_backing_id(&s, 3),
        Some(5),
        "other files keep passthrough"
    );
    assert_eq!(event(&s, "backings_refused"), 1);
}

#[test]
fn a_kernel_that_lends_no_backing_files_turns_passthrough_off_for_the_mount() {
    let s = lending(false);
    s.refusals.lock().unwrap().push(libc::EPERM);
    assert_eq!(open_backing_id(&s, 2), None);
    assert_eq!(open_backing_id(&s, 3), None);
    assert_eq!(*s.kernel.lock().unwrap(), ["open_backing"], "asked once");
    assert_eq!(event(&s, "backings_refused"), 1);
}

#[test]
fn a_create_whose_open_is_refused_fails_and_gives_its_lookup_back() {
    let s = lending(false);
    s.refusals.lock().unwrap().push(libc::ENOMEM);
    let op = Op::Create {
        name: name("new"),
        mode: 0o644,
        umask: 0,
        flags: libc::O_RDWR,
    };
    assert_eq!(s.ask(1, USER, op), Reply::Error(Errno::ENOMEM));
    let calls = s.fake.calls();
    assert!(calls.contains(&"release 2".to_string()), "{calls:?}");
    assert!(calls.contains(&"forget 2 1".to_string()), "{calls:?}");
}

#[test]
fn blocking_requests_are_timed_to_the_end_of_their_work() {
    let s = setup(&[], false, Granted::default());
    *s.fake.fsync_takes.lock().unwrap() = Duration::from_millis(30);
    let op = Op::Fsync {
        fh: 42,
        datasync: false,
    };
    assert_eq!(s.ask(2, USER, op), Reply::Empty);
    let snap = s.server.stats().snapshot();
    let fsync = snap.ops.iter().find(|o| o.name == "FSYNC").unwrap();
    assert_eq!(fsync.count, 1);
    assert!(
        fsync.mean_ns >= 30_000_000,
        "FSYNC took at least 30 ms, recorded {} ns",
        fsync.mean_ns
    );
}

#[test]
fn writes_through_backing_files_others_change_carry_no_privilege() {
    use memofs_request::kernel::BackingWrites;
    // A backend that is the files' only writer: the server's privilege.
    let s = lending(false);
    assert_eq!(open_backing_id(&s, 2), Some(5));
    assert_eq!(*s.writes.lock().unwrap(), Some(BackingWrites::Server));
    // An export others change: every write clears setuid/setgid on the backing file.
    let granted = Granted {
        passthrough: true,
        ..Granted::default()
    };
    let shared = || {
        let mut fake = Arc::into_inner(Fake::shared(true)).unwrap();
        fake.lends_fd = true;
        setup_with(&[], Arc::new(fake), granted)
    };
    // Root's open: root's privilege, as on the host.
    let s = shared();
    assert_eq!(open_backing_id(&s, 2), Some(5));
    assert_eq!(*s.writes.lock().unwrap(), Some(BackingWrites::Server));
    // A user's: every write clears setuid/setgid on the backing file.
    let s = shared();
    let op = Op::Open {
        flags: libc::O_WRONLY,
        kill_suidgid: false,
    };
    assert!(matches!(s.ask(2, USER, op), Reply::Opened(o) if o.backing_id == Some(5)));
    assert_eq!(*s.writes.lock().unwrap(), Some(BackingWrites::Unprivileged));
}

#[test]
fn writers_of_append_only_files_reach_the_server_with_every_write() {
    let s = lending(true);
    s.fake.append_only.store(true, Ordering::Relaxed);
    match open_rw(&s) {
        Reply::Opened(o) => assert!(
            o.backing_id.is_none() && o.direct_io && !o.keep_cache,
            "no backing file, no page cache: {o:?}"
        ),
        r => panic!("{r:?}"),
    }
    assert!(s.kernel.lock().unwrap().is_empty(), "nothing registered");
}

/// The backend hears of the attributes the kernel is given, and only of those: a
/// READDIRPLUS entry that did not fit in the reply gave the kernel nothing.
#[test]
fn the_backend_hears_of_attributes_the_kernel_was_given_only() {
    let s = setup(&[], false, Granted::default());
    s.ask(2, USER, Op::Getattr { fh: None });
    assert_eq!(*s.fake.sent.lock().unwrap(), [2]);
    let op = Op::Readdir {
        fh: 7,
        offset: 0,
        size: 4096,
        plus: true,
    };
    let req = memofs_request::Request {
        unique: 1,
        nodeid: 1,
        caller: USER,
        op,
        label: None,
    };
    let mut full = Recorder {
        room: Some(0),
        ..Recorder::default()
    };
    s.server.handle(&req, &mut full);
    assert_eq!(*s.fake.sent.lock().unwrap(), [2], "the entry did not fit");
    s.ask(1, USER, req.op);
    assert_eq!(*s.fake.sent.lock().unwrap(), [2, 2], "the entry went out");
}

/// File capabilities are removed only where there are some: removing is a change an
/// append-only or immutable file refuses even with nothing to remove.
#[test]
fn privileges_are_cleared_without_touching_absent_capabilities() {
    let s = setup(&[], false, Granted::default());
    assert_eq!(s.ask(2, USER, flagged_write()), Reply::Written(3));
    assert_eq!(s.fake.calls(), ["chmod 2 755"], "no removexattr of nothing");
}

/// Under the writeback cache: a failed writeback drops the inode's cached pages (queued, after
/// the answer), a failed write a caller waits on does not need to; and LSEEK is left to the
/// kernel, which knows where its dirty pages are.
#[test]
fn writeback_cache_failures_and_lseek() {
    let granted = Granted {
        writeback: true,
        ..Granted::default()
    };
    let s = setup(&[], false, granted);
    let write = |cached| Op::Write {
        fh: 42,
        offset: 0,
        data: WriteData::Bytes(b"abc"),
        kill_suidgid: false,
        cached,
    };
    *s.fake.refuse_write.lock().unwrap() = Some(Errno::ENOSPC);
    assert_eq!(s.ask(2, USER, write(false)), Reply::Error(Errno::ENOSPC));
    *s.fake.refuse_write.lock().unwrap() = Some(Errno::ENOSPC);
    assert_eq!(s.ask(3, USER, write(true)), Reply::Error(Errno::ENOSPC));
    assert_eq!(s.ask(4, USER, write(true)), Reply::Written(3));
    assert!(s.kernel_log_eventually("inval_inode 3"));
    let log = s.kernel.lock().unwrap().clone();
    assert!(
        !log.iter()
            .any(|l| l == "inval_inode 2" || l == "inval_inode 4"),
        "{log:?}"
    );
    let calls = s.fake.calls().len();
    let op = Op::Lseek {
        fh: 42,
        offset: 0,
        whence: libc::SEEK_DATA,
    };
    assert_eq!(s.ask(2, USER, op), Reply::Error(Errno::ENOSYS));
    assert_eq!(s.fake.calls().len(), calls, "LSEEK reached the backend");
    // FLUSH: ENOSYS for a backend that is its files' only writer (the kernel has written
    // back and checked for errors already); another's FLUSH reaches it.
    let flush = Op::Flush { fh: 42 };
    assert_eq!(s.ask(2, USER, flush), Reply::Error(Errno::ENOSYS));
    let host = setup_with(&[], Fake::shared(true), granted);
    assert_eq!(host.ask(2, USER, Op::Flush { fh: 42 }), Reply::Empty);
}

/// `direct_io=large`: read-only opens of large files bypass the page cache; smaller files,
/// writers and program loads keep it. (Kernels that would refuse shared mappings of such
/// opens never see the plan say `Large`: proto's `in_effect` turns it off.)
#[test]
fn direct_io_large_serves_large_read_only_opens_directly() {
    let granted = Granted::default();
    let direct = |s: &Setup, flags: i32| match s.ask(
        2,
        Caller::ROOT,
        Op::Open {
            flags,
            kill_suidgid: false,
        },
    ) {
        Reply::Opened(o) => o.direct_io,
        r => panic!("{r:?}"),
    };
    let s = setup(&["direct_io=large"], false, granted);
    assert!(!direct(&s, libc::O_RDONLY), "an empty file is read cached");
    s.fake.sizes.lock().unwrap().insert(2, 1 << 20);
    assert!(direct(&s, libc::O_RDONLY));
    assert!(direct(&s, libc::O_RDONLY | libc::O_NONBLOCK));
    assert!(
        !direct(&s, libc::O_RDWR),
        "a writer keeps the cache (mtime)"
    );
    assert!(
        !direct(&s, libc::O_RDONLY | 0x20),
        "a program load keeps the cache"
    );
    s.fake.sizes.lock().unwrap().insert(2, (1 << 20) - 1);
    assert!(!direct(&s, libc::O_RDONLY));

    // With the option off, nothing changes.
    let s = setup(&[], false, granted);
    s.fake.sizes.lock().unwrap().insert(2, 8 << 20);
    assert!(!direct(&s, libc::O_RDONLY));
}
