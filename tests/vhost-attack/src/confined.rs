//! Whether the server, as the guest's requests leave it, works inside its sandbox: each of
//! its threads' working directory is its root, and `..` from there leads nowhere else.
//! Looked at from outside, as the server itself would resolve it: a child of this program
//! opens a thread's `/proc/PID/task/TID/cwd` and `root`, `chroot`s into that root and opens
//! `..` from that working directory.

use std::ffi::CString;
use std::os::unix::fs::MetadataExt;

use memofs_proto::abi::{self, opcode};
use zerocopy::{FromZeros, IntoBytes};

use memofs_vhost_attack::guest::Guest;
use memofs_vhost_attack::server::children;

/// The process that serves under `pid`: its deepest descendant (a sandboxed server serves
/// from a child of the process the VMM started).
fn serving(pid: u32) -> u32 {
    children(pid).first().map_or(pid, |&child| serving(child))
}

/// SETATTR of the root's mode, as the guest's root.
fn chmod_root(g: &mut Guest, mode: u32) -> Result<(), String> {
    let mut set = abi::fuse_setattr_in::new_zeroed();
    set.valid = abi::fattr::MODE;
    set.mode = libc::S_IFDIR | mode;
    match g.call(opcode::SETATTR, 1, set.as_bytes(), 4096) {
        Some((0, _)) => Ok(()),
        other => Err(format!(
            "chmod {mode:o} of the root: {:?}",
            other.map(|r| r.0)
        )),
    }
}

/// SETXATTR of the root (mode 0700, the host's root's) by a guest user who may not enter
/// it: the server runs the call as that user, and must still find its way back to its own
/// root afterwards (answering, not stopping).
fn setxattr_as_a_stranger(g: &mut Guest) -> Result<(), String> {
    chmod_root(g, 0o700)?;
    let mut body = Vec::new();
    body.extend_from_slice(&1u32.to_ne_bytes());
    body.extend_from_slice(&0u32.to_ne_bytes());
    body.extend_from_slice(b"user.memofs-attack\0x");
    let req = g.fuse_as(opcode::SETXATTR, 1, &body, (4242, 4242));
    let answered = g.request(&req, 4096).is_some();
    chmod_root(g, 0o755)?;
    match answered {
        true => Ok(()),
        false => Err("no answer to SETXATTR by a user who may not enter the root".into()),
    }
}

/// The check: calls that reach host files by path (GETXATTR, LISTXATTR of the root, and a
/// SETXATTR by another user) first, so that a server which borrows a working directory for
/// them has done so.
pub fn check(g: &mut Guest, pid: u32) -> Result<String, String> {
    setxattr_as_a_stranger(g)?;
    let get = abi::fuse_getxattr_in::new_zeroed();
    let mut body = get.as_bytes().to_vec();
    body.extend_from_slice(b"user.memofs-attack-none\0");
    match g.call(opcode::GETXATTR, 1, &body, 4096) {
        Some((e, _)) if e == -libc::ENODATA || e == -libc::EOPNOTSUPP => {}
        other => return Err(format!("GETXATTR of the root: {:?}", other.map(|r| r.0))),
    }
    match g.call(opcode::LISTXATTR, 1, get.as_bytes(), 4096) {
        Some((0, _)) => {}
        other => return Err(format!("LISTXATTR of the root: {:?}", other.map(|r| r.0))),
    }
    let server = serving(pid);
    let root = format!("/proc/{server}/root");
    let host_root = std::fs::metadata("/").map_err(|e| e.to_string())?;
    let server_root = std::fs::metadata(&root).map_err(|e| format!("{root}: {e}"))?;
    if (server_root.dev(), server_root.ino()) == (host_root.dev(), host_root.ino()) {
        return Ok("no sandbox: the server's root is the host's".into());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok("skipped: looking from the server's root takes chroot, which takes root".into());
    }
    // Every thread: one with a working directory of its own (unshare(CLONE_FS)) has its own.
    let tasks: Vec<u32> = std::fs::read_dir(format!("/proc/{server}/task"))
        .map_err(|e| format!("/proc/{server}/task: {e}"))?
        .flatten()
        .filter_map(|t| t.file_name().to_str()?.parse().ok())
        .collect();
    for &tid in &tasks {
        let at = format!("/proc/{server}/task/{tid}");
        match from_inside(&at) {
            0 => {}
            1 => {
                return Err(format!(
                    "thread {tid} of {server} works in a directory other than its root ({:?})",
                    std::fs::read_link(format!("{at}/cwd"))
                ))
            }
            2 => {
                return Err(format!(
                    "from thread {tid} of {server}'s working directory, .. leads out of its root"
                ))
            }
            n => return Err(format!("could not look from thread {tid}'s root ({n})")),
        }
    }
    Ok(format!(
        "{} threads of {server}: working directory is the root, .. too",
        tasks.len()
    ))
}

/// Forks a child that looks as the thread `task` (its `/proc` directory) would; its exit
/// code: 0 (working directory is the root and `..` from it the root), 1 (working directory
/// elsewhere), 2 (`..` leads elsewhere), 3 and up (could not look).
fn from_inside(task: &str) -> i32 {
    let cwd = CString::new(format!("{task}/cwd")).expect("no NUL");
    let root = CString::new(format!("{task}/root")).expect("no NUL");
    // SAFETY: the child only makes system calls (no allocation, no locks) and then _exits.
    match unsafe { libc::fork() } {
        0 => {
            // SAFETY: async-signal-safe calls on NUL-terminated paths and live buffers.
            let code = unsafe { look(&cwd, &root) };
            // SAFETY: ends the child without running the parent's destructors.
            unsafe { libc::_exit(code) }
        }
        -1 => 5,
        child => {
            let mut status = 0;
            // SAFETY: `child` is this process's child; `status` is a live int.
            if unsafe { libc::waitpid(child, &mut status, 0) } != child {
                return 6;
            }
            match libc::WIFEXITED(status) {
                true => libc::WEXITSTATUS(status),
                false => 7,
            }
        }
    }
}

/// In the forked child: see [`from_inside`].
///
/// # Safety
/// Only in a forked child of a threaded process: it makes system calls only.
unsafe fn look(cwd: &CString, root: &CString) -> i32 {
    let dir = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;
    let cwd = libc::open(cwd.as_ptr(), dir);
    let root = libc::open(root.as_ptr(), dir);
    if cwd < 0 || root < 0 || libc::fchdir(root) != 0 || libc::chroot(c".".as_ptr()) != 0 {
        return 3;
    }
    let up = libc::openat(cwd, c"..".as_ptr(), dir);
    if up < 0 {
        return 4;
    }
    let id = |fd: i32| {
        let mut st: libc::stat = std::mem::zeroed();
        match libc::fstat(fd, &mut st) {
            0 => Some((st.st_dev, st.st_ino)),
            _ => None,
        }
    };
    match (id(cwd), id(root), id(up)) {
        (Some(c), Some(r), Some(u)) if c == r && u == r => 0,
        (Some(c), Some(r), Some(_)) if c != r => 1,
        (Some(_), Some(_), Some(_)) => 2,
        _ => 4,
    }
}
