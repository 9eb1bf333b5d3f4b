//! What a guest holds of the export, as a state stream (see [`memofs_core::migrate`]) for
//! the server its VM migrates to: every host file the guest's kernel knows, under the node
//! id it knows it by and with its lookup count, and every open file and directory handle
//! under its number. The files stay where they are: the destination exports the same tree
//! and finds each file again, by its path under the export or by its file handle
//! ([`FindBy`], virtiofsd's `--migration-mode`).
//!
//! Records, in order: [`Record::Fs`]; one [`Record::Inode`] per entry, in number order
//! (the root first); one [`Record::File`] or [`Record::Dir`] per handle; [`Record::End`].
//!
//! The source takes a path from the inode's descriptor (`/proc/self/fd`) and confirms it
//! by resolving it again from the export root: it must lead to the very host inode. A file
//! deleted while the guest holds it has no path, and the migration fails, naming it, while
//! the VM runs on at the source; by file handle it is found as long as the source holds it.
//! A file handle can name any object of its filesystem, so the destination takes what one
//! opens only where it is in the export: the export is the whole filesystem, the file was
//! deleted, or its path (sent beside the handle) leads to it.
//! A directory listing goes on at the host offset it had reached, which the same tree gives
//! the destination.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use memofs_core::migrate::{invalid, FindBy, FrameReader, FrameWriter, Migrate, OnError};
use memofs_core::{Errno, FileKind, Ino, ROOT_INO};
use serde::{Deserialize, Serialize};

use crate::fd::ProcSelf;
use crate::handles::OpenFile;
use crate::host::HostId;
use crate::inode::{Inode, OpenPin};
use crate::namespace::PATH_FLAGS;
use crate::sys;
use crate::PassthroughFs;

/// The flags of an open file that another open of it takes again.
const REOPEN_FLAGS: i32 = libc::O_ACCMODE
    | libc::O_APPEND
    | libc::O_NONBLOCK
    | libc::O_DIRECT
    | libc::O_NOATIME
    | libc::O_SYNC
    | libc::O_DSYNC;

/// One record of the stream.
#[derive(Serialize, Deserialize, Debug)]
enum Record {
    /// The counts the reader checks, and where handle numbers go on.
    Fs {
        inodes: u64,
        files: u64,
        dirs: u64,
        next_file: u64,
        next_dir: u64,
    },
    /// A host file the guest knows as `ino`; `kind` its `S_IFMT` bits.
    Inode {
        ino: Ino,
        lookups: u64,
        kind: u32,
        place: Place,
    },
    /// An open file.
    File {
        fh: u64,
        ino: Ino,
        flags: i32,
    },
    /// An open directory.
    Dir {
        fh: u64,
        ino: Ino,
    },
    /// A file or directory handle a migration before this one could not open again (see
    /// [`OnError::GuestError`]): it answers `EIO` until the guest releases it.
    LostHandle {
        fh: u64,
        dir: bool,
    },
    End,
}

/// Where a host file is found again.
#[derive(Serialize, Deserialize, Debug)]
enum Place {
    /// Its path under the export (`.` for the root), and its file handle where the host
    /// gives one (checked with `--migration-verify-handles`).
    Path {
        path: Vec<u8>,
        handle: Option<(i32, Vec<u8>)>,
    },
    /// Its file handle, and its path where it has one: a file handle can name any object of
    /// the filesystem, so where the export is not the whole filesystem, the destination
    /// takes one only for a file deleted meanwhile or one whose path leads to it.
    Handle {
        handle_type: i32,
        bytes: Vec<u8>,
        path: Option<Vec<u8>>,
    },
    /// Nowhere: a migration before this one could not find it (see [`OnError::GuestError`]).
    Lost,
}

fn put(out: &mut FrameWriter<'_>, r: &Record) -> io::Result<()> {
    out.frame(&postcard::to_allocvec(r).map_err(invalid)?)
}

fn get(input: &mut FrameReader<'_>) -> io::Result<Record> {
    let frame = input.frame()?;
    postcard::from_bytes(frame).map_err(|e| invalid(format!("frame {}: {e}", input.frames)))
}

