//! Mounting and unmounting a FUSE filesystem: `mount(2)` as root, `fusermount3` otherwise.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;

use memofs_core::atime::AtimeMode;
use memofs_core::options::KernelFlag;
use memofs_core::plan::MountPlan;

use crate::device::open_dev_fuse;

/// The filesystem type shown in the mount table (`fuse.memofs`).
pub const SUBTYPE: &str = "memofs";

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn cstring(b: &[u8]) -> io::Result<CString> {
    CString::new(b).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// The `mount(2)` flags for the plan's kernel flags, and the atime flags that show the
/// server's atime rule (the kernel itself leaves atime to FUSE servers), so that the mount
/// table tells the rule and mount(8)'s remount hands it back.
fn mount_flags(plan: &MountPlan) -> libc::c_ulong {
    let atime = match plan.atime.mode {
        AtimeMode::Strict => libc::MS_STRICTATIME,
        AtimeMode::Relatime => libc::MS_RELATIME,
        AtimeMode::Noatime => libc::MS_NOATIME,
    } | if plan.atime.nodiratime {
        libc::MS_NODIRATIME
    } else {
        0
    };
    plan.kernel_flags.iter().fold(atime, |f, k| {
        f | match k {
            KernelFlag::ReadOnly => libc::MS_RDONLY,
            KernelFlag::NoSuid => libc::MS_NOSUID,
            KernelFlag::NoDev => libc::MS_NODEV,
            KernelFlag::NoExec => libc::MS_NOEXEC,
            KernelFlag::Sync => libc::MS_SYNCHRONOUS,
            KernelFlag::DirSync => libc::MS_DIRSYNC,
        }
    })
}

/// The same flags as `fusermount3` options (not the atime flags: fusermount3 3.14 knows
/// neither `strictatime` nor `nodiratime`, so a plain user's mount shows the kernel's
/// default, `relatime`, whatever the server's rule).
fn flag_options(plan: &MountPlan) -> Vec<&'static str> {
    let on = |k| plan.kernel_flags.contains(&k);
    vec![
        if on(KernelFlag::ReadOnly) { "ro" } else { "rw" },
        if on(KernelFlag::NoSuid) {
            "nosuid"
        } else {
            "suid"
        },
        if on(KernelFlag::NoDev) {
            "nodev"
        } else {
            "dev"
        },
        if on(KernelFlag::NoExec) {
            "noexec"
        } else {
            "exec"
        },
        if on(KernelFlag::Sync) {
            "sync"
        } else {
            "async"
        },
    ]
    .into_iter()
    .chain(on(KernelFlag::DirSync).then_some("dirsync"))
    .collect()
}

/// Mounts a FUSE filesystem at `mountpoint` as the plan says; returns the session's
/// `/dev/fuse` descriptor (the kernel's INIT request is waiting on it).
pub fn mount(mountpoint: &Path, plan: &MountPlan) -> io::Result<OwnedFd> {
    if is_root() {
        mount_directly(mountpoint, plan)
    } else {
        mount_with_fusermount(mountpoint, plan)
    }
}

