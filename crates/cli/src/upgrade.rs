//! `memofs upgrade MOUNTPOINT [--bin PATH]`: a new executable takes a live mount over from
//! its server, in the same process, keeping every file, open file, lookup and lock.
//!
//! The client sends the new executable (a descriptor) over the mount's control socket. The
//! server then
//! 1. runs it with `resume --check FORMAT`: an executable that cannot read this server's
//!    state is refused before anything changes hands, and the server serves on;
//! 2. stops its request threads between requests (`memofs_fuse::dev::Pause`): every
//!    request a thread has read is answered on the queue it came from, and what the kernel
//!    queues meanwhile waits for the next reader;
//! 3. writes its state into a memfd ([`State`], then the backend's state stream: the mem
//!    backend names each kernel-backed file by its data file, which stays where it is, and
//!    carries the data the server itself holds);
//! 4. executes the new executable in its own process (`execve` of `/proc/self/fd/N`), handing it across the
//!    exec the `/dev/fuse` connection, the private tmpfs of file data, the state, the
//!    client's connection and the old executable. The process id stays: `systemd`,
//!    mount(8)'s bookkeeping and `memofs umount` still find their server.
//!
//! The new executable (`memofs resume`, [`crate::resume`]) rebuilds the filesystem, checks
//! that it answers the mount's INIT as the kernel was answered, takes on the backing ids and
//! exec opens, serves, and answers the client. If it cannot, it executes the old executable
//! again with the same state (`--fallback`), which serves on and tells the client why.
//!
//! Not handed over, and why that is safe: request counters (they start again), the
//! relatime refresh schedule (kept caches of the kernel are dropped at the next change, or
//! a day later than the rule says at worst), the control socket (bound again).
//! Refused: a passthrough export (its host files are not handed over yet), io_uring
//! queues (the rings' entries belong to the process that registered them).

