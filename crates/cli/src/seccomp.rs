//! The seccomp filter of `memofs virtiofsd` (`--seccomp`, as virtiofsd's): only the system
//! calls the server makes are allowed; any other one kills the process (`kill`, the
//! default), is logged by the kernel and allowed (`log`), or raises `SIGSYS`, which the
//! server reports and survives (`trap`); `none` installs no filter.
//!
//! The list is what the server's own code, the Rust standard library, the vhost-user crates
//! and the two backends call, found by tracing the guest tests and read from the code.
//! Calls only setup makes (mount, pivot_root, socket, bind) are not on it: the filter is
//! installed after setup, before the first request. Calls the server makes for one purpose
//! are allowed for that one only ([`NARROWED`]): `clone` starts threads and nothing else
//! (no process, so nothing can be run), `unshare` gives a thread its own filesystem context
//! (no namespaces), `prctl` names threads, `ioctl` takes the few requests the server makes
//! (inode flags, and the standard library's own). The list is right for x86-64 and aarch64
//! ([`ALLOWED_ARCH`]; `make lint` checks the code for both). `clone3`, whose flags sit in
//! memory a filter cannot read, fails with `ENOSYS` (a second filter), so that the C
//! library starts threads with `clone`, as virtiofsd's filter does.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};

/// `--seccomp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeccompMode {
    /// No filter.
    None,
    /// Any other call kills the process.
    Kill,
    /// Any other call is logged by the kernel and allowed.
    Log,
    /// Any other call raises `SIGSYS`, which is reported.
    Trap,
}

impl SeccompMode {
    /// `--seccomp`'s value (default `kill`).
    pub fn parse(s: Option<&str>) -> Result<SeccompMode, String> {
        match s {
            None | Some("kill") => Ok(SeccompMode::Kill),
            Some("none") => Ok(SeccompMode::None),
            Some("log") => Ok(SeccompMode::Log),
            Some("trap") => Ok(SeccompMode::Trap),
            Some(other) => Err(format!(
                "--seccomp={other}: the modes are kill (the default), log, trap and none"
            )),
        }
    }
}

/// Every system call the server makes once it serves.
const ALLOWED: &[libc::c_long] = &[
    // memory, threads, time, signals
    libc::SYS_brk,
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mremap,
    libc::SYS_mprotect,
    libc::SYS_madvise,
    libc::SYS_clone3,
    libc::SYS_set_robust_list,
    libc::SYS_rseq,
    libc::SYS_futex,
    libc::SYS_exit,
    libc::SYS_exit_group,
    libc::SYS_gettid,
    libc::SYS_getpid,
    libc::SYS_tgkill,
    libc::SYS_sched_yield,
    libc::SYS_sched_getaffinity,
    libc::SYS_nanosleep,
    libc::SYS_clock_nanosleep,
    libc::SYS_clock_gettime,
    libc::SYS_gettimeofday,
    libc::SYS_getrandom,
    libc::SYS_rt_sigaction,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigreturn,
    libc::SYS_rt_sigtimedwait,
    libc::SYS_sigaltstack,
    libc::SYS_sysinfo,
    libc::SYS_uname,
    libc::SYS_getrlimit,
    libc::SYS_prlimit64,
    // identities: each request runs with its caller's (fsuid, fsgid, groups)
    libc::SYS_getuid,
    libc::SYS_geteuid,
    libc::SYS_getgid,
    libc::SYS_getegid,
    libc::SYS_setfsuid,
    libc::SYS_setfsgid,
    libc::SYS_setresuid,
    libc::SYS_setresgid,
    libc::SYS_setgroups,
    libc::SYS_capget,
    libc::SYS_capset,
    libc::SYS_umask,
    // descriptors, the VMM's socket and events, the control socket
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_readv,
    libc::SYS_writev,
    libc::SYS_close,
    libc::SYS_dup,
    libc::SYS_dup3,
    libc::SYS_fcntl,
    libc::SYS_eventfd2,
    libc::SYS_epoll_create1,
    libc::SYS_epoll_ctl,
    libc::SYS_epoll_pwait,
    libc::SYS_ppoll,
    libc::SYS_accept,
    libc::SYS_accept4,
    libc::SYS_recvmsg,
    libc::SYS_sendmsg,
    libc::SYS_recvfrom,
    libc::SYS_sendto,
    libc::SYS_shutdown,
    libc::SYS_getsockopt,
    libc::SYS_setsockopt,
    // files (the shared directory's, through descriptors the backend holds)
    libc::SYS_openat,
    libc::SYS_openat2,
    libc::SYS_name_to_handle_at,
    libc::SYS_newfstatat,
    libc::SYS_fstat,
    libc::SYS_statx,
    libc::SYS_fstatfs,
    libc::SYS_statfs,
    libc::SYS_lseek,
    libc::SYS_pread64,
    libc::SYS_pwrite64,
    libc::SYS_preadv,
    libc::SYS_pwritev,
    libc::SYS_preadv2,
    libc::SYS_pwritev2,
    libc::SYS_getdents64,
    libc::SYS_mkdirat,
    libc::SYS_mknodat,
    libc::SYS_symlinkat,
    libc::SYS_linkat,
    libc::SYS_unlinkat,
    libc::SYS_renameat,
    libc::SYS_renameat2,
    libc::SYS_readlinkat,
    libc::SYS_fchmod,
    libc::SYS_fchmodat,
    memofs_passthrough::SYS_FCHMODAT2,
    libc::SYS_fchown,
    libc::SYS_fchownat,
    libc::SYS_utimensat,
    libc::SYS_ftruncate,
    libc::SYS_fallocate,
    libc::SYS_fsync,
    libc::SYS_fdatasync,
    libc::SYS_syncfs,
    libc::SYS_copy_file_range,
    libc::SYS_flock,
    libc::SYS_fchdir,
    libc::SYS_getxattr,
    libc::SYS_lgetxattr,
    libc::SYS_fgetxattr,
    libc::SYS_setxattr,
    libc::SYS_lsetxattr,
    libc::SYS_fsetxattr,
    libc::SYS_listxattr,
    libc::SYS_llistxattr,
    libc::SYS_flistxattr,
    libc::SYS_removexattr,
    libc::SYS_lremovexattr,
    libc::SYS_fremovexattr,
    // the mem backend's kernel-backed data, where it is used
    libc::SYS_memfd_create,
];

