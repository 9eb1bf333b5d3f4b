//! Running a request with the caller's filesystem credentials.
//!
//! Linux keeps `fsuid`/`fsgid` per thread, so the request thread switches to the caller's ids
//! with the raw `setfsuid`/`setfsgid` system calls (the glibc wrappers are per-thread too,
//! but the raw calls make that explicit) and an RAII guard switches back. While switched the
//! host kernel checks permissions and assigns ownership as for the caller; moving `fsuid`
//! away from 0 also drops the filesystem capabilities (`CAP_CHOWN`, `CAP_DAC_OVERRIDE`,
//! `CAP_FOWNER`, `CAP_FSETID`, `CAP_MKNOD`, ...) from the thread's effective set, and moving
//! back to 0 restores them.
//!
//! The umask is per filesystem context (`fs_struct`), which a process's threads share: a
//! request thread that creates inodes first gets a context of its own (`unshare(CLONE_FS)`,
//! once per thread) and then sets the caller's umask around each creating call
//! ([`CallerUmask`]), passing the mode as the caller asked. The host then applies the
//! parent's default ACL, or else the umask, exactly as it would for the caller, and never
//! the server's own umask.
//!
//! FUSE does not tell the server the caller's supplementary groups, so the host sees only
//! `fsgid`: a caller whose access comes from a supplementary group is refused by the host
//! for the operations run this way. Only operations where the host's check or ownership
//! matters switch (see [`crate`]); the kernel has already checked the rest with
//! `default_permissions`, including supplementary groups.

use std::cell::Cell;
use std::sync::OnceLock;

use memofs_core::Caller;

/// `setfsuid`/`setfsgid` return the previous id and cannot report failure directly; this id
/// is never valid, so passing it reads the current id without changing it.
const QUERY: u32 = u32::MAX;

fn setfsuid(uid: u32) -> u32 {
    // SAFETY: the system call takes an integer and only changes this thread's fsuid.
    unsafe { libc::syscall(libc::SYS_setfsuid, uid) as u32 }
}

fn setfsgid(gid: u32) -> u32 {
    // SAFETY: the system call takes an integer and only changes this thread's fsgid.
    unsafe { libc::syscall(libc::SYS_setfsgid, gid) as u32 }
}

/// While alive, the thread's filesystem ids are the caller's. Not `Send`: it must be dropped
/// on the thread that made it.
pub(crate) struct AsCaller {
    /// The ids to go back to; `None` when the caller's ids were the server's already.
    old: Option<(u32, u32)>,
    _not_send: std::marker::PhantomData<*const ()>,
}

/// The server's own effective ids, which its threads' filesystem ids follow outside guards.
fn server_ids() -> (u32, u32) {
    static IDS: OnceLock<(u32, u32)> = OnceLock::new();
    // SAFETY: geteuid/getegid have no preconditions.
    *IDS.get_or_init(|| unsafe { (libc::geteuid(), libc::getegid()) })
}

impl AsCaller {
    /// Switches this thread to `caller`'s ids (group first, while the thread still has the
    /// capability to change it). When the server lacks the privilege, the ids silently stay
    /// the server's, as for an unprivileged `passthrough_ll`.
    ///
    /// A caller with the server's own ids (root for a root server) needs no switch: four
    /// system calls saved per request.
    pub(crate) fn switch(caller: &Caller) -> AsCaller {
        let old = ((caller.uid, caller.gid) != server_ids()).then(|| {
            let old_gid = setfsgid(caller.gid);
            let old_uid = setfsuid(caller.uid);
            (old_uid, old_gid)
        });
        AsCaller {
            old,
            _not_send: std::marker::PhantomData,
        }
    }
}

/// Runs `f` with the server's own filesystem ids, and so its filesystem capabilities,
/// whatever this thread is switched to: for work done on the server's behalf in the middle
/// of a caller's request (opening an inode's handle again needs `CAP_DAC_READ_SEARCH`).
pub(crate) fn as_server<T>(f: impl FnOnce() -> T) -> T {
    let current = (setfsuid(QUERY), setfsgid(QUERY));
    let (uid, gid) = server_ids();
    if current == (uid, gid) {
        return f();
    }
    // As `AsCaller`'s drop, then as its switch.
    setfsuid(uid);
    setfsgid(gid);
    let r = f();
    setfsgid(current.1);
    setfsuid(current.0);
    r
}

impl Drop for AsCaller {
    fn drop(&mut self) {
        // User first: back at fsuid 0 the thread has its capabilities again.
        if let Some((uid, gid)) = self.old {
            setfsuid(uid);
            setfsgid(gid);
        }
    }
}

