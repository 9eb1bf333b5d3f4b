//! Conversions between memofs-core types and fuser's.

use std::time::SystemTime;

use fuser::{FileAttr, FileType, INodeNo};
use memofs_core::{Attr, Errno, FileKind, TimeSet, Timestamp};

/// fuser's file type for a kind.
pub fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::Regular => FileType::RegularFile,
        FileKind::Directory => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
        FileKind::CharDevice => FileType::CharDevice,
        FileKind::BlockDevice => FileType::BlockDevice,
    }
}

/// fuser's attributes for ours.
pub fn file_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.blocks,
        atime: a.atime.to_system_time(),
        mtime: a.mtime.to_system_time(),
        ctime: a.ctime.to_system_time(),
        crtime: a.crtime.to_system_time(),
        kind: file_type(a.kind),
        perm: a.perm,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: a.blksize,
        flags: 0,
    }
}

/// The attributes of a negative entry: nodeid 0, everything else ignored by the kernel.
pub fn negative_attr() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: SystemTime::UNIX_EPOCH,
        mtime: SystemTime::UNIX_EPOCH,
        ctime: SystemTime::UNIX_EPOCH,
        crtime: SystemTime::UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 0,
        flags: 0,
    }
}

/// fuser's errno for ours.
pub fn errno(e: Errno) -> fuser::Errno {
    fuser::Errno::from_i32(e.0)
}

/// Our time-to-set for fuser's.
pub fn time_set(t: fuser::TimeOrNow) -> TimeSet {
    match t {
        fuser::TimeOrNow::Now => TimeSet::Now,
        fuser::TimeOrNow::SpecificTime(t) => TimeSet::At(Timestamp::from_system_time(t)),
    }
}