/// Calls of [`ALLOWED`]'s kind that only some architectures have: where x86-64's C library
/// calls `unlink`, `poll` and `epoll_wait`, aarch64's (whose kernel never had them, as the
/// generic system call table) calls `unlinkat`, `ppoll` and `epoll_pwait`.
#[cfg(target_arch = "x86_64")]
const ALLOWED_ARCH: &[libc::c_long] = &[libc::SYS_unlink, libc::SYS_poll, libc::SYS_epoll_wait];
#[cfg(not(target_arch = "x86_64"))]
const ALLOWED_ARCH: &[libc::c_long] = &[];

/// The namespaces `clone` could make: none may be asked for.
const CLONE_NEW: u64 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWCGROUP) as u64;

/// A whole 32-bit argument, as a mask.
const WHOLE: u64 = u32::MAX as u64;

/// Calls allowed only where one argument, masked, has one value: the call, the argument's
/// index and width, the mask and the value (any of the call's entries).
const NARROWED: &[(libc::c_long, u8, SeccompCmpArgLen, u64, u64)] = &[
    // a thread (sharing memory, files and signal handlers) in the same namespaces, never a
    // process
    (
        libc::SYS_clone,
        0,
        SeccompCmpArgLen::Qword,
        libc::CLONE_THREAD as u64 | CLONE_NEW,
        libc::CLONE_THREAD as u64,
    ),
    // a thread's own cwd and umask (the passthrough backend's creation context)
    (
        libc::SYS_unshare,
        0,
        SeccompCmpArgLen::Dword,
        WHOLE,
        libc::CLONE_FS as u64,
    ),
    // a thread's name, set and read; an anonymous mapping's name (the C library's, where
    // its tunables ask for it)
    (
        libc::SYS_prctl,
        0,
        SeccompCmpArgLen::Dword,
        WHOLE,
        libc::PR_SET_NAME as u64,
    ),
    (
        libc::SYS_prctl,
        0,
        SeccompCmpArgLen::Dword,
        WHOLE,
        libc::PR_GET_NAME as u64,
    ),
    (
        libc::SYS_prctl,
        0,
        SeccompCmpArgLen::Dword,
        WHOLE,
        libc::PR_SET_VMA as u64,
    ),
    // inode flags of a shared directory's files and the kernel-backed data's (lsattr,
    // chattr); whether standard error is a terminal (the logger; as C libraries ask it:
    // glibc with TCGETS or, newer, TCGETS2, musl with TIOCGWINSZ); the standard library's
    // non-blocking and close-on-exec switches. Nothing else: no terminal input injected
    // (TIOCSTI), no device driven.
    ioctl(libc::FS_IOC_GETFLAGS),
    ioctl(libc::FS_IOC_SETFLAGS),
    ioctl(libc::TCGETS),
    ioctl(libc::TCGETS2),
    ioctl(libc::TIOCGWINSZ),
    ioctl(libc::FIONBIO),
    ioctl(libc::FIOCLEX),
];

/// A [`NARROWED`] entry: `ioctl` with request `request` (an `unsigned int` to the kernel).
const fn ioctl(request: libc::Ioctl) -> (libc::c_long, u8, SeccompCmpArgLen, u64, u64) {
    (
        libc::SYS_ioctl,
        1,
        SeccompCmpArgLen::Dword,
        WHOLE,
        request & WHOLE,
    )
}