use std::ffi::CString;
use std::io::{self, BufWriter, Seek, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use memofs_control::{ErrorDoc, UpgradedDoc};
use memofs_core::migrate::FrameWriter;
use memofs_core::{Backend, Timestamp};
use memofs_fuse::dev::Pause;
use memofs_fuse::Session;
use memofs_mem::MemFs;
use memofs_passthrough::PassthroughFs;
use memofs_request::{BackingState, Server};
use serde::{Deserialize, Serialize};

use crate::cli::UpgradeArgs;
use crate::remount::Live;
use crate::{fail, EXIT_FAILURE, EXIT_USAGE};

/// The handover state's format: `memofs resume --check` says whether it reads it.
pub const FORMAT: u32 = 2;

/// How long the request threads may take to stop between requests.
const PAUSE_LIMIT: Duration = Duration::from_secs(5);

/// How long the notifications queued may take to go out once the requests have stopped,
/// and how many times the pause is tried (see [`Handover::quiesce`]).
const SETTLE_LIMIT: Duration = Duration::from_millis(100);
const QUIESCE_TRIES: usize = 20;

/// How long `resume --check` may take.
const CHECK_LIMIT: Duration = Duration::from_secs(10);

/// What the old server hands over besides the backend's state stream, which follows it in
/// the memfd. Descriptors are numbers valid in the process after the exec.
#[derive(Serialize, Deserialize, Debug)]
pub(crate) struct State {
    pub format: u32,
    /// The old server's version.
    pub version: String,
    /// The mount's options: those it was mounted with, then each remount's.
    pub options: Vec<String>,
    /// `memofs mount`'s paths ([SOURCE] MOUNTPOINT).
    pub paths: Vec<PathBuf>,
    /// The kernel's INIT arguments, and the reply they got.
    pub init: Vec<u8>,
    pub reply: Vec<u8>,
    /// The kernel's opens to execute a file not yet released (inode, handle, count).
    pub exec_opens: Vec<(u64, u64, u32)>,
    pub backings: BackingState,
    /// The private tmpfs of file data: its root, the next data file's number, and up to
    /// when data-file ctimes stand for a load (nanoseconds).
    pub store: Option<(RawFd, u64, i64)>,
    pub session_fd: RawFd,
    /// The client's connection, for the answer.
    pub reply_fd: RawFd,
    /// The old executable, to go back to.
    pub old_exe_fd: RawFd,
    /// The new executable (open for a script's interpreter; closed once serving).
    pub new_exe_fd: RawFd,
    /// `CLOCK_MONOTONIC` when the requests were stopped, in nanoseconds.
    pub paused_at_ns: u64,
    /// An OPENDIR was declined: the kernel keeps every listing for the connection's life.
    /// A server that did not say may have (the new one then assumes it did).
    #[serde(default)]
    pub opendir_declined: Option<bool>,
}

/// `CLOCK_MONOTONIC` in nanoseconds (the same clock before and after an exec).
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: fills the timespec passed.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `memofs upgrade`: the client.
pub fn main(args: &UpgradeArgs) -> ExitCode {
    let bin = match &args.bin {
        Some(b) => b.clone(),
        None => match std::env::current_exe() {
            Ok(b) => b,
            Err(e) => return fail(EXIT_FAILURE, format!("cannot find this executable: {e}")),
        },
    };
    let exe = match std::fs::File::open(&bin) {
        Ok(f)
            if f.metadata()
                .is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0) =>
        {
            f
        }
        Ok(_) => {
            return fail(
                EXIT_USAGE,
                format!("{} is not an executable", bin.display()),
            )
        }
        Err(e) => return fail(EXIT_USAGE, format!("{}: {e}", bin.display())),
    };
    let target = &args.mountpoint;
    let shown = target.display();
    let dev = match std::fs::metadata(target) {
        Ok(m) => m.dev(),
        Err(e) => return fail(EXIT_FAILURE, format!("cannot stat {shown}: {e}")),
    };
    let answer = match memofs_control::upgrade(dev, target, exe.as_fd()) {
        Ok(a) => a,
        Err(e) => {
            return fail(
                EXIT_FAILURE,
                format!("{shown} is not a live memofs mount whose server you may reach ({e})"),
            )
        }
    };
    if let Ok(ErrorDoc { error }) = serde_json::from_str(&answer) {
        return fail(EXIT_FAILURE, format!("upgrade {shown}: {error}"));
    }
    match serde_json::from_str::<UpgradedDoc>(&answer) {
        Ok(done) => {
            println!(
                "memofs: {shown} is served by {} (memofs {}, pid {}); requests waited {:.1} ms for the handover of {} bytes of state",
                bin.display(),
                done.version,
                done.pid,
                done.pause_ms,
                done.state_bytes
            );
            ExitCode::SUCCESS
        }
        Err(_) if answer.is_empty() => fail(
            EXIT_FAILURE,
            format!("upgrade {shown}: the server ended without an answer (see its log)"),
        ),
        Err(e) => fail(
            EXIT_FAILURE,
            format!("upgrade {shown}: an answer not understood ({e}): {answer}"),
        ),
    }
}

/// A backend whose state a new server process can take over.
pub(crate) trait HandOver: Backend {
    /// What the new process needs of the private tmpfs of file data: (root, next data file
    /// number, loaded until); `None` where there is none.
    fn store(&self) -> Result<Option<(OwnedFd, u64, Timestamp)>, String>;
    /// Writes the state stream (every request stopped).
    fn save(&self, out: &mut FrameWriter<'_>) -> io::Result<()>;
    /// Bytes of file data the state copies (data the server holds itself).
    fn copied(&self) -> u64;
}

impl HandOver for MemFs {
    fn store(&self) -> Result<Option<(OwnedFd, u64, Timestamp)>, String> {
        self.store_handover()
            .transpose()
            .map_err(|e| format!("the private tmpfs of file data: {e}"))
    }

    fn save(&self, out: &mut FrameWriter<'_>) -> io::Result<()> {
        self.save_handover(out)
    }