fn lossy(path: &[u8]) -> String {
    String::from_utf8_lossy(path).into_owned()
}

impl PassthroughFs {
    /// The path `/proc/self/fd` shows for `fd`.
    fn shown_path(&self, fd: BorrowedFd<'_>) -> Result<Vec<u8>, String> {
        sys::at::readlink_at(self.proc.dir(), &ProcSelf::name(fd))
            .map_err(|e| format!("its path cannot be read ({e})"))
    }

    /// Where the destination finds `inode` again (see the module documentation).
    fn place(&self, inode: &Inode, root_shown: &[u8]) -> Result<(u32, Place), String> {
        let fd = inode
            .fd()
            .map_err(|e| format!("it cannot be opened ({e})"))?;
        let st = sys::at::statx_fd(fd.as_fd()).map_err(|e| format!("statx: {e}"))?;
        let kind = u32::from(st.stx_mode) & libc::S_IFMT;
        let handle = sys::at::file_handle(fd.as_fd()).ok();
        let path = self.path_of(inode, fd.as_fd(), &st, root_shown);
        if self.config.migration.find_by == FindBy::FileHandles {
            let (handle_type, bytes) =
                handle.ok_or("the host filesystem gives it no file handle")?;
            let path = path.ok();
            return Ok((
                kind,
                Place::Handle {
                    handle_type,
                    bytes,
                    path,
                },
            ));
        }
        Ok((
            kind,
            Place::Path {
                path: path?,
                handle,
            },
        ))
    }

    /// `inode`'s path under the export, confirmed from the root: it must lead to this very
    /// host file.
    fn path_of(
        &self,
        inode: &Inode,
        fd: BorrowedFd<'_>,
        st: &libc::statx,
        root_shown: &[u8],
    ) -> Result<Vec<u8>, String> {
        if inode.ino == ROOT_INO {
            return Ok(b".".to_vec());
        }
        let shown = self.shown_path(fd)?;
        let path = under_root(root_shown, &shown)
            .ok_or_else(|| format!("it is not under the export (at {})", lossy(&shown)))?
            .to_vec();
        let gone = || {
            format!(
                "it was deleted while the guest holds it (last at {}): a path cannot find it \
                 again, a file handle can (--migration-mode=file-handles)",
                lossy(&path)
            )
        };
        if st.stx_nlink == 0 || self.leads_to(&path).ok() != Some(inode.host) {
            return Err(gone());
        }
        Ok(path)
    }

    /// An `O_PATH` descriptor of what `path` names under the export root, resolved as a
    /// lookup is (never outside it).
    fn open_under_root(&self, path: &[u8]) -> memofs_core::Result<OwnedFd> {
        let name = CString::new(path).map_err(|_| Errno::EINVAL)?;
        let root = self.table.root().fd()?;
        sys::at::openat2(root.as_fd(), &name, PATH_FLAGS, 0, self.resolve)
    }

    /// The host file `path` leads to from the export root.
    fn leads_to(&self, path: &[u8]) -> memofs_core::Result<HostId> {
        let fd = self.open_under_root(path)?;
        Ok(HostId::of(&sys::at::statx_fd(fd.as_fd())?))
    }