/// Allowed only where the server opens file handles (a `--shared-dir` without
/// `--inode-file-handles=never`): a handle opens any file of its filesystem, inside the
/// shared directory or not.
const OPEN_HANDLES: &[libc::c_long] = &[libc::SYS_open_by_handle_at];

/// The filter's rules: every call allowed, [`NARROWED`] calls with their arguments,
/// `open_by_handle_at` only with `open_handles`.
fn rules(open_handles: bool) -> Result<BTreeMap<i64, Vec<SeccompRule>>, String> {
    let handles = if open_handles { OPEN_HANDLES } else { &[] };
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = ALLOWED
        .iter()
        .chain(ALLOWED_ARCH)
        .chain(handles)
        .map(|&n| (n, Vec::new()))
        .collect();
    for (call, arg, len, mask, value) in NARROWED {
        let op = SeccompCmpOp::MaskedEq(*mask);
        let condition = SeccompCondition::new(*arg, len.clone(), op, *value).map_err(refused)?;
        rules
            .entry(*call)
            .or_default()
            .push(SeccompRule::new(vec![condition]).map_err(refused)?);
    }
    Ok(rules)
}

/// What `--seccomp` says when its filter cannot be made or installed.
fn refused(e: impl std::fmt::Display) -> String {
    format!("--seccomp: {e}")
}

/// The second filter: `clone3` fails with `ENOSYS` (the first allows it, so that this
/// answer, which the kernel ranks above allowing, is the one given).
fn no_clone3(arch: seccompiler::TargetArch) -> Result<BpfProgram, String> {
    let rules = BTreeMap::from([(libc::SYS_clone3, Vec::new())]);
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(refused)?;
    filter.try_into().map_err(refused)
}

/// Installs the filter `mode` asks for on this thread (and so on every thread it starts
/// later); `open_handles`: the server may open file handles.
pub fn install(mode: SeccompMode, open_handles: bool) -> Result<(), String> {
    let mismatch = match mode {
        SeccompMode::None => return Ok(()),
        SeccompMode::Kill => SeccompAction::KillProcess,
        SeccompMode::Log => SeccompAction::Log,
        SeccompMode::Trap => {
            report_sigsys()?;
            SeccompAction::Trap
        }
    };
    let arch: seccompiler::TargetArch = std::env::consts::ARCH.try_into().map_err(refused)?;
    let filter = SeccompFilter::new(rules(open_handles)?, mismatch, SeccompAction::Allow, arch)
        .map_err(refused)?;
    let program: BpfProgram = filter.try_into().map_err(refused)?;
    // `clone3`'s filter first: installing a filter takes `prctl` and `seccomp`, which the
    // main filter refuses.
    seccompiler::apply_filter(&no_clone3(arch)?).map_err(refused)?;
    seccompiler::apply_filter(&program).map_err(refused)
}

