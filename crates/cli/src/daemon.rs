//! Running in the background: the parent re-executes itself in the foreground mode with a
//! readiness pipe and returns only when the child says the mount is live (or exits with the
//! child's status if it fails). Signals are taken synchronously by one thread.

use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, ExitCode, Stdio};

use crate::{fail, EXIT_FAILURE};

/// Environment variable carrying the readiness pipe's write end to the child.
pub const READY_ENV: &str = "MEMOFS_READY_FD";

/// Starts `memofs ARGS...` (a foreground mount) detached and waits until it reports the mount live.
pub fn spawn_background(args: &[std::ffi::OsString]) -> ExitCode {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return fail(
            EXIT_FAILURE,
            format!("pipe: {}", std::io::Error::last_os_error()),
        );
    }
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // The child must inherit the write end: clear its close-on-exec flag.
    // SAFETY: `fds[1]` is open (owned by `write_end`, alive here).
    unsafe { libc::fcntl(fds[1], libc::F_SETFD, 0) };
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return fail(EXIT_FAILURE, format!("cannot find own executable: {e}")),
    };
    let child = Command::new(exe)
        .args(args)
        .env(READY_ENV, fds[1].to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .spawn();
    drop(write_end);
    let mut child = match child {
        Ok(c) => c,
        Err(e) => return fail(EXIT_FAILURE, format!("cannot start the server: {e}")),
    };
    let mut byte = [0u8; 1];
    let mut reader = std::fs::File::from(read_end);
    if matches!(reader.read(&mut byte), Ok(1)) {
        return ExitCode::SUCCESS;
    }
    match child.wait() {
        Ok(status) => ExitCode::from(
            status
                .code()
                .map_or(EXIT_FAILURE, |c| c.clamp(1, 255) as u8),
        ),
        Err(e) => fail(EXIT_FAILURE, format!("server failed: {e}")),
    }
}

/// Tells the waiting parent the mount is live and detaches from its terminal output.
pub fn report_ready(fd: i32) {
    // SAFETY: `fd` came from our parent through READY_ENV and is used only here, once.
    let pipe = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut f = std::fs::File::from(pipe);
    let _ = std::io::Write::write_all(&mut f, b"1");
    drop(f);
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        use std::os::fd::AsRawFd;
        // SAFETY: both descriptors are open; dup2 onto 1 and 2 replaces stdout and stderr.
        unsafe {
            libc::dup2(null.as_raw_fd(), 1);
            libc::dup2(null.as_raw_fd(), 2);
        }
    }
}

/// Leaves the parent's session so terminal signals (Ctrl-C, hangup) do not reach us.
pub fn detach_session() {
    // SAFETY: setsid has no memory-safety preconditions; failure (already a leader) is fine.
    unsafe { libc::setsid() };
}

/// The signals that stop the server.
fn stop_signals() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise and fill a local sigset_t.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Blocks the stop signals in this thread and every thread it starts later; call first.
pub fn block_stop_signals() {
    let set = stop_signals();
    // SAFETY: `set` is initialised; a null old-set pointer is allowed.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
}

/// Waits on a new thread for a stop signal, then runs `on_signal`.
pub fn on_stop_signal(on_signal: impl FnOnce(i32) + Send + 'static) {
    std::thread::Builder::new()
        .name("memofs-signals".into())
        .spawn(move || {
            let set = stop_signals();
            let mut sig = 0;
            // SAFETY: `set` is initialised and `sig` is a valid out-pointer.
            while unsafe { libc::sigwait(&set, &mut sig) } != 0 {}
            on_signal(sig);
        })
        .expect("spawn signal thread");
}