    fn copied(&self) -> u64 {
        match self.kernel_data() {
            true => 0,
            false => self.usage().bytes_used,
        }
    }
}

impl HandOver for PassthroughFs {
    fn store(&self) -> Result<Option<(OwnedFd, u64, Timestamp)>, String> {
        Err("an export (passthrough backend) cannot change servers live: its host files are not handed over; unmount and mount it again with the new executable (its files are on the host)".into())
    }

    fn save(&self, _: &mut FrameWriter<'_>) -> io::Result<()> {
        Err(io::Error::other("an export is not handed over"))
    }

    fn copied(&self) -> u64 {
        0
    }
}

/// `MemAvailable` of `/proc/meminfo`, in bytes.
fn mem_available() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Whether the machine has room for a second copy of `bytes` of file data (the state holds
/// one while the new server loads another): with an eighth and 64 MiB to spare.
fn room_for(bytes: u64) -> Result<(), String> {
    let need = bytes + bytes / 8 + (64 << 20);
    match mem_available() {
        Some(avail) if bytes > 0 && avail < need => Err(format!(
            "the handover copies the {} MiB of file data this server holds, and the machine has {} MiB available (it needs {} MiB): free memory first",
            bytes >> 20,
            avail >> 20,
            need >> 20
        )),
        _ => Ok(()),
    }
}

/// The old server's side: what it hands over, set up when the mount is.
pub(crate) struct Handover<B: Backend> {
    pub backend: Arc<B>,
    pub server: Arc<Server<B>>,
    pub live: Arc<Live<B>>,
    /// `None` where requests come through io_uring rings.
    pub session: Option<Session>,
    pub paths: Vec<PathBuf>,
    /// Set once the request threads run.
    pub pause: OnceLock<Arc<Pause>>,
}

/// A descriptor the exec keeps open (a duplicate without close-on-exec).
fn inheritable(fd: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD on an open descriptor; the new one is owned by nothing else.
    let new = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD, 3) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just made, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

impl<B: HandOver> Handover<B> {
    /// Hands the mount to `exe`, asked on `conn`: returns only if it did not, with why
    /// (the server serves on).
    pub fn run(&self, conn: &UnixStream, exe: OwnedFd) -> String {
        let Some(session) = &self.session else {
            return "the mount's requests come through io_uring rings, which cannot change hands: mount with io_uring=off to upgrade live".into();
        };
        // Refused before anything stops (an export says why).
        if let Err(e) = self
            .backend
            .store()
            .and_then(|_| room_for(self.backend.copied()))
        {
            return e;
        }
        // An executable script is run by its interpreter, which opens it by the
        // descriptor's name (`/proc/self/fd/N`): the descriptor must outlive the exec.
        // SAFETY: F_SETFD on an open descriptor.
        unsafe { libc::fcntl(exe.as_raw_fd(), libc::F_SETFD, 0) };
        if let Err(e) = check(&exe) {
            return e;
        }
        let Some(pause) = self.pause.get() else {
            return "the mount is not serving yet".into();
        };
        let paused_at_ns = monotonic_ns();
        if let Err(e) = self.quiesce(pause) {
            return e;
        }
        // Taken with every request stopped: no data file is made after it.
        let handed = self
            .backend
            .store()
            .and_then(|store| self.exec(conn, &exe, session, store, paused_at_ns));
        let why = match handed {
            Err(e) => e,
            Ok(never) => match never {},
        };
        pause.resume();
        why
    }

    /// Stops the request threads with every notification queued before sent: a notification
    /// the kernel holds back for a request still queued would hold up the exec (the kernel
    /// waits for every other thread to end) with nobody left to answer that request. While
    /// one waits, the request threads serve on for a moment and the pause is tried again.
    fn quiesce(&self, pause: &Pause) -> Result<(), String> {
        for _ in 0..QUIESCE_TRIES {
            if let Err(e) = pause.stop(PAUSE_LIMIT) {
                return Err(format!(
                    "the requests in progress did not end ({e}); try again"
                ));
            }
            match self.server.invalidator() {
                Some(inv) if !inv.settled(SETTLE_LIMIT) => {
                    // The requests it waits for are served; then it goes out.
                    pause.resume();
                    inv.settled(SETTLE_LIMIT * 10);
                }
                _ => return Ok(()),
            }
        }
        Err("notifications to the kernel kept waiting for requests; try again".into())
    }

    /// Writes the state and executes `exe`; returns only on failure.
    fn exec(
        &self,
        conn: &UnixStream,
        exe: &OwnedFd,
        session: &Session,
        store: Option<(OwnedFd, u64, Timestamp)>,
        paused_at_ns: u64,
    ) -> Result<std::convert::Infallible, String> {
        let keep = |what: &str, fd: BorrowedFd<'_>| {
            inheritable(fd).map_err(|e| format!("cannot hand over {what}: {e}"))
        };
        let session_fd = keep("the connection", session.fd.as_fd())?;
        let reply_fd = keep("the client's connection", conn.as_fd())?;
        let old_exe = std::fs::File::open("/proc/self/exe")
            .map_err(|e| format!("cannot open this executable: {e}"))?;
        let old_exe_fd = keep("this executable", old_exe.as_fd())?;
        let store_fd = match &store {
            Some((root, ..)) => Some(keep("the private tmpfs", root.as_fd())?),
            None => None,
        };
        let state = State {
            format: FORMAT,
            version: env!("CARGO_PKG_VERSION").into(),
            options: self.live.options(),
            paths: self.paths.clone(),
            init: session.init.clone(),
            reply: session.reply.clone(),
            exec_opens: self.server.exec_opens(),
            backings: self.server.backings(),
            store: store
                .as_ref()
                .zip(store_fd.as_ref())
                .map(|((_, next, until), fd)| {
                    (
                        fd.as_raw_fd(),
                        *next,
                        until.0.clamp(0, i64::MAX as i128) as i64,
                    )
                }),
            session_fd: session_fd.as_raw_fd(),
            reply_fd: reply_fd.as_raw_fd(),
            old_exe_fd: old_exe_fd.as_raw_fd(),
            new_exe_fd: exe.as_raw_fd(),
            paused_at_ns,
            opendir_declined: Some(self.server.opendir_declined()),
        };
        let memfd = self
            .write_state(&state)
            .map_err(|e| format!("cannot write the state: {e}"))?;
        let how = Resume {
            state: memfd.as_fd(),
            old_exe: Some(old_exe_fd.as_raw_fd()),
            fallback: None,
            mountpoint: self.paths.last().map(PathBuf::as_path),
        };
        let err = execute(exe.as_fd(), &how);
        Err(format!("cannot execute the new executable: {err}"))
    }

    /// The state (header frame, then the backend's stream) in a new memfd, read from its
    /// start, kept open across the exec.
    fn write_state(&self, state: &State) -> io::Result<OwnedFd> {
        // SAFETY: a NUL-terminated name; the result is checked.
        let fd = unsafe { libc::memfd_create(c"memofs-state".as_ptr(), 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: just made, owned by nothing else.
        let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        {
            let mut out = BufWriter::with_capacity(1 << 20, &mut file);
            let mut frames = FrameWriter::start(&mut out)?;
            frames.frame(&serde_json::to_vec(state).map_err(io::Error::other)?)?;
            self.backend.save(&mut frames)?;
            out.flush()?;
        }
        file.rewind()?;
        Ok(file.into())
    }
}

/// What `resume --check FORMAT` prints when it reads states of `format` (an exit status
/// alone would take any program that exits 0 for a memofs).
pub(crate) fn accepts(format: u32) -> String {
    format!("memofs reads handover format {format}")
}

/// Runs `exe resume --check FORMAT`: whether it reads this server's state.
fn check(exe: &OwnedFd) -> Result<(), String> {
    let path = format!("/proc/self/fd/{}", exe.as_raw_fd());
    let mut child = std::process::Command::new(&path)
        .args(["resume", "--check", &FORMAT.to_string()])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run the new executable: {e}"))?;
    let deadline = Instant::now() + CHECK_LIMIT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err("the new executable did not answer `resume --check`".into());
            }
        }
    };
    let (mut out, mut said) = (String::new(), String::new());
    if let Some(mut o) = child.stdout.take() {
        let _ = io::Read::read_to_string(&mut o, &mut out);
    }
    if status.success() && out.trim() == accepts(FORMAT) {
        return Ok(());
    }
    if let Some(mut err) = child.stderr.take() {
        let _ = io::Read::read_to_string(&mut err, &mut said);
    }
    let said = said.trim();
    Err(match said.contains(&format!("format {FORMAT}")) {
        // A memofs of another handover format says which it reads.
        true => format!("the new executable cannot take this mount over: {said}"),
        false => format!(
            "the new executable is not a memofs that can take a mount over (`resume --check {FORMAT}`: {status}{}{said})",
            if said.is_empty() { "" } else { ", " }
        ),
    })
}