    /// Opens what `place` names: an `O_PATH` descriptor, with its attributes.
    fn find(&self, place: &Place) -> Result<(OwnedFd, libc::statx), String> {
        let stat = |fd: OwnedFd| match sys::at::statx_fd(fd.as_fd()) {
            Ok(st) => Ok((fd, st)),
            Err(e) => Err(e.to_string()),
        };
        match place {
            Place::Path { path, handle } => {
                let fd = self
                    .open_under_root(path)
                    .map_err(|e| format!("{}: {e}", lossy(path)))?;
                if let (true, Some(want)) = (self.config.migration.verify_handles, handle) {
                    let got = sys::at::file_handle(fd.as_fd()).map_err(|e| e.to_string())?;
                    if got != *want {
                        return Err(format!(
                            "{} is another file here than at the source (file handles differ)",
                            lossy(path)
                        ));
                    }
                }
                stat(fd)
            }
            Place::Handle {
                handle_type,
                bytes,
                path,
            } => {
                let fd = self
                    .pins
                    .open_handle(&(*handle_type, bytes.clone()))
                    .map_err(|e| match e {
                        Errno::EOPNOTSUPP => "file handles cannot be opened here (it takes \
                                              CAP_DAC_READ_SEARCH and a private mount)"
                            .to_string(),
                        e => format!("its file handle: {e}"),
                    })?;
                let (fd, st) = stat(fd)?;
                self.handle_inside(fd.as_fd(), &st, path.as_deref())?;
                Ok((fd, st))
            }
            Place::Lost => Err("a migration before this one lost it".into()),
        }
    }

    /// Whether what a file handle opened (`fd`, attributes `st`) is in the export: anything
    /// where the export is its whole filesystem; else a file whose `path` leads to it, or a
    /// deleted file that was in the export when its last name went ([`deleted_inside`]). A
    /// handle found elsewhere on the filesystem is refused, whoever made the stream.
    fn handle_inside(
        &self,
        fd: BorrowedFd<'_>,
        st: &libc::statx,
        path: Option<&[u8]>,
    ) -> Result<(), String> {
        if self.handles_stay_inside {
            return Ok(());
        }
        if st.stx_nlink == 0 {
            let root = self.table.root().fd().map_err(|e| e.to_string())?;
            let shown = (self.shown_path(root.as_fd())?, self.shown_path(fd)?);
            // On the host's own mount, from inside a chroot into the export, the root shows
            // as `/` and a file deleted elsewhere by its whole path: no place tells them apart.
            let told_apart = self.export.private || shown.0 != b"/";
            return match told_apart && deleted_inside(&shown.0, &shown.1) {
                true => Ok(()),
                false => Err(format!(
                    "its file handle names a deleted file that was not in the shared directory \
                     (the kernel shows it at {})",
                    lossy(&shown.1)
                )),
            };
        }
        match path.map(|p| self.leads_to(p)) {
            Some(Ok(host)) if host == HostId::of(st) => Ok(()),
            _ => Err("its file handle names a file that is not in the shared directory".into()),
        }
    }

    /// Finds the node `ino` again where `place` says; one that cannot be found is kept as
    /// lost where the mount says so (`--migration-on-error=guest-error`), else fails the load.
    fn restore_inode(
        &self,
        ino: Ino,
        lookups: u64,
        kind: u32,
        place: &Place,
    ) -> Result<(), String> {
        let found = match place {
            Place::Lost => Err("a migration before this one lost it".to_string()),
            _ => self.find_kind(ino, lookups, kind, place),
        };
        match (found, self.config.migration.on_error) {
            (Ok(()), _) => Ok(()),
            (Err(e), OnError::GuestError) => {
                log::warn!("node {ino} is lost: the guest gets EIO for it ({e})");
                self.table
                    .restore_lost(ino, lookups)
                    .map_err(|e| e.to_string())
            }
            (Err(e), OnError::Abort) => Err(e),
        }
    }

    fn find_kind(&self, ino: Ino, lookups: u64, kind: u32, place: &Place) -> Result<(), String> {
        let (fd, st) = self.find(place)?;
        if u32::from(st.stx_mode) & libc::S_IFMT != kind {
            return Err(format!("it is of another kind here ({place:?})"));
        }
        let counted = self.budget.keep(fd).map_err(|e| e.to_string())?;
        self.table
            .restore(ino, counted, &st, &self.pins, lookups)
            .map_err(|e| match e {
                Errno::EEXIST => "another node here is the same host file".to_string(),
                e => e.to_string(),
            })
    }

