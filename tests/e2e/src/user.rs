//! Acting as another user.
//!
//! Linux credentials belong to threads; glibc only makes `setresuid` and friends process-wide
//! by signalling every thread. Calling the raw syscalls in a fresh thread changes that thread
//! alone, so a test can act as an unprivileged user (all capabilities dropped, as for a real
//! user) while the rest of the test process stays root.

/// Run `f` in a new thread whose real, effective, saved and filesystem uid/gid are `uid`/`gid`
/// and whose supplementary groups are `groups`. Panics in `f` propagate.
pub fn as_user<T: Send + 'static>(
    uid: u32,
    gid: u32,
    groups: &[u32],
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let groups: Vec<libc::gid_t> = groups.to_vec();
    let handle = std::thread::spawn(move || {
        // SAFETY: raw id syscalls on this thread only (set*id through syscall(2) changes the calling
        // thread, not the process); `groups` outlives the setgroups call.
        unsafe {
            let r = libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr());
            assert_eq!(r, 0, "setgroups: {}", std::io::Error::last_os_error());
            let r = libc::syscall(libc::SYS_setresgid, gid, gid, gid);
            assert_eq!(r, 0, "setresgid: {}", std::io::Error::last_os_error());
            let r = libc::syscall(libc::SYS_setresuid, uid, uid, uid);
            assert_eq!(r, 0, "setresuid: {}", std::io::Error::last_os_error());
            assert_eq!(libc::syscall(libc::SYS_geteuid) as u32, uid);
        }
        f()
    });
    match handle.join() {
        Ok(v) => v,
        Err(p) => std::panic::resume_unwind(p),
    }
}

/// An unprivileged uid/gid pair for tests (no such account is needed).
pub const USER1: (u32, u32) = (4001, 4001);
/// A second unprivileged user.
pub const USER2: (u32, u32) = (4002, 4002);
