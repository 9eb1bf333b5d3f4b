//! The spellings mount(8) uses: `mount.memofs SOURCE DIR [-sfnv] [-t TYPE] -o OPTS` (its
//! helper protocol for `mount -t memofs`; the binary run under that name), `memofs SOURCE
//! DIR -o OPTS` (what mount.fuse3 runs for `mount -t fuse.memofs`), with the options fstab
//! and systemd pass along. The installed package is tested through mount(8) itself by
//! `make package-test`.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::Duration;

use memofs_e2e::{
    is_mounted, memofs, memofs_bin, mountinfo_for, ok, require_mount, sys, CliOutput, TempDir,
    UnmountGuard,
};

/// A mount point and a directory holding `mount.memofs` and `mount.fuse.memofs` links to
/// the binary under test; unmounted when dropped, and then removed (fields drop in order).
struct Helper {
    _guard: UnmountGuard,
    mnt: PathBuf,
    dir: TempDir,
}

impl Helper {
    fn new() -> Helper {
        let dir = TempDir::new("memofs-e2e-helper-");
        let mnt = dir.path().join("mnt");
        fs::create_dir(&mnt).unwrap();
        for name in ["mount.memofs", "mount.fuse.memofs"] {
            symlink(memofs_bin(), dir.path().join(name)).unwrap();
        }
        Helper {
            _guard: UnmountGuard(mnt.clone()),
            mnt,
            dir,
        }
    }

    fn run(&self, name: &str, args: &[&str]) -> CliOutput {
        let program = self.dir.path().join(name);
        memofs_e2e::run(
            program.to_str().unwrap(),
            args,
            None,
            Duration::from_secs(30),
        )
    }

    fn mnt(&self) -> &str {
        self.mnt.to_str().unwrap()
    }
}

/// The mount at `mnt` is memofs's, `size` bytes large; it is used and then unmounted.
fn check_and_unmount(mnt: &Path, size: u64) {
    let info = mountinfo_for(mnt).expect("mounted");
    assert_eq!(info.fstype, "fuse.memofs");
    let st = ok!(sys::statfs(mnt));
    assert_eq!(st.f_blocks * st.f_bsize as u64, size, "size= was applied");
    ok!(fs::write(mnt.join("f"), b"through the helper"));
    assert_eq!(ok!(fs::read(mnt.join("f"))), b"through the helper");
    memofs(&["umount", mnt.to_str().unwrap()]).assert_success();
    assert!(!is_mounted(mnt));
}

#[test]
fn mount_helper_protocol() {
    require_mount!();
    let h = Helper::new();
    // What mount(8) runs for `mount -t memofs none DIR -o ...` from an fstab line.
    let out = h.run(
        "mount.memofs",
        &[
            "none",
            h.mnt(),
            "-n",
            "-o",
            "rw,size=8m,noauto,nofail,_netdev,x-systemd.automount,comment=x",
            "-t",
            "memofs",
        ],
    );
    out.assert_success();
    check_and_unmount(&h.mnt, 8 << 20);
}

#[test]
fn mount_helper_fake_mounts_nothing() {
    require_mount!();
    let h = Helper::new();
    let out = h.run(
        "mount.fuse.memofs",
        &["memofs", h.mnt(), "-f", "-o", "size=8m"],
    );
    out.assert_success();
    assert!(!is_mounted(&h.mnt), "-f (fake) mounted something");
    let out = h.run("mount.memofs", &["none", h.mnt(), "-f", "-o", "size=lots"]);
    assert_eq!(out.code(), Some(2), "{}", out.describe("bad option, fake"));
    assert!(
        out.stderr.contains("size=lots"),
        "{}",
        out.describe("names it")
    );
}

#[test]
fn mount_fuse3_form_mounts_both_backends() {
    require_mount!();
    let h = Helper::new();
    // mount.fuse3 adds rw, dev and suid and runs `memofs SOURCE DIR -o OPTS`.
    let out = memofs(&["memofs", h.mnt(), "-o", "rw,size=4m,dev,suid"]);
    out.assert_success();
    check_and_unmount(&h.mnt, 4 << 20);

    let src = h.dir.path().join("src");
    fs::create_dir(&src).unwrap();
    let out = memofs(&[src.to_str().unwrap(), h.mnt(), "-o", "rw,dev,suid"]);
    out.assert_success();
    ok!(fs::write(h.mnt.join("exported"), b"x"));
    assert!(
        src.join("exported").exists(),
        "the write reached the source"
    );
    memofs(&["umount", h.mnt()]).assert_success();

    // As libfuse's passthrough servers: `source=DIR` exports DIR, and SOURCE names the mount
    // (umount(8) finds it by that name).
    let source = format!("source={},allow_other", src.display());
    memofs(&["e2e-named-export", h.mnt(), "-o", &source]).assert_success();
    assert_eq!(
        mountinfo_for(&h.mnt).expect("mounted").source,
        "e2e-named-export"
    );
    assert_eq!(ok!(fs::read(h.mnt.join("exported"))), b"x");
    memofs(&["umount", h.mnt()]).assert_success();
}

