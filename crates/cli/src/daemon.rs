//! Running in the background: the parent re-executes itself in the foreground mode with a
//! readiness pipe and returns only when the child says the mount is live (or exits with the
//! child's status if it fails). Signals are taken synchronously by one thread.

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Command, ExitCode, Stdio};

use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};
use nix::sys::signal::{SigSet, Signal};

use crate::{fail, EXIT_FAILURE};

/// Environment variable carrying the readiness pipe's write end to the child, as
/// `FD:DEV:INO`: its descriptor number and the pipe's identity, so that the child takes
/// only the pipe its parent made, never a descriptor a stray or inherited variable names.
pub const READY_ENV: &str = "MEMOFS_READY_FD";

/// The identity of the pipe behind `fd`: device and inode, if it is a pipe.
fn pipe_identity(fd: i32) -> Option<(u64, u64)> {
    let st = fstat_raw(fd)?;
    (st.st_mode & libc::S_IFMT == libc::S_IFIFO).then_some((st.st_dev, st.st_ino))
}

/// `fstat` of a descriptor number this process may not own (any number is safe to ask
/// about; a closed one only fails).
pub fn fstat_raw(fd: i32) -> Option<libc::stat> {
    // SAFETY: the descriptor is borrowed for the one fstat call only; fstat reads nothing
    // through it but its metadata, and a number that is not open only makes it fail.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    nix::sys::stat::fstat(fd).ok()
}

/// The readiness pipe a background parent handed this process.
pub struct ReadyPipe(OwnedFd);

impl ReadyPipe {
    /// The pipe [`READY_ENV`] names, if it is there and is the pipe it says; the variable
    /// is removed either way, so nothing this process starts inherits it.
    pub fn from_env() -> Option<ReadyPipe> {
        let value = std::env::var(READY_ENV).ok()?;
        std::env::remove_var(READY_ENV);
        let pipe = ReadyPipe::claim(&value);
        if pipe.is_none() {
            log::warn!("ignoring {READY_ENV}={value}: not the readiness pipe it names");
        }
        pipe
    }

    /// Takes ownership of the descriptor `value` (`FD:DEV:INO`) names if it is that pipe.
    fn claim(value: &str) -> Option<ReadyPipe> {
        let mut parts = value.split(':').map(str::parse::<u64>);
        let (Some(Ok(fd)), Some(Ok(dev)), Some(Ok(ino)), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        let fd = i32::try_from(fd).ok().filter(|fd| *fd > 2)?;
        if pipe_identity(fd)? != (dev, ino) {
            return None;
        }
        // SAFETY: `fd` is open and is the pipe our parent made and handed over for this
        // process alone (its identity was checked above); nothing else here owns it.
        let pipe = unsafe { OwnedFd::from_raw_fd(fd) };
        // Nothing this process starts (fusermount3) may hold the parent's wait open.
        let _ = fcntl(&pipe, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC));
        Some(ReadyPipe(pipe))
    }

    /// Tells the waiting parent the mount is live and detaches from its terminal output.
    pub fn report(self) {
        let mut f = std::fs::File::from(self.0);
        let _ = std::io::Write::write_all(&mut f, b"1");
        drop(f);
        if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
            // SAFETY: both descriptors are open; dup2 onto 1 and 2 replaces stdout and stderr.
            unsafe {
                libc::dup2(null.as_raw_fd(), 1);
                libc::dup2(null.as_raw_fd(), 2);
            }
        }
    }
}

/// Starts `memofs ARGS...` (a foreground mount) detached and waits until it reports the mount live.
pub fn spawn_background(args: &[std::ffi::OsString]) -> ExitCode {
    let (read_end, write_end) = match nix::unistd::pipe2(OFlag::O_CLOEXEC) {
        Ok(ends) => ends,
        Err(e) => return fail(EXIT_FAILURE, format!("pipe: {e}")),
    };
    // The child must inherit the write end: clear its close-on-exec flag.
    let _ = fcntl(&write_end, FcntlArg::F_SETFD(FdFlag::empty()));
    let fds = [read_end.as_raw_fd(), write_end.as_raw_fd()];
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return fail(EXIT_FAILURE, format!("cannot find own executable: {e}")),
    };
    let Some((dev, ino)) = pipe_identity(fds[1]) else {
        return fail(EXIT_FAILURE, "pipe: cannot read its identity");
    };
    let identity = format!("{}:{dev}:{ino}", fds[1]);
    let child = Command::new(exe)
        .args(args)
        .env(READY_ENV, identity)
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

/// Leaves the parent's session so terminal signals (Ctrl-C, hangup) do not reach us.
pub fn detach_session() {
    // Failure (already a session leader) is fine.
    let _ = nix::unistd::setsid();
}

/// The signals that stop the server.
pub fn stop_signals() -> SigSet {
    let mut set = SigSet::empty();
    for s in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ] {
        set.add(s);
    }
    set
}

/// Blocks the stop signals in this thread and every thread it starts later; call first.
pub fn block_stop_signals() {
    let _ = stop_signals().thread_block();
}

/// Waits on a new thread for a stop signal, then runs `on_signal`.
pub fn on_stop_signal(on_signal: impl FnOnce(i32) + Send + 'static) {
    std::thread::Builder::new()
        .name("memofs-signals".into())
        .spawn(move || {
            let set = stop_signals();
            let sig = loop {
                if let Ok(sig) = set.wait() {
                    break sig;
                }
            };
            on_signal(sig as i32);
        })
        .expect("spawn signal thread");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn only_the_pipe_the_variable_names_is_taken() {
        let file = std::fs::File::open("/proc/self/exe").unwrap();
        let fd = file.as_raw_fd();
        let m = file.metadata().unwrap();
        // A descriptor that is not a pipe is never taken, whatever the identity says.
        assert!(ReadyPipe::claim(&format!("{fd}:{}:{}", m.dev(), m.ino())).is_none());
        assert!(ReadyPipe::claim(&fd.to_string()).is_none(), "a bare number");
        // SAFETY: F_GETFD only reads the descriptor's flags.
        assert!(unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0, "still open");
        let mut fds = [0i32; 2];
        // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: pipe2 succeeded; each end is owned once, here.
        let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let (dev, ino) = pipe_identity(w.as_raw_fd()).unwrap();
        let other = format!("{}:{dev}:{}", w.as_raw_fd(), ino + 1);
        assert!(
            ReadyPipe::claim(&other).is_none(),
            "another pipe's identity"
        );
        let value = format!("{}:{dev}:{ino}", w.as_raw_fd());
        let pipe = ReadyPipe::claim(&value).expect("its own pipe");
        std::mem::forget(w); // now owned by `pipe`
        drop(pipe);
        let mut buf = [0u8; 1];
        let n = std::fs::File::from(r).read(&mut buf).unwrap();
        assert_eq!(n, 0, "the write end was closed once, by its owner");
    }
}
