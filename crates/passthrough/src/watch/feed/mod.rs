//! Changes made where no watcher on this host sees them: a feed of changed paths.
//!
//! A source on a distributed filesystem is changed by other machines, whose changes reach
//! this host's kernel as no event at all. Their own engine knows them: SeaweedFS's filer
//! publishes every metadata change (`weed filer.meta.tail` prints them, as the engine's own
//! mount follows them to keep its caches coherent). A feed runs such a program and reads
//! the paths it names; for each, the kernel's cached name in the parent directory (negative
//! or positive), the attributes and data of what the name now holds, and the parent's own
//! attributes are invalidated, as the watcher does for a local change ([`super::deliver`]).
//! Where the feed says that only what a name holds changed (SeaweedFS's update in place of
//! the same object: new data, new times, a directory whose entries changed), only that is
//! invalidated: dropping a directory's own entry would drop every name cached below it. A
//! path whose parent directory the kernel does not hold is dropped: nothing under it can be
//! cached.
//!
//! The source's own client may learn of a change after the feed does, and may keep an old
//! answer for its own timeouts (SeaweedFS's mount keeps a name deleted on another machine
//! for up to 1 s). A lookup the kernel makes in between would get the old answer from it
//! and cache it again, so every path is invalidated again at each of [`AGAIN`]: a change
//! shows through memofs as soon as the source's own client shows it, or a little after
//! (for SeaweedFS within about 1.1 s of the change), while names and attributes are
//! otherwise kept for the mount's long timeouts.
//!
//! Formats: [`Format::SeaweedFs`], the filer's events as `weed filer.meta.tail` prints
//! them (JSON objects, the old and the new entry of each change), started a little in the
//! past ([`REPLAY`]) so that nothing is missed while it subscribes; [`Format::Lines`], a
//! path per line relative to the exported directory, a line starting with `"` read as a
//! JSON string (for names with a newline), from the program's start. If the program ends,
//! every cached name and inode is invalidated and it is started again a second later (a
//! SeaweedFS feed from where the last one ended). A SeaweedFS program that stops printing
//! without ending (a subscription lost on the way) cannot be told from a quiet filer, so it
//! is replaced every [`RENEW`] by one that replays the filer's log from the old one's
//! start, skipping what was read already ([`parse`]): what a stalled program missed shows
//! within that, and a working one costs a restart and no invalidation.
//!
//! Only a `weed` that no other user can replace is run ([`program::trusted`]); a program's
//! standard error goes to the server's log.

mod parse;
mod program;

use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::OsString;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use memofs_core::options::ChangeFeed;
use memofs_core::{Ino, Invalidator, ROOT_INO};
use parking_lot::RwLock;

pub(crate) use self::parse::{Changed, Parser};
use super::{child_ino, deliver, Change, InvalidatorSlot};
use crate::inode::InodeTable;
use crate::sys;

/// When each path is invalidated again, after the first time: after a lookup that raced
/// the first, after the source's own client has caught up (SeaweedFS's mount keeps a name
/// deleted elsewhere, or old attributes, for its 1 s timeouts), and once more for a loaded
/// machine.
pub(crate) const AGAIN: [Duration; 3] = [
    Duration::from_millis(300),
    Duration::from_millis(1150),
    Duration::from_millis(2500),
];
/// How long a program that ended waits before it is started again.
const RESTART: Duration = Duration::from_secs(1);
/// How often a SeaweedFS feed's program is replaced (see the module's notes): the longest
/// a program that stalled without ending leaves changes unseen.
const RENEW: Duration = Duration::from_secs(60);

/// How a feed's output names changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    /// A path per line, relative to the exported directory.
    Lines,
    /// SeaweedFS filer events, for paths below the filer path `prefix` (the export).
    SeaweedFs { prefix: String },
}

/// The program a feed runs, and how to read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FeedSpec {
    program: PathBuf,
    args: Vec<OsString>,
    format: Format,
    /// How often the program is replaced by one that replays from the old one's start.
    renew: Option<Duration>,
}