#[test]
fn helper_errors_are_usage_errors() {
    let h = Helper::new();
    for args in [
        &["none"][..],
        &["none", h.mnt(), "-x"],
        &["none", h.mnt(), "-o"],
        &["none", h.mnt(), "-N", "4242"],
    ] {
        let out = h.run("mount.memofs", args);
        assert_eq!(
            out.code(),
            Some(2),
            "{}",
            out.describe(&format!("{args:?}"))
        );
        assert!(!out.stderr.trim().is_empty());
        assert!(!is_mounted(&h.mnt));
    }
}

/// What mount(8) runs for `mount -o remount,EXTRA DIR` of a live mount: the helper with
/// the mount's options as mountinfo shows them merged in (`ro,nosuid,relatime,remount,
/// user_id=0,group_id=0,default_permissions,EXTRA`).
fn remount(h: &Helper, source: &str, extra: &str) -> CliOutput {
    let info = mountinfo_for(&h.mnt).expect("mounted");
    let fs_opts: Vec<&str> = info
        .super_options
        .split(',')
        .filter(|o| !matches!(*o, "ro" | "rw"))
        .collect();
    let opts = format!(
        "{},remount,{},{extra}",
        info.mount_options,
        fs_opts.join(",")
    );
    h.run("mount.fuse.memofs", &[source, h.mnt(), "-o", &opts])
}

#[test]
fn remount_changes_flags_and_limits_and_refuses_the_rest() {
    require_mount!();
    let h = Helper::new();
    let src = "memofs:e2e-remount";
    h.run("mount.memofs", &[src, h.mnt(), "-o", "size=8m,nosuid"])
        .assert_success();
    let info = mountinfo_for(&h.mnt).expect("mounted");
    assert_eq!(info.source, src, "the mount table shows the SOURCE given");
    let flags = |h: &Helper| mountinfo_for(&h.mnt).expect("mounted").mount_options;
    ok!(fs::write(h.mnt.join("f"), b"before"));

    remount(&h, src, "ro").assert_success();
    assert!(flags(&h).starts_with("ro,"), "{}", flags(&h));
    assert!(
        flags(&h).contains("nosuid"),
        "flags not named stay: {}",
        flags(&h)
    );
    let e = fs::write(h.mnt.join("g"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");

    remount(&h, src, "rw,size=16m").assert_success();
    let st = ok!(sys::statfs(&h.mnt));
    assert_eq!(
        st.f_blocks * st.f_bsize as u64,
        16 << 20,
        "size= changed live"
    );
    ok!(fs::write(h.mnt.join("g"), vec![1u8; 4 << 20]));

    // Below what is in use, as tmpfs refuses it; the options a live server cannot take,
    // each named; what the kernel's FUSE connection was made with.
    for (extra, named) in [
        ("size=1m", "size"),
        ("cache=never,mode=700", "mode=700"),
        ("user_id=4242", "user_id=4242"),
    ] {
        let out = remount(&h, src, extra);
        assert_eq!(out.code(), Some(2), "{}", out.describe(extra));
        assert!(out.stderr.contains(named), "{}", out.describe(extra));
    }
    let st = ok!(sys::statfs(&h.mnt));
    assert_eq!(
        st.f_blocks * st.f_bsize as u64,
        16 << 20,
        "a refusal changes nothing"
    );
    assert_eq!(ok!(fs::read(h.mnt.join("f"))), b"before");
    memofs(&["umount", h.mnt()]).assert_success();
}

/// Whether a remount of the kernel's flags can run here (it takes root); says why not.
fn can_remount() -> bool {
    let root = memofs_e2e::is_root();
    if !root {
        eprintln!("SKIP: a remount of the kernel's flags takes root");
    }
    root
}

/// `p`'s atime as the server has it: `statx` with `AT_STATX_FORCE_SYNC`, so that no
/// attributes the kernel cached stand in for it.
fn atime(p: &Path) -> std::time::SystemTime {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    let mut stx = std::mem::MaybeUninit::<libc::statx>::zeroed();
    // SAFETY: `path` is NUL-terminated and `stx` has room for a `statx`.
    let r = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::AT_STATX_FORCE_SYNC,
            libc::STATX_ATIME,
            stx.as_mut_ptr(),
        )
    };
    assert_eq!(
        r,
        0,
        "statx {}: {}",
        p.display(),
        std::io::Error::last_os_error()
    );
    // SAFETY: statx succeeded and filled `stx`.
    let a = unsafe { stx.assume_init() }.stx_atime;
    std::time::UNIX_EPOCH + Duration::new(a.tv_sec as u64, a.tv_nsec)
}