    /// Opens again the handle `fh` (a directory's with `dir`) of node `ino` with `open`; one
    /// that cannot be opened is kept as lost where the mount says so, else fails the load.
    fn restore_handle(
        &self,
        fh: u64,
        ino: Ino,
        dir: bool,
        open: impl FnOnce() -> memofs_core::Result<()>,
    ) -> io::Result<()> {
        let what = if dir { "directory" } else { "file" };
        match (open(), self.config.migration.on_error) {
            (Ok(()), _) => Ok(()),
            (Err(e), OnError::GuestError) => {
                log::warn!("open {what} {fh} of node {ino} is lost: the guest gets EIO ({e})");
                let table = match dir {
                    true => self.dirs.insert_lost(fh),
                    false => self.files.insert_lost(fh),
                };
                table.map_err(|e| io::Error::other(format!("open {what} {fh}: {e}")))
            }
            (Err(e), OnError::Abort) => Err(io::Error::other(format!(
                "open {what} {fh} of node {ino}: {e}"
            ))),
        }
    }

    /// Opens again the file handle `fh` of node `ino`: only a regular file's, as an OPEN
    /// would (a stream naming a device node, a FIFO or a socket as an open file is refused
    /// before anything is opened).
    fn restore_file(&self, fh: u64, ino: Ino, flags: i32) -> memofs_core::Result<()> {
        let inode = self.table.get(ino)?;
        if inode.kind != FileKind::Regular {
            return Err(Errno::EINVAL);
        }
        let pin = OpenPin::new(&inode);
        let fd = self
            .proc
            .reopen(inode.fd()?.as_fd(), flags & REOPEN_FLAGS)?;
        let file = OpenFile::new(pin, Some(self.budget.keep(fd)?), flags & REOPEN_FLAGS);
        self.files.insert_at(fh, file)
    }
}

impl Migrate for PassthroughFs {
    fn save(&self, out: &mut FrameWriter<'_>) -> io::Result<()> {
        let mut inodes = self.table.all();
        inodes.sort_unstable_by_key(|i| i.ino);
        let (files, dirs) = (self.files.entries(), self.dirs.entries());
        let lost = self.table.lost();
        let lost_handles: Vec<(u64, bool)> = (self.files.lost().into_iter().map(|fh| (fh, false)))
            .chain(self.dirs.lost().into_iter().map(|fh| (fh, true)))
            .collect();
        put(
            out,
            &Record::Fs {
                inodes: (inodes.len() + lost.len()) as u64,
                files: files.len() as u64 + lost_handles.iter().filter(|h| !h.1).count() as u64,
                dirs: dirs.len() as u64 + lost_handles.iter().filter(|h| h.1).count() as u64,
                next_file: self.files.next_fh(),
                next_dir: self.dirs.next_fh(),
            },
        )?;
        let root = self.table.root().fd().map_err(io::Error::from)?;
        let root_shown = self.shown_path(root.as_fd()).map_err(io::Error::other)?;
        for inode in &inodes {
            let (kind, place) = self.place(inode, &root_shown).map_err(|e| {
                io::Error::other(format!("node {} cannot be found again: {e}", inode.ino))
            })?;
            let lookups = self.table.lookups(inode.ino);
            put(
                out,
                &Record::Inode {
                    ino: inode.ino,
                    lookups,
                    kind,
                    place,
                },
            )?;
        }
        for (fh, file) in &files {
            let flags = match file.fd.get() {
                Some(fd) => sys::io::status_flags(fd.as_fd()).map_err(io::Error::from)?,
                // A deferred open: the flags it is to be opened with.
                None => file.flags,
            };
            put(
                out,
                &Record::File {
                    fh: *fh,
                    ino: file.ino,
                    flags,
                },
            )?;
        }
        for (fh, dir) in &dirs {
            put(
                out,
                &Record::Dir {
                    fh: *fh,
                    ino: dir.ino,
                },
            )?;
        }
        for (ino, lookups) in lost {
            let place = Place::Lost;
            put(
                out,
                &Record::Inode {
                    ino,
                    lookups,
                    kind: 0,
                    place,
                },
            )?;
        }
        for (fh, dir) in lost_handles {
            put(out, &Record::LostHandle { fh, dir })?;
        }
        put(out, &Record::End)
    }

