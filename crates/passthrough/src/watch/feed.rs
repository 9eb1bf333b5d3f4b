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
//! SeaweedFS feed from where the last one ended).

use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use memofs_core::options::ChangeFeed;
use memofs_core::{Ino, Invalidator, ROOT_INO};
use parking_lot::RwLock;
use serde::Deserialize;

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
    let program = weed_of(&mount.mount_point)
        .ok_or("no weed program: neither the mount's own process nor PATH has one")?;
    Ok(FeedSpec {
        program,
        args: vec![
            "filer.meta.tail".into(),
            format!("-filer={filer}").into(),
            format!("-pathPrefix={prefix}").into(),
        ],
        format: Format::SeaweedFs { prefix },
    })
}

/// The `weed` program: the one serving the mount at `mount_point` (its process names the
/// mount point in `-dir=`), else one on `PATH`.
fn weed_of(mount_point: &Path) -> Option<PathBuf> {
    let dir = mount_point.as_os_str().as_bytes();
    let names_dir = |args: &[&[u8]]| {
        args.iter().enumerate().any(|(i, a)| {
            let value = a
                .strip_prefix(b"-dir=")
                .or_else(|| a.strip_prefix(b"--dir="));
            let flag = *a == b"-dir" || *a == b"--dir";
            value == Some(dir) || (flag && args.get(i + 1) == Some(&dir))
        })
    };
    let serves = |args: &[&[u8]]| args.contains(&b"mount".as_slice()) && names_dir(args);
    let from_process = std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid = e.file_name();
        pid.as_bytes()
            .iter()
            .all(u8::is_ascii_digit)
            .then_some(())?;
        let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        let exe = std::fs::read_link(e.path().join("exe")).ok()?;
        (exe.file_name() == Some(OsStr::new("weed")) && serves(&args)).then_some(exe)
    });
    from_process.or_else(|| {
        std::env::var_os("PATH")?
            .as_bytes()
            .split(|&b| b == b':')
            .map(|d| Path::new(OsStr::from_bytes(d)).join("weed"))
            .find(|p| p.is_file())
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

/// The feed thread: runs the program, again whenever it ends, until told to stop.
fn follow(spec: &FeedSpec, table: &InodeTable, stop: &OwnedFd, slot: &InvalidatorSlot) {
    // Since when changes are unaccounted for: the program's start, then each end.
    let mut since = Instant::now();
    loop {
        match spawn(spec, since.elapsed()) {
            Ok(mut child) => {
                log::info!("passthrough: following changes from {}", spec.describe());
                let stopped = read_until_end(spec, &mut child, table, stop, slot);
                since = Instant::now();
                let _ = child.kill();
                let _ = child.wait();
                if stopped {
                    return;
                }
                log::warn!(
                    "passthrough: the change feed {} ended; starting it again",
                    spec.describe()
                );
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
    let mut cmd = Command::new(&spec.program);
    cmd.args(&spec.args);
    if let Format::SeaweedFs { .. } = spec.format {
        cmd.arg(format!("-timeAgo={}ms", (unfollowed + REPLAY).as_millis()));
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
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

/// Reads the program's output until it ends (false) or the stop signal (true), delivering
/// each path now and again at each of [`AGAIN`].
fn read_until_end(
    spec: &FeedSpec,
    child: &mut Child,
    table: &InodeTable,
    stop: &OwnedFd,
    slot: &InvalidatorSlot,
) -> bool {
    let Some(mut out) = child.stdout.take() else {
        return false;
    };
    let mut parser = Parser::new(spec.format.clone());
    let mut later: [VecDeque<(Instant, Changed)>; AGAIN.len()] = Default::default();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let due = later
            .iter()
            .filter_map(|q| q.front())
            .map(|(t, _)| *t)
            .min();
        let timeout = due.map_or(-1, |t| {
            t.saturating_duration_since(Instant::now()).as_millis() as i32 + 1
        });
        let ready = match sys::notify::poll([out.as_fd(), stop.as_fd()], timeout) {
            Ok(r) => r,
            Err(e) => {
                log::error!("passthrough: change feed: poll: {e}");
                return true;
            }
        };
        if ready[1] {
            return true;
        }
        let mut paths = Vec::new();
        if ready[0] {
            match out.read(&mut buf) {
                Ok(0) | Err(_) => return false,
                Ok(n) => parser.push(&buf[..n], &mut paths),
            }
            note_names(table, &paths);
        }
        let now = Instant::now();
        let mut seen = HashSet::new();
        paths.retain(|p| seen.insert(p.clone()));
        for (q, after) in later.iter_mut().zip(AGAIN) {
            q.extend(paths.iter().map(|p| (now + after, p.clone())));
        }
        for q in &mut later {
            while q.front().is_some_and(|(t, _)| *t <= now) {
                if let Some((_, p)) = q.pop_front() {
                    if seen.insert(p.clone()) {
                        paths.push(p);
                    }
                }
            }
        }
        if paths.is_empty() {
            continue;
        }
        let mut changes = Vec::new();
        let mut dirs = HashMap::new();
        for p in &paths {
            changes_for(table, p, &mut dirs, &mut changes);
        }
        settling(table, &changes);
        deliver(table, &changes, &**slot.read());
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

/// A path a feed names (components below the export root), and whether a name changed
/// there (created, deleted, renamed, replaced) or only what it holds (attributes, data).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Changed {
    path: Vec<OsString>,
    name: bool,
    /// For a name change, whether the feed says the name is there now (created, renamed
    /// to) or gone (deleted, renamed away); `None` where it does not say.
    now: Option<bool>,
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

/// A path's components below the export root, from a path relative to it (a leading `/`
/// allowed); `None` for one that climbs (`..`).
fn components(path: &[u8]) -> Option<Vec<OsString>> {
    let mut out = Vec::new();
    for c in path.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => return None,
            c => out.push(OsString::from_vec(c.to_vec())),
        }
    }
    Some(out)
}

/// Turns a feed's output, as it arrives, into paths.
pub(crate) struct Parser {
    format: Format,
    pending: Vec<u8>,
}

/// One SeaweedFS filer event: what is read of it.
#[derive(Deserialize)]
struct FilerEvent {
    #[serde(default)]
    directory: String,
    #[serde(rename = "eventNotification")]
    notification: Option<Notification>,
}

#[derive(Deserialize)]
struct Notification {
    #[serde(rename = "oldEntry")]
    old: Option<FilerEntry>,
    #[serde(rename = "newEntry")]
    new: Option<FilerEntry>,
    #[serde(rename = "newParentPath", default)]
    new_parent: String,
}

#[derive(Deserialize)]
struct FilerEntry {
    #[serde(default)]
    name: String,
    attributes: Option<FilerAttributes>,
}

#[derive(Deserialize)]
struct FilerAttributes {
    /// The object's number, as a decimal string.
    inode: Option<String>,
}

impl FilerEntry {
    fn inode(&self) -> Option<&str> {
        self.attributes.as_ref()?.inode.as_deref()
    }
}

/// The most a feed may leave unparsed (one event or line): past it the output is dropped.
const MAX_PENDING: usize = 16 << 20;

impl Parser {
    pub(crate) fn new(format: Format) -> Parser {
        Parser {
            format,
            pending: Vec::new(),
        }
    }

    /// Takes `bytes` of output; appends the changes it completes to `out`.
    pub(crate) fn push(&mut self, bytes: &[u8], out: &mut Vec<Changed>) {
        self.pending.extend_from_slice(bytes);
        let used = match &self.format {
            Format::Lines => self.lines(out),
            Format::SeaweedFs { prefix } => seaweedfs_events(&self.pending, prefix, out),
        };
        self.pending.drain(..used);
        if self.pending.len() > MAX_PENDING {
            log::warn!(
                "passthrough: change feed: {} bytes without an end: dropped",
                self.pending.len()
            );
            self.pending.clear();
        }
    }

    fn lines(&self, out: &mut Vec<Changed>) -> usize {
        let mut used = 0;
        while let Some(end) = self.pending[used..].iter().position(|&b| b == b'\n') {
            let line = self.pending[used..used + end].trim_ascii_end();
            used += end + 1;
            let path = match line.first() {
                None => continue,
                Some(b'"') => match serde_json::from_slice::<String>(line) {
                    Ok(s) => s.into_bytes(),
                    Err(e) => {
                        log::warn!("passthrough: change feed: a bad line ({e})");
                        continue;
                    }
                },
                Some(_) => line.to_vec(),
            };
            match components(&path) {
                Some(path) => out.push(Changed {
                    path,
                    name: true,
                    now: None,
                }),
                None => log::warn!("passthrough: change feed: a path with `..` ignored"),
            }
        }
        used
    }
}

/// Reads the complete events at the start of `bytes`, appending the changes below `prefix`
/// each makes (the old and the new name; one path and no name change for an update in
/// place of the same object); returns the bytes consumed.
fn seaweedfs_events(bytes: &[u8], prefix: &str, out: &mut Vec<Changed>) -> usize {
    let mut stream = serde_json::Deserializer::from_slice(bytes).into_iter::<FilerEvent>();
    let mut used = 0;
    loop {
        match stream.next() {
            None => return bytes.len(),
            Some(Ok(event)) => {
                used = stream.byte_offset();
                let Some(n) = event.notification else {
                    continue;
                };
                let new_dir = match n.new_parent.is_empty() {
                    true => &event.directory,
                    false => &n.new_parent,
                };
                let old = n
                    .old
                    .as_ref()
                    .map(|e| (join(&event.directory, &e.name), e.inode()));
                let new = n.new.as_ref().map(|e| (join(new_dir, &e.name), e.inode()));
                let in_place = matches!((&old, &new), (Some(o), Some(n)) if o == n);
                // The old path is gone, unless the new one is the same (replaced); the new
                // one is there.
                let replaced = matches!((&old, &new), (Some(o), Some(n)) if o.0 == n.0);
                let old = old.filter(|_| !replaced).map(|o| (o, false));
                let new = new.map(|n| (n, true));
                for ((p, _), there) in [old, new].into_iter().flatten() {
                    let Some(path) = below(&p, prefix).and_then(|r| components(r.as_bytes()))
                    else {
                        continue;
                    };
                    let c = Changed {
                        path,
                        name: !in_place,
                        now: (!in_place).then_some(there),
                    };
                    if !out.contains(&c) {
                        out.push(c);
                    }
                }
            }
            Some(Err(e)) if e.is_eof() => return used,
            Some(Err(e)) => {
                // Skip to the next object that starts a line.
                log::warn!("passthrough: change feed: a bad event ({e})");
                return match bytes[used + 1..].windows(2).position(|w| w == b"\n{") {
                    Some(at) => used + 1 + at + 1,
                    None => bytes.len(),
                };
            }
        }
    }
}

/// `dir/name`; `dir` itself for an empty name (an event about the directory).
fn join(dir: &str, name: &str) -> String {
    match (name.is_empty(), dir.ends_with('/')) {
        (true, _) => dir.to_string(),
        (false, true) => format!("{dir}{name}"),
        (false, false) => format!("{dir}/{name}"),
    }
}

/// `path` relative to `prefix`, if it is `prefix` or below it.
fn below<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    if prefix == "/" {
        return Some(path);
    }
    match path.strip_prefix(prefix)? {
        "" => Some(""),
        rest => rest.strip_prefix('/'),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each change as its path, with `=` in front where no name changed.
    fn parse(format: Format, chunks: &[&[u8]]) -> Vec<String> {
        let mut p = Parser::new(format);
        let mut out = Vec::new();
        for c in chunks {
            p.push(c, &mut out);
        }
        out.iter()
            .map(|c| {
                let path = c
                    .path
                    .iter()
                    .map(|s| s.to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join("/");
                if c.name {
                    path
                } else {
                    format!("={path}")
                }
            })
            .collect()
    }

    #[test]
    fn lines_name_paths_below_the_export_across_reads() {
        let got = parse(
            Format::Lines,
            &[b"a/b\n/c\n\n\"odd\\nname\"\n../up\nd", b"/e\n"],
        );
        assert_eq!(got, ["a/b", "c", "odd\nname", "d/e"]);
    }

    /// Events as `weed filer.meta.tail` prints them (trimmed), split mid-object.
    #[test]
    fn seaweedfs_events_name_old_and_new_paths_below_the_prefix() {
        let create = br#"{"directory": "/sub", "eventNotification": {"oldEntry": null,
            "newEntry": {"name": "f", "isDirectory": false}, "newParentPath": "/sub"},
            "tsNs": "1"}"#;
        let rename = br#"
{"directory": "/sub/d", "eventNotification": {"oldEntry": {"name": "f"},
 "newEntry": {"name": "g"}, "newParentPath": "/sub/e"}}
{"directory": "/sub", "eventNotification": {"oldEntry": {"name": "gone"}, "newEntry": null}}
{"directory": "/other", "eventNotification": {"oldEntry": null, "newEntry": {"name": "x"}}}
{"directory": "/", "eventNotification": {"oldEntry": {"name": "sub", "attributes": {"inode": "7"}},
 "newEntry": {"name": "sub", "attributes": {"inode": "7"}}}}
{"directory": "/sub", "eventNotification": {"oldEntry": {"name": "r", "attributes": {"inode": "1"}},
 "newEntry": {"name": "r", "attributes": {"inode": "2"}}, "newParentPath": "/sub"}}
"#;
        let (a, b) = create.split_at(40);
        let got = parse(
            Format::SeaweedFs {
                prefix: "/sub".into(),
            },
            &[a, b, rename],
        );
        assert_eq!(got, ["f", "d/f", "e/g", "gone", "=", "r"]);
        let all = parse(
            Format::SeaweedFs { prefix: "/".into() },
            &[br#"{"directory": "/", "eventNotification": {"oldEntry": null, "newEntry": {"name": "x"}}} garbage {"#, b"\n{\"directory\": \"/y\"}"],
        );
        assert_eq!(all, ["x"]);
    }

    #[test]
    fn seaweedfs_events_say_which_names_are_gone() {
        let events = br#"
{"directory": "/d", "eventNotification": {"oldEntry": {"name": "a"}, "newEntry": {"name": "b"}}}
{"directory": "/d", "eventNotification": {"oldEntry": {"name": "c"}, "newEntry": null}}
{"directory": "/d", "eventNotification": {"oldEntry": {"name": "r", "attributes": {"inode": "1"}},
 "newEntry": {"name": "r", "attributes": {"inode": "2"}}}}
{"directory": "/d", "eventNotification": {"oldEntry": {"name": "u", "attributes": {"inode": "3"}},
 "newEntry": {"name": "u", "attributes": {"inode": "3"}}}}
"#;
        let mut out = Vec::new();
        seaweedfs_events(events, "/", &mut out);
        let got: Vec<_> = out
            .iter()
            .map(|c| (c.path.join(OsStr::new("/")), c.name, c.now))
            .collect();
        let want = [
            ("d/a", true, Some(false)),
            ("d/b", true, Some(true)),
            ("d/c", true, Some(false)),
            ("d/r", true, Some(true)),
            ("d/u", false, None),
        ];
        let want: Vec<_> = want
            .iter()
            .map(|&(p, name, now)| (OsString::from(p), name, now))
            .collect();
        assert_eq!(got, want);
    }
}