fn mount_directly(mountpoint: &Path, plan: &MountPlan) -> io::Result<OwnedFd> {
    let fd = open_dev_fuse()?;
    // SAFETY: getuid/getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut data = format!(
        "fd={},rootmode=40000,user_id={uid},group_id={gid},default_permissions",
        fd.as_raw_fd()
    );
    if plan.allow_other {
        data.push_str(",allow_other");
    }
    let source = cstring(plan.fsname.as_bytes())?;
    let target = cstring(mountpoint.as_os_str().as_bytes())?;
    let fstype = cstring(format!("fuse.{SUBTYPE}").as_bytes())?;
    let data = cstring(data.as_bytes())?;
    // SAFETY: every pointer is a live NUL-terminated string.
    let r = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            mount_flags(plan),
            data.as_ptr().cast(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Receives the one descriptor `fusermount3` passes over `sock`.
fn receive_fd(sock: RawFd) -> io::Result<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // Room for one control message carrying one int.
    let mut control = [0u64; 4];
    // SAFETY: a zeroed msghdr is valid; the pointers set below outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: `msg` describes live buffers of the sizes it states.
    let n = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: CMSG_FIRSTHDR reads the msghdr recvmsg filled.
    let cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    // SAFETY: `cmsg` is checked for null; its level, type and data lie within `control`.
    unsafe {
        if cmsg.is_null()
            || (*cmsg).cmsg_level != libc::SOL_SOCKET
            || (*cmsg).cmsg_type != libc::SCM_RIGHTS
        {
            return Err(io::Error::other(
                "fusermount3 passed no /dev/fuse descriptor",
            ));
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>());
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// Where `fusermount3` reads whether users may mount with `allow_other`.
const FUSE_CONF: &str = "/etc/fuse.conf";

/// Whether `conf` (the text of [`FUSE_CONF`]) has a `user_allow_other` line.
fn user_allow_other(conf: &str) -> bool {
    conf.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .any(|l| l == "user_allow_other")
}

fn mount_with_fusermount(mountpoint: &Path, plan: &MountPlan) -> io::Result<OwnedFd> {
    if plan.allow_other
        && !user_allow_other(&std::fs::read_to_string(FUSE_CONF).unwrap_or_default())
    {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "allow_other lets other users into a mount only where root allows it for \
                 everyone: {FUSE_CONF} has no user_allow_other line (as root: echo \
                 user_allow_other >> {FUSE_CONF}), or mount without allow_other"
            ),
        ));
    }
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors socketpair returns.
    if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, fds.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: socketpair succeeded: both descriptors are open and owned by nobody else.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let mut opts = vec![
        format!("fsname={}", plan.fsname),
        format!("subtype={SUBTYPE}"),
        "default_permissions".to_string(),
    ];
    opts.extend(flag_options(plan).into_iter().map(String::from));
    if plan.allow_other {
        opts.push("allow_other".into());
    }
    let status = Command::new("fusermount3")
        .arg("-o")
        .arg(opts.join(","))
        .arg("--")
        .arg(mountpoint)
        .env("_FUSE_COMMFD", theirs.as_raw_fd().to_string())
        .status()
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot run fusermount3 ({e}), which mounts for users who are not root: \
                     as root, apt-get install fuse3"
                ),
            )
        })?;
    drop(theirs);
    if !status.success() {
        return Err(io::Error::other(format!("fusermount3 failed ({status})")));
    }
    receive_fd(ours.as_raw_fd())
}

/// Unmounts `mountpoint` (`lazy`: detach now, finish when no longer busy).
pub fn unmount(mountpoint: &Path, lazy: bool) -> io::Result<()> {
    if is_root() {
        let target = cstring(mountpoint.as_os_str().as_bytes())?;
        let flags = if lazy { libc::MNT_DETACH } else { 0 };
        // SAFETY: `target` is a live NUL-terminated path.
        if unsafe { libc::umount2(target.as_ptr(), flags) } != 0 {
            return Err(io::Error::last_os_error());
        }
        return Ok(());
    }
    let mut cmd = Command::new("fusermount3");
    cmd.arg("-u");
    if lazy {
        cmd.arg("-z");
    }
    let status = cmd.arg("--").arg(OsStr::new(mountpoint)).status()?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "fusermount3 -u failed ({status})"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_allow_other_is_read_as_fusermount3_reads_it() {
        assert!(user_allow_other("# comment\nuser_allow_other\n"));
        assert!(user_allow_other("  user_allow_other  # yes\n"));
        assert!(!user_allow_other("#user_allow_other\nmount_max = 1000\n"));
        assert!(!user_allow_other(""));
    }
    use memofs_core::options::parse_options;
    use memofs_core::plan::BackendKind;

    #[test]
    fn kernel_flags_both_ways() {
        // A read-only mount shows the rule it names, kept for a remount `rw` (nothing moves
        // atime while it is read-only: `MountPlan::atime_in_effect`).
        let o = parse_options(&["ro,noexec,dev"], 8 << 30).unwrap();
        let p = MountPlan::new(&o, BackendKind::Mem, false);
        let atime = libc::MS_RELATIME;
        assert_eq!(
            mount_flags(&p),
            libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NOEXEC | atime
        );
        assert_eq!(flag_options(&p), ["ro", "nosuid", "dev", "noexec", "async"]);
    }
}