    fn load(&self, input: &mut FrameReader<'_>) -> io::Result<()> {
        let Record::Fs {
            inodes,
            files,
            dirs,
            next_file,
            next_dir,
        } = get(input)?
        else {
            return Err(invalid("it does not start with the export's counts"));
        };
        if self.table.all().len() != 1 || self.files.len() + self.dirs.len() != 0 {
            return Err(io::Error::other(
                "this server has served a guest already: a VM arrives only at a new one",
            ));
        }
        let mut got = (0, 0, 0);
        loop {
            match get(input)? {
                Record::Inode {
                    ino,
                    lookups,
                    kind,
                    place,
                } => {
                    self.restore_inode(ino, lookups, kind, &place)
                        .map_err(|e| {
                            io::Error::other(format!("node {ino} cannot be found here: {e}"))
                        })?;
                    got.0 += 1;
                }
                Record::File { fh, ino, flags } => {
                    self.restore_handle(fh, ino, false, || self.restore_file(fh, ino, flags))?;
                    got.1 += 1;
                }
                Record::Dir { fh, ino } => {
                    self.restore_handle(fh, ino, true, || {
                        self.dir_stream(ino)
                            .and_then(|dir| self.dirs.insert_at(fh, dir))
                    })?;
                    got.2 += 1;
                }
                Record::LostHandle { fh, dir } => {
                    self.restore_handle(fh, 0, dir, || Err(Errno::EIO))?;
                    match dir {
                        true => got.2 += 1,
                        false => got.1 += 1,
                    }
                }
                Record::End => break,
                Record::Fs { .. } => return Err(invalid("a second start")),
            }
        }
        if got != (inodes, files, dirs) {
            return Err(invalid(format!(
                "{got:?} inodes, files and directories, {:?} announced",
                (inodes, files, dirs)
            )));
        }
        self.files.skip_to(next_file);
        self.dirs.skip_to(next_dir);
        Ok(())
    }
}

/// Whether a deleted file, opened by its handle through the export's mount, was in the
/// export: no name leads to it, but while something holds it open the kernel keeps the
/// directory it was deleted from, and shows the descriptor at its old place (`shown`, with
/// " (deleted)") under the export root's own (`root_shown`). A file that was elsewhere on
/// the filesystem cannot be reached from the private mount's root, and is shown as `/`
/// alone. (A file whose only descriptor was opened by its handle after it lost its
/// directory, as the descriptor budget's re-opens can, shows as `/` too, and is refused.)
fn deleted_inside(root_shown: &[u8], shown: &[u8]) -> bool {
    let Some(old) = shown.strip_suffix(b" (deleted)") else {
        return false;
    };
    under_root(root_shown, old).is_some_and(|p| !p.split(|&b| b == b'/').any(|c| c == b".."))
}