/// In `trap` mode: a `SIGSYS` handler that reports the refused call on standard error;
/// the call fails and the server goes on.
fn report_sigsys() -> Result<(), String> {
    extern "C" fn on_sigsys(_: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        // SAFETY: the kernel passes a valid siginfo for SIGSYS; `_sifields` of a SIGSYS
        // starts with the call address, then the call number (`si_syscall`) at offset 8 of
        // the fields after the 16-byte header.
        let nr = unsafe { *(info as *const u8).add(16 + 8).cast::<i32>() };
        let mut msg = *b"memofs: seccomp: system call         refused\n";
        let mut n = nr.unsigned_abs();
        let mut at = 35;
        loop {
            msg[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 || at == 29 {
                break;
            }
            at -= 1;
        }
        // SAFETY: write(2) is async-signal-safe; the buffer is live.
        unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
        // The refused call returns ENOSYS (the kernel leaves its number in the register).
        #[cfg(target_arch = "x86_64")]
        // SAFETY: an SA_SIGINFO handler's third argument is the interrupted ucontext, whose
        // registers the kernel restores when the handler returns.
        unsafe {
            let uc = ctx.cast::<libc::ucontext_t>();
            (*uc).uc_mcontext.gregs[libc::REG_RAX as usize] = -(libc::ENOSYS as i64);
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = ctx;
    }
    let action = nix::sys::signal::SigAction::new(
        nix::sys::signal::SigHandler::SigAction(on_sigsys),
        nix::sys::signal::SaFlags::SA_SIGINFO,
        nix::sys::signal::SigSet::empty(),
    );
    // SAFETY: the handler only reads its siginfo and calls write(2).
    unsafe { nix::sys::signal::sigaction(nix::sys::signal::Signal::SIGSYS, &action) }
        .map(drop)
        .map_err(|e| format!("--seccomp=trap: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn modes_parse_as_virtiofsd_names_them() {
        assert_eq!(SeccompMode::parse(None), Ok(SeccompMode::Kill));
        assert_eq!(SeccompMode::parse(Some("log")), Ok(SeccompMode::Log));
        assert!(SeccompMode::parse(Some("errno")).is_err());
    }

    #[test]
    fn setup_calls_are_not_allowed_once_serving() {
        for setup in [
            libc::SYS_mount,
            libc::SYS_pivot_root,
            libc::SYS_chroot,
            libc::SYS_socket,
            libc::SYS_bind,
            libc::SYS_connect,
            libc::SYS_execve,
            libc::SYS_ptrace,
            libc::SYS_kill,
        ] {
            assert!(!rules(true).unwrap().contains_key(&setup), "{setup}");
        }
    }

    #[test]
    fn handles_are_opened_only_where_the_server_opens_them() {
        assert!(rules(true)
            .unwrap()
            .contains_key(&libc::SYS_open_by_handle_at));
        assert!(!rules(false)
            .unwrap()
            .contains_key(&libc::SYS_open_by_handle_at));
        assert!(rules(false).unwrap().contains_key(&libc::SYS_openat2));
    }

    /// The filter is built for this machine (a bad number would fail here, not at startup).
    #[test]
    fn the_filter_compiles() {
        let arch = std::env::consts::ARCH.try_into().unwrap();
        let filter = SeccompFilter::new(
            rules(true).unwrap(),
            SeccompAction::KillProcess,
            SeccompAction::Allow,
            arch,
        )
        .unwrap();
        let _: BpfProgram = filter.try_into().unwrap();
    }

    /// Runs test `name` of this binary again in a child process with `MEMOFS_SECCOMP_TEST_CHILD`
    /// set (the filter cannot be undone): the child must be killed by `SIGSYS`, having printed
    /// `reached` and not `not reached`.
    fn killed_in_child(name: &str, reached: &str, not_reached: &str) {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", name, "--nocapture"])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGSYS),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains(reached) && !stdout.contains(not_reached),
            "{stdout}"
        );
    }

    const CHILD: &str = "MEMOFS_SECCOMP_TEST_CHILD";

    /// Under the filter the server's `ioctl` requests pass (inode flags, the terminal test)
    /// and another one, pushing input into a terminal (`TIOCSTI`), kills the process.
    #[test]
    fn only_the_servers_ioctls_pass() {
        if std::env::var_os(CHILD).is_some() {
            let file = std::fs::File::open(std::env::current_exe().unwrap()).unwrap();
            install(SeccompMode::Kill, false).unwrap();
            let mut flags: libc::c_long = 0;
            // SAFETY: ioctls with a live out-parameter on open descriptors; their answers
            // (flags, or ENOTTY where the filesystem or descriptor has none) do not matter.
            unsafe {
                libc::ioctl(file.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut flags);
                let mut t: libc::termios = std::mem::zeroed();
                libc::ioctl(2, libc::TCGETS, &mut t);
            }
            println!("flags ok");
            let c = b'x';
            // SAFETY: TIOCSTI reads one byte; the filter kills the process first.
            unsafe { libc::ioctl(file.as_raw_fd(), libc::TIOCSTI, &c) };
            println!("injected");
            return;
        }
        killed_in_child(
            "seccomp::tests::only_the_servers_ioctls_pass",
            "flags ok",
            "injected",
        );
    }

    /// Under the filter a thread starts (through `clone3`'s `ENOSYS` and `clone`), takes its
    /// own filesystem context and its name, and a process cannot be started: the
    /// process is killed. Run in a child process of the test binary, as it cannot be undone.
    #[test]
    fn threads_start_and_processes_do_not() {
        if std::env::var_os(CHILD).is_some() {
            install(SeccompMode::Kill, false).unwrap();
            let t = std::thread::Builder::new()
                .name("named".into())
                .spawn(|| {
                    // SAFETY: unshare(CLONE_FS) copies this thread's fs context only.
                    unsafe { libc::unshare(libc::CLONE_FS) }
                })
                .unwrap();
            assert_eq!(t.join().unwrap(), 0);
            // SAFETY: a raw clone3 with a null argument: refused before it is read.
            let r = unsafe { libc::syscall(libc::SYS_clone3, std::ptr::null::<u8>(), 0usize) };
            assert_eq!(
                (r, std::io::Error::last_os_error().raw_os_error()),
                (-1, Some(libc::ENOSYS))
            );
            println!("threads ok");
            // SAFETY: fork(2); the filter kills the process before a child exists.
            unsafe { libc::fork() };
            println!("forked");
            return;
        }
        killed_in_child(
            "seccomp::tests::threads_start_and_processes_do_not",
            "threads ok",
            "forked",
        );
    }
}