/// While alive, the thread's umask is the caller's. Not `Send`, as [`AsCaller`].
pub(crate) struct CallerUmask {
    old: libc::mode_t,
    _not_send: std::marker::PhantomData<*const ()>,
}

thread_local! {
    /// Whether this thread has a filesystem context of its own: `None` until tried.
    static OWN_FS: Cell<Option<bool>> = const { Cell::new(None) };
}

/// Gives this thread its own filesystem context (umask, current and root directory), once;
/// false if the kernel refused (then the umask is the process's).
fn own_fs() -> bool {
    OWN_FS.with(|own| {
        if let Some(done) = own.get() {
            return done;
        }
        // Not while another thread has borrowed the shared working directory: the copy
        // would keep it (see `ProcSelf::with_path`).
        let _cwd = crate::fd::CWD.lock();
        // SAFETY: unshare(CLONE_FS) only copies this thread's fs_struct; no memory is shared
        // with the call.
        let done = unsafe { libc::unshare(libc::CLONE_FS) } == 0;
        if !done {
            log::warn!(
                "passthrough: no per-thread umask ({}): new files also get the server's umask",
                std::io::Error::last_os_error()
            );
        }
        own.set(Some(done));
        done
    })
}

impl CallerUmask {
    /// Sets this thread's umask to `umask` until the guard drops; `None` when the thread
    /// cannot have its own (the caller must then mask the mode itself).
    pub(crate) fn set(umask: u32) -> Option<CallerUmask> {
        if !own_fs() {
            return None;
        }
        // SAFETY: umask only changes this thread's (now private) filesystem context.
        let old = unsafe { libc::umask((umask & 0o777) as libc::mode_t) };
        Some(CallerUmask {
            old,
            _not_send: std::marker::PhantomData,
        })
    }

    /// The mode to pass to a creating call made under `guard` (from [`CallerUmask::set`]):
    /// as asked when the host applies the umask, masked here otherwise.
    pub(crate) fn mode(guard: &Option<CallerUmask>, mode: u32, umask: u32) -> u32 {
        match guard {
            Some(_) => mode,
            None => mode & !(umask & 0o777),
        }
    }
}

impl Drop for CallerUmask {
    fn drop(&mut self) {
        // SAFETY: as in `set`.
        unsafe { libc::umask(self.old) };
    }
}

/// This thread's current `(fsuid, fsgid)`.
pub(crate) fn current() -> (u32, u32) {
    (setfsuid(QUERY), setfsgid(QUERY))
}

/// Whether this process can switch its filesystem ids (root, or `CAP_SETUID` and
/// `CAP_SETGID`): probes with `nobody`'s ids on the calling thread.
pub(crate) fn can_switch() -> bool {
    const PROBE: u32 = 65534;
    if current() == (PROBE, PROBE) {
        return false;
    }
    let guard = AsCaller::switch(&Caller {
        uid: PROBE,
        gid: PROBE,
        pid: 0,
    });
    let switched = current() == (PROBE, PROBE);
    drop(guard);
    switched
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callers_with_the_server_ids_need_no_switch() {
        let (uid, gid) = server_ids();
        let g = AsCaller::switch(&Caller { uid, gid, pid: 0 });
        assert!(g.old.is_none());
        assert_eq!(current(), (uid, gid));
    }

    #[test]
    fn umask_is_per_thread_and_restored() {
        // SAFETY: umask(2) with a valid mask; reads the value back at once.
        let process = || unsafe {
            let u = libc::umask(0o022);
            libc::umask(u);
            u
        };
        let before = process();
        std::thread::spawn(move || {
            let guard = CallerUmask::set(0o077);
            assert!(guard.is_some(), "unshare(CLONE_FS) works in a thread");
            assert_eq!(process(), 0o077);
            assert_eq!(CallerUmask::mode(&guard, 0o666, 0o077), 0o666);
            drop(guard);
            assert_eq!(process(), before);
        })
        .join()
        .unwrap();
        assert_eq!(process(), before, "the process's umask is untouched");
        assert_eq!(CallerUmask::mode(&None, 0o666, 0o027), 0o640);
    }

    #[test]
    fn guard_restores_ids() {
        let before = current();
        {
            let _g = AsCaller::switch(&Caller {
                uid: 1234,
                gid: 4321,
                pid: 0,
            });
            if can_switch() {
                assert_eq!(current(), (1234, 4321));
            }
        }
        assert_eq!(current(), before);
    }
}