/// The path of what the kernel shows at `shown` from the export root, shown at
/// `root_shown`: `None` unless it lies below it.
fn under_root<'a>(root_shown: &[u8], shown: &'a [u8]) -> Option<&'a [u8]> {
    match root_shown {
        b"/" => shown.strip_prefix(b"/"),
        r => shown.strip_prefix(r).and_then(|p| p.strip_prefix(b"/")),
    }
    .filter(|p| !p.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;

    #[test]
    fn a_deleted_file_is_inside_only_under_the_export_roots_place() {
        assert!(deleted_inside(b"/", b"/a (deleted)"));
        assert!(deleted_inside(b"/srv/x", b"/srv/x/d/a (deleted)"));
        // Unreachable from the export's mount, as the kernel shows it; elsewhere; not deleted.
        assert!(!deleted_inside(b"/", b"/ (deleted)"));
        assert!(!deleted_inside(b"/srv/x", b"/ (deleted)"));
        assert!(!deleted_inside(b"/srv/x", b"/srv/xy/a (deleted)"));
        assert!(!deleted_inside(b"/srv/x", b"/srv/x/../y (deleted)"));
        assert!(!deleted_inside(b"/", b"/a"));
    }

    /// A stream's first records: two inodes (the root by its path and one more) and `files`
    /// open files.
    fn start(files: u64) -> [Record; 2] {
        [
            Record::Fs {
                inodes: 2,
                files,
                dirs: 0,
                next_file: files + 1,
                next_dir: 1,
            },
            Record::Inode {
                ino: ROOT_INO,
                lookups: 1,
                kind: libc::S_IFDIR,
                place: Place::Path {
                    path: b".".to_vec(),
                    handle: None,
                },
            },
        ]
    }

    /// A stream whose node 7 is the file handle of `file`, deleted and held open by the test,
    /// loaded into a server of `export`.
    fn load_deleted_by_handle(export: &Path, file: &Path) -> Result<(), String> {
        let held = std::fs::File::open(file).unwrap();
        let (handle_type, bytes) = sys::at::file_handle(held.as_fd()).unwrap();
        std::fs::remove_file(file).unwrap();
        let fs = PassthroughFs::new(export, crate::PassthroughConfig::default()).unwrap();
        let [fs_record, root] = start(0);
        let stream = stream(&[
            fs_record,
            root,
            Record::Inode {
                ino: 7,
                lookups: 1,
                kind: libc::S_IFREG,
                place: Place::Handle {
                    handle_type,
                    bytes,
                    path: None,
                },
            },
            Record::End,
        ]);
        load(&fs, &stream).map_err(|e| e.to_string())
    }

    /// A deleted file has no name to check, but the kernel keeps where it was deleted from
    /// while something holds it: one deleted outside the export is refused, whoever made the
    /// stream; one deleted inside moves.
    #[test]
    fn a_deleted_file_moves_by_handle_only_from_inside_the_export() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: opening file handles takes CAP_DAC_READ_SEARCH");
            return;
        }
        let dir = std::env::temp_dir().join(format!("memofs-pt-deleted-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let export = dir.join("export");
        std::fs::create_dir_all(&export).unwrap();
        std::fs::write(dir.join("secret"), b"outside").unwrap();
        std::fs::write(export.join("held"), b"inside").unwrap();
        let e = load_deleted_by_handle(&export, &dir.join("secret")).unwrap_err();
        assert!(
            e.contains("deleted file that was not in the shared directory"),
            "{e}"
        );
        load_deleted_by_handle(&export, &export.join("held")).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A stream written record by record, as a damaged or hostile one could be.
    fn stream(records: &[Record]) -> Vec<u8> {
        let mut bytes = Vec::new();
        let mut w = FrameWriter::start(&mut bytes).unwrap();
        for r in records {
            put(&mut w, r).unwrap();
        }
        bytes
    }

    fn load(fs: &PassthroughFs, bytes: &[u8]) -> io::Result<()> {
        let mut input = bytes;
        let mut r = FrameReader::start(&mut input)?;
        fs.load(&mut r)
    }

    /// A stream that names a FIFO (or a device node) as a file the guest has open is refused
    /// before anything is opened: opening a FIFO to read would wait for a writer forever, and
    /// a device node would be opened with the server's privilege.
    #[test]
    fn an_open_file_that_is_no_regular_file_is_refused() {
        let dir = std::env::temp_dir().join(format!("memofs-pt-fifo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let fifo = std::ffi::CString::new(dir.join("p").as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let fs = PassthroughFs::new(&dir, crate::PassthroughConfig::default()).unwrap();
        let [fs_record, root] = start(1);
        let bytes = stream(&[
            fs_record,
            root,
            Record::Inode {
                ino: 7,
                lookups: 1,
                kind: libc::S_IFIFO,
                place: Place::Path {
                    path: b"p".to_vec(),
                    handle: None,
                },
            },
            Record::File {
                fh: 1,
                ino: 7,
                flags: libc::O_RDONLY,
            },
            Record::End,
        ]);
        let (done, wait) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(load(&fs, &bytes).map_err(|e| e.to_string()));
        });
        let got = wait
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the load returned, without waiting on the FIFO");
        let e = got.unwrap_err();
        assert!(e.contains("open file 1 of node 7"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