/// Reads `p` through a new open (as `cat` does), with the kernel's cached pages of it
/// dropped first, so that the read reaches the server (or the kernel-backed data file).
fn read(p: &Path) {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    let mut f = ok!(fs::File::open(p));
    // SAFETY: `f` is open; advice only.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    let mut got = Vec::new();
    ok!(f.read_to_end(&mut got));
    assert_eq!(got, b"data");
}

/// Waits until the clock is past `p`'s atime (a new file's mtime in `dir`, outside the
/// mount, is later), so that an access that moves atime would show.
fn clock_past(dir: &Path, p: &Path) {
    let probe = dir.join(".clock");
    let before = atime(p);
    memofs_e2e::checks::eventually("the clock to move", Duration::from_secs(5), || {
        ok!(fs::write(&probe, b""));
        let now = ok!(ok!(fs::metadata(&probe)).modified());
        (now > before, now)
    });
    ok!(fs::remove_file(&probe));
}

/// `mount -o remount` with another atime rule takes effect at once, for files whose data
/// the kernel serves (the private tmpfs's rule), for the page store (the server's) and for
/// an export (its private copy of the host mount's), and a read-only mount moves no atime.
/// Where the kernel keeps every directory listing for good, `strictatime` alone is refused
/// with the way out.
#[test]
fn remount_changes_the_atime_rule_live() {
    require_mount!();
    if !can_remount() {
        return;
    }
    for data in ["passthrough=auto", "passthrough=off", "export"] {
        let h = Helper::new();
        let (src, opts) = match data {
            "export" => {
                let host = h.dir.path().join("host");
                ok!(fs::create_dir(&host));
                ("host".to_string(), format!("source={}", host.display()))
            }
            _ => ("memofs:e2e-atime".to_string(), format!("size=8m,{data}")),
        };
        h.run("mount.memofs", &[&src, h.mnt(), "-o", &opts])
            .assert_success();
        let f = h.mnt.join("f");
        ok!(fs::write(&f, b"data"));
        // relatime: the first read after the write moves atime, the next does not.
        clock_past(h.dir.path(), &f);
        read(&f);
        let first = atime(&f);
        assert!(
            first > ok!(ok!(fs::metadata(&f)).modified()),
            "{data}: relatime, first read"
        );
        clock_past(h.dir.path(), &f);
        read(&f);
        assert_eq!(atime(&f), first, "{data}: relatime, second read");
        if data != "export" {
            // A listing: the kernel is told it may keep the mem backend's listings for good.
            ok!(fs::read_dir(&h.mnt)).for_each(drop);
            let out = remount(&h, &src, "strictatime");
            assert_eq!(out.code(), Some(2), "{}", out.describe("strictatime"));
            assert!(
                out.stderr.contains("nodiratime"),
                "{}",
                out.describe("strictatime")
            );
        }

        remount(&h, &src, "strictatime,nodiratime").assert_success();
        let shown = mountinfo_for(&h.mnt).expect("mounted").mount_options;
        assert!(
            shown.contains("nodiratime") && !shown.contains("relatime"),
            "{shown}"
        );
        for _ in 0..2 {
            let before = atime(&f);
            clock_past(h.dir.path(), &f);
            read(&f);
            assert!(
                atime(&f) > before,
                "{data}: strictatime, every read moves atime"
            );
        }

        remount(&h, &src, "noatime").assert_success();
        let before = atime(&f);
        clock_past(h.dir.path(), &f);
        read(&f);
        assert_eq!(atime(&f), before, "{data}: noatime");

        remount(&h, &src, "strictatime").assert_success();
        remount(&h, &src, "ro").assert_success();
        let before = atime(&f);
        clock_past(h.dir.path(), &f);
        read(&f);
        assert_eq!(
            atime(&f),
            before,
            "{data}: a read-only mount moves no atime"
        );
        remount(&h, &src, "rw").assert_success();
        clock_past(h.dir.path(), &f);
        read(&f);
        assert!(atime(&f) > before, "{data}: rw again, strictatime again");
        memofs(&["umount", h.mnt()]).assert_success();
    }
}