impl FeedSpec {
    /// The command line, for `memofs stats`.
    pub(crate) fn describe(&self) -> String {
        let mut s = self.program.display().to_string();
        for a in &self.args {
            s.push(' ');
            s.push_str(&a.to_string_lossy());
        }
        s
    }

    /// What `asked` gives for the source at `path`, whose mount `mnt_id` is: a feed, none
    /// (`Off`, or `Auto` on a source memofs has no stream for), or why the one asked for
    /// cannot run.
    pub(crate) fn choose(
        asked: &ChangeFeed,
        path: &Path,
        mnt_id: Option<u64>,
    ) -> Result<Option<FeedSpec>, String> {
        match asked {
            ChangeFeed::Off => Ok(None),
            ChangeFeed::Exec(program) => Ok(Some(FeedSpec {
                program: program.clone(),
                args: Vec::new(),
                format: Format::Lines,
                renew: None,
            })),
            ChangeFeed::Auto => Ok(seaweedfs(path, mnt_id).ok()),
            ChangeFeed::SeaweedFs => seaweedfs(path, mnt_id).map(Some),
        }
    }
}

/// The SeaweedFS feed for the export at `path` on mount `mnt_id`, or why there is none.
fn seaweedfs(path: &Path, mnt_id: Option<u64>) -> Result<FeedSpec, String> {
    let mounts = memofs_core::mountinfo::mounts().map_err(|e| format!("mountinfo: {e}"))?;
    let mount = mnt_id
        .and_then(|id| mounts.iter().find(|m| m.id == id))
        .ok_or_else(|| format!("{}: its mount is not in mountinfo", path.display()))?;
    if mount.fstype != "fuse.seaweedfs" {
        return Err(format!(
            "{} is on {}, not a SeaweedFS mount",
            path.display(),
            mount.fstype
        ));
    }
    // `weed mount` names its source FILER_HOST:PORT:FILER_PATH.
    let (filer, filer_path) = mount
        .source
        .split_once(":/")
        .map(|(f, p)| (f.to_string(), format!("/{p}")))
        .ok_or_else(|| format!("SeaweedFS mount source {:?} names no filer", mount.source))?;
    let below = path
        .canonicalize()
        .ok()
        .and_then(|p| {
            p.strip_prefix(&mount.mount_point)
                .ok()
                .map(Path::to_path_buf)
        })
        .ok_or_else(|| {
            format!(
                "{} is not below {}",
                path.display(),
                mount.mount_point.display()
            )
        })?;
    let root = mount.root.strip_prefix("/").unwrap_or(&mount.root);
    let prefix = Path::new(&filer_path).join(root).join(below);
    let prefix = prefix.to_string_lossy().trim_end_matches('/').to_string();
    let prefix = if prefix.is_empty() {
        "/".into()
    } else {
        prefix
    };
    let program = program::weed_of(&mount.mount_point)?;
    Ok(FeedSpec {
        program,
        args: vec![
            // Its log to standard error (which reaches memofs's log) only: weed would
            // otherwise leave log files in the temporary directory at every start.
            "-logtostderr".into(),
            "filer.meta.tail".into(),
            format!("-filer={filer}").into(),
            format!("-pathPrefix={prefix}").into(),
        ],
        format: Format::SeaweedFs { prefix },
        renew: Some(RENEW),
    })
}

/// A running feed; dropping it ends the program and the thread.
pub(crate) struct Feed {
    stop: OwnedFd,
    thread: Option<JoinHandle<()>>,
    invalidator: InvalidatorSlot,
}

impl Feed {
    /// Starts `spec`'s program and the thread that reads it; `None` (logged) if no thread
    /// can start.
    pub(crate) fn start(
        spec: FeedSpec,
        table: &Arc<InodeTable>,
        invalidator: Arc<dyn Invalidator>,
    ) -> Option<Feed> {
        let stop = match sys::notify::eventfd().and_then(|fd| Ok((fd.try_clone()?, fd))) {
            Ok(pair) => pair,
            Err(e) => {
                log::warn!("passthrough: no change feed (eventfd: {e})");
                return None;
            }
        };
        table.settling.follow();
        let slot: InvalidatorSlot = Arc::new(RwLock::new(invalidator));
        let (table, thread_slot, stop_rx) = (table.clone(), slot.clone(), stop.0);
        let thread = std::thread::Builder::new()
            .name("memofs-feed".into())
            .spawn(move || follow(&spec, &table, &stop_rx, &thread_slot));
        match thread {
            Ok(t) => Some(Feed {
                stop: stop.1,
                thread: Some(t),
                invalidator: slot,
            }),
            Err(e) => {
                log::warn!("passthrough: no change feed (thread: {e})");
                None
            }
        }
    }