/// How a `memofs resume` is run: `memofs resume --state-fd STATE [--old-exe FD] [--fallback
/// WHY] [-- MOUNTPOINT]`.
pub(crate) struct Resume<'a> {
    /// The state (kept open across the exec).
    pub state: BorrowedFd<'a>,
    /// The executable to go back to if the state cannot be read (the new one's run).
    pub old_exe: Option<RawFd>,
    /// Why the old executable runs again (its run after a failed takeover).
    pub fallback: Option<&'a str>,
    /// The mount point, for the process list.
    pub mountpoint: Option<&'a std::path::Path>,
}

/// Executes `exe` as `how` says; returns only on failure.
pub(crate) fn execute(exe: BorrowedFd<'_>, how: &Resume<'_>) -> io::Error {
    let mut args = vec![
        "memofs".to_string(),
        "resume".into(),
        "--state-fd".into(),
        how.state.as_raw_fd().to_string(),
    ];
    if let Some(fd) = how.old_exe {
        args.extend(["--old-exe".into(), fd.to_string()]);
    }
    if let Some(why) = how.fallback {
        args.extend(["--fallback".into(), why.replace('\0', " ")]);
    }
    let mut args: Vec<CString> = args
        .into_iter()
        .map(|a| CString::new(a).expect("no NUL"))
        .collect();
    if let Some(m) = how
        .mountpoint
        .and_then(|m| CString::new(m.as_os_str().as_bytes()).ok())
    {
        args.extend([CString::from(c"--"), m]);
    }
    let env: Vec<CString> = std::env::vars_os()
        .filter_map(|(k, v)| {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            CString::new(kv).ok()
        })
        .collect();
    let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = env.iter().map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());
    // By its name in /proc rather than `execveat(AT_EMPTY_PATH)`: a script's interpreter is
    // given that name to open, and /proc is there wherever memofs runs (`/dev/fd` may not be).
    let path = CString::new(format!("/proc/self/fd/{}", exe.as_raw_fd())).expect("no NUL");
    // SAFETY: `path`, argv and envp are NUL-terminated strings (the arrays NULL-terminated)
    // alive for the call; execve returns only on failure.
    unsafe { libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
    io::Error::last_os_error()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_the_machine_has_no_room_to_copy_is_refused_first() {
        assert!(room_for(0).is_ok(), "nothing copied needs no room");
        assert!(room_for(1 << 20).is_ok(), "a MiB fits");
        let e = room_for(1 << 60).unwrap_err();
        assert!(e.contains("free memory first"), "{e}");
    }

    #[test]
    fn only_what_prints_the_format_line_is_a_memofs_that_takes_over() {
        let exe = OwnedFd::from(std::fs::File::open("/bin/true").unwrap());
        let e = check(&exe).unwrap_err();
        assert!(e.contains("not a memofs"), "{e}");
    }
}