/// A mount made read-only takes writes once remounted `rw` (the server refuses changes on
/// a read-only mount itself, for transports whose kernel is not told), and refuses them
/// again after `ro`. An export mounted read-only stays so (its private copy of the host's
/// mounts was made read-only, and which of them the host had made so is not kept), but one
/// remounted `ro` goes back to `rw`.
#[test]
fn a_mount_made_read_only_is_writable_after_remount_rw() {
    require_mount!();
    if !can_remount() {
        return;
    }
    for kind in ["mem", "export"] {
        let h = Helper::new();
        let host = h.dir.path().join("host");
        ok!(fs::create_dir(&host));
        let (src, opts) = match kind {
            "export" => ("host".to_string(), format!("source={}", host.display())),
            _ => ("memofs:e2e-ro".to_string(), "size=8m".to_string()),
        };
        h.run(
            "mount.memofs",
            &[&src, h.mnt(), "-o", &format!("ro,{opts}")],
        )
        .assert_success();
        let f = h.mnt.join("f");
        let e = fs::write(&f, b"x").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{kind}: {e}");
        let out = remount(&h, &src, "rw");
        if kind == "export" {
            assert_eq!(out.code(), Some(2), "{}", out.describe("rw"));
            assert!(
                out.stderr.contains("mounted read-only"),
                "{}",
                out.describe("rw")
            );
            let e = fs::write(&f, b"x").unwrap_err();
            assert_eq!(
                e.raw_os_error(),
                Some(libc::EROFS),
                "{kind} stays read-only: {e}"
            );
            memofs(&["umount", h.mnt()]).assert_success();
            h.run("mount.memofs", &[&src, h.mnt(), "-o", &opts])
                .assert_success();
            remount(&h, &src, "ro").assert_success();
            let e = fs::write(&f, b"x").unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{kind}: {e}");
            remount(&h, &src, "rw").assert_success();
        } else {
            out.assert_success();
        }
        ok!(fs::write(&f, b"data"));
        assert_eq!(ok!(fs::read(&f)), b"data", "{kind}");
        remount(&h, &src, "ro").assert_success();
        let e = fs::write(h.mnt.join("g"), b"x").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{kind}: {e}");
        memofs(&["umount", h.mnt()]).assert_success();
    }
}

/// mount(8)'s defaults: a helper mount covers what is mounted there (as every mount(8)
/// mount does), and root's mount serves device nodes unless `nodev` says otherwise.
#[test]
fn helper_mounts_stack_and_serve_devices_to_root() {
    require_mount!();
    let h = Helper::new();
    h.run("mount.memofs", &["memofs:below", h.mnt(), "-o", "size=4m"])
        .assert_success();
    ok!(fs::write(h.mnt.join("below"), b"x"));
    h.run("mount.memofs", &["memofs:above", h.mnt(), "-o", "size=4m"])
        .assert_success();
    assert_eq!(
        mountinfo_for(&h.mnt).expect("mounted").source,
        "memofs:above"
    );
    assert!(
        !h.mnt.join("below").exists(),
        "the new mount covers the old"
    );
    if memofs_e2e::is_root() {
        let null = h.mnt.join("null");
        ok!(sys::mknod(&null, libc::S_IFCHR | 0o666, sys::makedev(1, 3)));
        ok!(fs::write(&null, b"into /dev/null"));
    }
    memofs(&["umount", h.mnt()]).assert_success();
    assert_eq!(
        mountinfo_for(&h.mnt).expect("still mounted").source,
        "memofs:below"
    );
    assert!(h.mnt.join("below").exists());
    if memofs_e2e::is_root() {
        h.run(
            "mount.memofs",
            &["memofs:nodev", h.mnt(), "-o", "size=4m,nodev"],
        )
        .assert_success();
        let null = h.mnt.join("null");
        ok!(sys::mknod(&null, libc::S_IFCHR | 0o666, sys::makedev(1, 3)));
        let e = fs::write(&null, b"x").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EACCES), "nodev: {e}");
        memofs(&["umount", h.mnt()]).assert_success();
    }
    memofs(&["umount", h.mnt()]).assert_success();
}
