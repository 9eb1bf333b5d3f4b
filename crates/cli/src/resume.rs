//! `memofs resume`: the new executable's side of `memofs upgrade` (see [`crate::upgrade`]).
//! It runs in the process of the server it replaces, which handed it, across the exec, a
//! state memfd naming every other descriptor it needs.
//!
//! Until it serves, anything that goes wrong sends it back to the old executable with the
//! same state (`--fallback`): the descriptors it was handed stay open and untouched (it
//! works on duplicates), so the old executable finds them as it left them.

use std::io::{self, BufReader, Seek, Write};
use std::os::fd::{BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::process::ExitCode;
use std::sync::Arc;

use memofs_control::{ErrorDoc, UpgradedDoc};
use memofs_core::migrate::FrameReader;
use memofs_core::options::parse_options;
use memofs_core::plan::BackendKind;
use memofs_core::{Backend, Timestamp};
use memofs_fuse::{KernelMount, Session};
use memofs_mem::kernel_data::BackingStore;

use crate::cli::{MountArgs, ResumeArgs};
use crate::upgrade::{execute, monotonic_ns, Resume, State, FORMAT};
use crate::{daemon, fail, mount, EXIT_FAILURE, EXIT_USAGE};

/// `memofs resume`.
pub fn main(args: &ResumeArgs) -> ExitCode {
    if let Some(format) = args.check {
        return match format == FORMAT {
            true => {
                println!("{}", crate::upgrade::accepts(format));
                ExitCode::SUCCESS
            }
            false => fail(
                EXIT_FAILURE,
                format!("this memofs reads handover states of format {FORMAT}, not {format}"),
            ),
        };
    }
    let Some(fd) = args.state_fd else {
        return fail(EXIT_USAGE, "--state-fd is needed");
    };
    daemon::block_stop_signals();
    let (state, file) = match read_state(fd) {
        Ok(s) => s,
        Err(e) => return unreadable(args, fd, e),
    };
    let taking = Taking {
        state,
        state_fd: fd,
        state_file: file,
        fallback: args.fallback.clone(),
    };
    taking.take_over()
}

/// The state in descriptor `fd` cannot be read: back to the old executable (`--old-exe`),
/// which wrote it, unless this is it already.
fn unreadable(args: &ResumeArgs, fd: RawFd, e: io::Error) -> ExitCode {
    let why = format!("no handover state this memofs reads in descriptor {fd} ({e})");
    if let (None, Some(old)) = (&args.fallback, args.old_exe) {
        if borrow(old, libc::S_IFREG)
            .and(borrow(fd, libc::S_IFREG))
            .is_ok()
        {
            let err = back_to_old(fd, old, &why, args.mountpoint.as_deref());
            return fail(EXIT_FAILURE, format!("{why}; the old executable: {err}"));
        }
    }
    fail(
        EXIT_USAGE,
        format!("{why}; `memofs resume` is run by `memofs upgrade`"),
    )
}

/// Executes the old executable (inherited descriptor `old`) again with the state in `state`,
/// saying `why`; returns only on failure.
fn back_to_old(
    state: RawFd,
    old: RawFd,
    why: &str,
    mountpoint: Option<&std::path::Path>,
) -> io::Error {
    if let Err(e) = borrow(old, libc::S_IFREG).and(borrow(state, libc::S_IFREG)) {
        return e;
    }
    // SAFETY: both are open (just checked) and stay so across the exec.
    let (state, old) = unsafe { (BorrowedFd::borrow_raw(state), BorrowedFd::borrow_raw(old)) };
    let back = Resume {
        state,
        old_exe: None,
        fallback: Some(why),
        mountpoint,
    };
    execute(old, &back)
}

/// The state memfd `fd` (a duplicate: `fd` stays open as it came), its header read.
fn read_state(fd: RawFd) -> io::Result<(State, std::fs::File)> {
    let file = std::fs::File::from(borrow(fd, libc::S_IFREG)?);
    let mut input = BufReader::new(&file);
    (&file).rewind()?;
    let mut frames = FrameReader::start(&mut input)?;
    let state: State = serde_json::from_slice(frames.frame()?).map_err(io::Error::other)?;
    if state.format != FORMAT {
        return Err(io::Error::other(format!("format {}", state.format)));
    }
    Ok((state, file))
}

/// The inherited descriptor `fd`, checked to be open and of type `kind` (`S_IFMT` bits).
fn claim(fd: RawFd, kind: libc::mode_t) -> io::Result<OwnedFd> {
    if fd < 3 {
        return Err(io::Error::other(format!("descriptor {fd}")));
    }
    // SAFETY: a plain C struct, all zeroes a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat fills the struct passed; it fails on a closed descriptor.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if st.st_mode & libc::S_IFMT != kind {
        return Err(io::Error::other(format!(
            "descriptor {fd} is not what it should be"
        )));
    }
    // SAFETY: open (fstat succeeded), handed to this process for this use alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A duplicate (close-on-exec) of the inherited descriptor `fd` of type `kind`, leaving
/// `fd` itself as it is for a fallback.
fn borrow(fd: RawFd, kind: libc::mode_t) -> io::Result<OwnedFd> {
    let owned = claim(fd, kind)?;
    let dup = owned.try_clone();
    // Stays open, as it came.
    let _ = owned.into_raw_fd();
    dup
}

/// A handover being taken.
pub(crate) struct Taking {
    state: State,
    /// The state's descriptor as handed over (kept open for a fallback).
    state_fd: RawFd,
    /// A duplicate to read it through.
    state_file: std::fs::File,
    fallback: Option<String>,
}

impl Taking {
    fn take_over(self) -> ExitCode {
        crate::logging::to_stderr("warn");
        let args = MountArgs {
            options: self.state.options.clone(),
            paths: self.state.paths.clone(),
            foreground: true,
            ..MountArgs::default()
        };
        let opts = match parse_options(&args.options, mount::ram_bytes()) {
            Ok(o) => o,
            Err(e) => return self.fall_back(format!("the mount's options: {e}")),
        };
        crate::logging::to_stderr(mount::log_level(&opts));
        let (source, mountpoint) = args.source_and_mountpoint();
        if source.is_some() {
            return self.fall_back("an export cannot change servers live".into());
        }
        let mountpoint = match mountpoint.canonicalize() {
            Ok(m) => m,
            Err(e) => return self.fall_back(format!("the mount point: {e}")),
        };
        let mut plan = mount::plan_for(&args, &opts, BackendKind::Mem, None);
        let store = match self.adopt_store() {
            Ok(s) => s,
            Err(e) => return self.fall_back(format!("the private tmpfs: {e}")),
        };
        let (fs, settings) = match crate::backends::mem(&opts, &mut plan, Some(store)) {
            Ok(b) => b,
            Err(e) => return self.fall_back(e),
        };
        if let Err(e) = self.load(&fs) {
            // What was loaded stays as it is: a handed-over data file is unlinked when its
            // inode goes, and the old executable takes them all again.
            std::mem::forget(fs);
            return self.fall_back(format!("the filesystem's state: {e}"));
        }
        let at = (mountpoint.as_path(), &args);
        mount::serve(
            fs,
            settings,
            Box::new(Vec::new),
            plan,
            at,
            mount::Start::Resume(Box::new(self)),
        )
    }

    /// The private tmpfs the old server handed over, if it had one.
    fn adopt_store(&self) -> io::Result<Option<BackingStore>> {
        let Some((fd, next, until)) = self.state.store else {
            return Ok(None);
        };
        let root = borrow(fd, libc::S_IFDIR)?;
        BackingStore::adopt(root, next, Timestamp(until as i128)).map(Some)
    }

    /// Loads the backend's state stream, which follows the header.
    fn load(&self, fs: &memofs_mem::MemFs) -> io::Result<()> {
        let file = &self.state_file;
        (&*file).rewind()?;
        let mut input = BufReader::with_capacity(1 << 20, file);
        let mut frames = FrameReader::start(&mut input)?;
        frames.frame()?;
        fs.load_handover(&mut frames)?;
        frames.finish()
    }

    /// Takes the connection over for `backend`, serving `plan`.
    pub(crate) fn connect<B: Backend>(
        &self,
        backend: Arc<B>,
        mountpoint: &std::path::Path,
        plan: memofs_core::plan::MountPlan,
    ) -> Result<KernelMount<B>, String> {
        let fd = borrow(self.state.session_fd, libc::S_IFCHR)
            .map_err(|e| format!("the connection: {e}"))?;
        let session = Session {
            fd,
            init: self.state.init.clone(),
            reply: self.state.reply.clone(),
        };
        let mounted =
            memofs_fuse::resume(backend, mountpoint, plan, session).map_err(|e| e.to_string())?;
        mounted.server().restore_exec_opens(&self.state.exec_opens);
        mounted.server().restore_backings(&self.state.backings);
        if self.state.opendir_declined.unwrap_or(true) {
            mounted.server().note_opendir_declined();
        }
        Ok(mounted)
    }

    /// Back to the old executable with the same state, or, if this is it already, the end
    /// (the mount then answers `ENOTCONN`; `memofs umount` cleans up).
    pub(crate) fn fall_back(self, why: String) -> ExitCode {
        log::error!("cannot take the mount over: {why}");
        if let Some(first) = &self.fallback {
            let msg = format!(
                "the new executable could not take over ({first}), nor could the old one again ({why})"
            );
            self.answer(&ErrorDoc { error: msg.clone() });
            return fail(EXIT_FAILURE, msg);
        }
        let mountpoint = self.state.paths.last().map(std::path::PathBuf::as_path);
        let err = back_to_old(self.state_fd, self.state.old_exe_fd, &why, mountpoint);
        let msg = format!("the new executable could not take over ({why}), and the old one cannot be executed again ({err})");
        self.answer(&ErrorDoc { error: msg.clone() });
        fail(EXIT_FAILURE, msg)
    }

    /// Serving: tells the client, and closes what the old server handed over.
    pub(crate) fn report(self) {
        let pause_ms = monotonic_ns().saturating_sub(self.state.paused_at_ns) as f64 / 1e6;
        let state_bytes = self.state_file.metadata().map_or(0, |m| m.len());
        match &self.fallback {
            None => self.answer(&UpgradedDoc {
                pid: std::process::id(),
                version: env!("CARGO_PKG_VERSION").into(),
                pause_ms,
                state_bytes,
            }),
            Some(why) => self.answer(&ErrorDoc {
                error: format!(
                    "the new executable could not take over ({why}); the old one serves on"
                ),
            }),
        }
        let s = &self.state;
        let store = s.store.map(|(fd, ..)| fd);
        let handed = [s.session_fd, s.old_exe_fd, s.new_exe_fd, self.state_fd];
        for fd in handed.into_iter().chain(store) {
            // SAFETY: handed over for this process; the duplicates serve from now on.
            unsafe { libc::close(fd) };
        }
    }

    /// Writes `doc` to the client and closes its connection.
    fn answer<T: serde::Serialize>(&self, doc: &T) {
        if let Ok(conn) = claim(self.state.reply_fd, libc::S_IFSOCK) {
            let mut conn = std::fs::File::from(conn);
            let _ = conn.write_all(serde_json::to_string(doc).unwrap_or_default().as_bytes());
        }
    }
}