    /// Reports to `invalidator` from now on.
    pub(crate) fn set_invalidator(&self, invalidator: Arc<dyn Invalidator>) {
        *self.invalidator.write() = invalidator;
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        if let Err(e) = sys::notify::eventfd_signal(self.stop.as_fd()) {
            log::error!("passthrough: cannot stop the change feed: {e}");
            return;
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// How a program's run ended.
enum End {
    /// The server stops following.
    Stopped,
    /// The program ended, or its output did.
    Ended,
    /// Its time to be replaced came.
    Renew,
}

/// What is read from the programs a feed runs, one after another: their parser, and the
/// paths due to be invalidated again at each of [`AGAIN`].
struct Reader {
    parser: Parser,
    later: [VecDeque<(Instant, Changed)>; AGAIN.len()],
}

/// The feed thread: runs the program, again whenever it ends or is due to be replaced,
/// until told to stop.
fn follow(spec: &FeedSpec, table: &InodeTable, stop: &OwnedFd, slot: &InvalidatorSlot) {
    // Since when changes are unaccounted for: the program's start, then each end (or, for
    // a replacement, the start of the program it replaces).
    let mut since = Instant::now();
    let mut reader = Reader {
        parser: Parser::new(spec.format.clone()),
        later: Default::default(),
    };
    let mut renewed = false;
    loop {
        let started = Instant::now();
        match spawn(spec, since.elapsed()) {
            Ok(mut child) => {
                match renewed {
                    true => log::debug!("passthrough: change feed renewed: {}", spec.describe()),
                    false => log::info!("passthrough: following changes from {}", spec.describe()),
                }
                program::log_stderr(&mut child, spec.describe());
                reader.parser.restart(renewed);
                let renew_at = spec.renew.map(|every| started + every);
                let end = read_until_end(&mut reader, &mut child, table, stop, slot, renew_at);
                let _ = child.kill();
                let _ = child.wait();
                match end {
                    End::Stopped => return,
                    End::Renew => {
                        // The next program replays from this one's start.
                        (since, renewed) = (started, true);
                        continue;
                    }
                    End::Ended => {
                        (since, renewed) = (Instant::now(), false);
                        log::warn!(
                            "passthrough: the change feed {} ended; starting it again",
                            spec.describe()
                        );
                    }
                }
            }
            Err(e) => log::warn!(
                "passthrough: cannot start the change feed {}: {e}",
                spec.describe()
            ),
        }
        // What changed while nothing was followed is unknown.
        deliver(table, &[Change::Everything], &**slot.read());
        if let Ok([true]) = sys::notify::poll([stop.as_fd()], RESTART.as_millis() as i32) {
            return;
        }
    }
}

/// How far back a SeaweedFS feed starts, besides the time nothing was followed: the time
/// its subscription takes to reach the filer, whose changes would otherwise be missed.
const REPLAY: Duration = Duration::from_secs(2);

/// Starts the program; a SeaweedFS feed from `unfollowed` (and [`REPLAY`]) ago.
fn spawn(spec: &FeedSpec, unfollowed: Duration) -> std::io::Result<Child> {
    if let Format::SeaweedFs { .. } = spec.format {
        // Found by memofs, not named by the mount: checked again at each start.
        program::trusted(&spec.program).map_err(std::io::Error::other)?;
    }
    let mut cmd = Command::new(&spec.program);
    cmd.args(&spec.args);
    if let Format::SeaweedFs { .. } = spec.format {
        cmd.arg(format!("-timeAgo={}ms", (unfollowed + REPLAY).as_millis()));
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so that a terminal's ^C reaches the server, which ends it.
        .process_group(0);
    // SAFETY: the closure runs in the child between fork and exec and makes one
    // async-signal-safe system call: the child is killed if the server dies.
    unsafe {
        cmd.pre_exec(|| {
            match libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
    cmd.spawn()
}

/// Reads the program's output until it ends, the stop signal or `renew_at`, delivering
/// each path now and again at each of [`AGAIN`].
fn read_until_end(
    reader: &mut Reader,
    child: &mut Child,
    table: &InodeTable,
    stop: &OwnedFd,
    slot: &InvalidatorSlot,
    renew_at: Option<Instant>,
) -> End {
    let Some(mut out) = child.stdout.take() else {
        return End::Ended;
    };
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let due = reader
            .later
            .iter()
            .filter_map(|q| q.front())
            .map(|(t, _)| *t)
            .chain(renew_at)
            .min();
        let timeout = due.map_or(-1, |t| {
            t.saturating_duration_since(Instant::now()).as_millis() as i32 + 1
        });
        let ready = match sys::notify::poll([out.as_fd(), stop.as_fd()], timeout) {
            Ok(r) => r,
            Err(e) => {
                log::error!("passthrough: change feed: poll: {e}");
                return End::Stopped;
            }
        };
        if ready[1] {
            return End::Stopped;
        }
        let mut paths = Vec::new();
        if ready[0] {
            match out.read(&mut buf) {
                Ok(0) | Err(_) => return End::Ended,
                Ok(n) => reader.parser.push(&buf[..n], &mut paths),
            }
            note_names(table, &paths);
        }
        let now = Instant::now();
        let mut seen = HashSet::new();
        paths.retain(|p| seen.insert(p.clone()));
        for (q, after) in reader.later.iter_mut().zip(AGAIN) {
            q.extend(paths.iter().map(|p| (now + after, p.clone())));
        }
        for q in &mut reader.later {
            while q.front().is_some_and(|(t, _)| *t <= now) {
                if let Some((_, p)) = q.pop_front() {
                    if seen.insert(p.clone()) {
                        paths.push(p);
                    }
                }
            }
        }
        if !paths.is_empty() {
            let mut changes = Vec::new();
            let mut dirs = HashMap::new();
            for p in &paths {
                changes_for(table, p, &mut dirs, &mut changes);
            }
            settling(table, &changes);
            deliver(table, &changes, &**slot.read());
        }
        if renew_at.is_some_and(|at| at <= now) {
            return End::Renew;
        }
    }
}

/// Marks what `changes` are about as changed a moment ago (see [`crate::settling`]): a
/// directory whose names changed, an inode whose attributes or data did.
fn settling(table: &InodeTable, changes: &[Change]) {
    for c in changes {
        match c {
            Change::Entry(dir, _) => table.settling.mark(*dir),
            Change::Inode(ino) => table.settling.mark(*ino),
            Change::Child(dir, name) => {
                if let Some(ino) = child_ino(table, *dir, name) {
                    table.settling.mark(ino);
                }
            }
            _ => {}
        }
    }
}

/// What to invalidate for `changed`: for a name change, the name in its parent (the
/// kernel's entry, present or missing), what the name holds now and the parent itself; for
/// a change of what it holds, that only (a directory's own entry, with every name cached
/// below it, stays). Nothing when the kernel does not hold the parent. `dirs` keeps the
/// directories found for one batch (many paths share them; each step asks the source).
pub(crate) fn changes_for(
    table: &InodeTable,
    changed: &Changed,
    dirs: &mut HashMap<Vec<OsString>, Option<Ino>>,
    out: &mut Vec<Change>,
) {
    if changed.path.is_empty() {
        out.push(Change::Inode(ROOT_INO));
        return;
    }
    let Some((dir, name)) = parent_of(table, changed, dirs) else {
        return;
    };
    out.push(Change::Child(dir, name.clone()));
    if changed.name {
        out.push(Change::Entry(dir, name.clone()));
        out.push(Change::Inode(dir));
    }
}

/// The directory the kernel holds that `changed`'s name is in, and the name; `None` for
/// the root itself or where the kernel holds no such directory. `dirs` as for
/// [`changes_for`].
fn parent_of<'c>(
    table: &InodeTable,
    changed: &'c Changed,
    dirs: &mut HashMap<Vec<OsString>, Option<Ino>>,
) -> Option<(Ino, &'c OsString)> {
    let (name, parents) = changed.path.split_last()?;
    let mut dir = ROOT_INO;
    for (i, d) in parents.iter().enumerate() {
        dir = (*dirs
            .entry(parents[..=i].to_vec())
            .or_insert_with(|| child_ino(table, dir, d)))?;
    }
    Some((dir, name))
}

/// Notes what new feed output says of names (see [`crate::settling`]): a name deleted or
/// renamed away is gone for lookups and listings while the source's client may still
/// show it; one created or renamed to is not. Only for output just read: the repeats at
/// [`AGAIN`] would undo a later change of the same name.
fn note_names(table: &InodeTable, changed: &[Changed]) {
    let mut dirs = HashMap::new();
    for c in changed {
        let (Some(now), true) = (c.now, c.name) else {
            continue;
        };
        if let Some((dir, name)) = parent_of(table, c, &mut dirs) {
            match now {
                true => table.settling.present(dir, name.as_bytes()),
                false => table.settling.gone(dir, name.as_bytes()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memofs_core::Invalidator;
    use parking_lot::Mutex;
    use std::ffi::OsStr;

    /// The names invalidated, in order, and how often everything was.
    #[derive(Default)]
    struct Seen {
        names: Mutex<Vec<OsString>>,
        everything: Mutex<usize>,
    }

    impl Invalidator for Seen {
        fn entry(&self, _parent: Ino, name: &OsStr) {
            self.names.lock().push(name.to_owned());
        }
        fn deleted(&self, _parent: Ino, _child: Ino, _name: &OsStr) {}
        fn inode(&self, _ino: Ino) {}
        fn everything(&self) {
            *self.everything.lock() += 1;
        }
    }

    fn until(what: &str, cond: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !cond() {
            assert!(Instant::now() < deadline, "never: {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Each run of the program prints the filer's log so far (what a replay prints), with
    /// one event more than the last run did, and then stalls: it is replaced all the same,
    /// and only the event the last run had not printed is invalidated, each as often as the
    /// first time (at once and at each of [`AGAIN`]), with nothing dropped wholesale.
    #[test]
    fn a_stalled_seaweedfs_program_is_replaced_and_replays_only_what_it_missed() {
        let dir = std::env::temp_dir().join(format!("memofs-feed-renew-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("src")).unwrap();
        let fs = crate::PassthroughFs::new(&dir.join("src"), Default::default()).unwrap();
        let runs = dir.join("runs");
        let script = format!(
            r#"echo >>'{runs}'; n=$(wc -l <'{runs}'); i=1
while [ $i -le $n ]; do
  printf '{{"directory": "/x", "eventNotification": {{"oldEntry": null, "newEntry": {{"name": "f%d"}}}}, "tsNs": "%d"}}\n' $i $i
  i=$((i + 1))
done
exec sleep 1000"#,
            runs = runs.display()
        );
        let spec = FeedSpec {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script.into()],
            format: Format::SeaweedFs {
                prefix: "/x".into(),
            },
            renew: Some(Duration::from_millis(200)),
        };
        let seen = Arc::new(Seen::default());
        let feed = Feed::start(spec, &fs.table, seen.clone()).unwrap();
        let count = |name: &str| seen.names.lock().iter().filter(|n| *n == name).count();
        let runs_so_far = || std::fs::read(&runs).map_or(0, |r| r.len());
        until("four runs", || runs_so_far() >= 4);
        until("f3 invalidated again at each of AGAIN", || count("f3") == 4);
        let after = runs_so_far();
        until("two runs more", || runs_so_far() >= after + 2);
        drop(feed);
        for name in ["f1", "f2", "f3"] {
            assert_eq!(
                count(name),
                1 + AGAIN.len(),
                "{name}: {:?}",
                seen.names.lock()
            );
        }
        assert_eq!(
            *seen.everything.lock(),
            0,
            "a renewal drops nothing wholesale"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
