//! The FUSE kernel ABI: the structures and constants of `include/uapi/linux/fuse.h` that
//! memofs uses, written once from the header's facts (protocol 7.45), each with a size
//! assertion. No released crate carries this protocol level (io_uring, passthrough backing
//! ids, statx, tmpfile, the entry epoch); `zerocopy` checks that reading them from and
//! writing them to byte buffers is sound (a zeroed value is `FromZeros::new_zeroed()`).
#![allow(non_camel_case_types, missing_docs)]

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// The protocol version memofs speaks (the kernel and the server use the smaller minor).
pub const KERNEL_VERSION: u32 = 7;
pub const KERNEL_MINOR_VERSION: u32 = 45;

/// Opcodes.
pub mod opcode {
    pub const LOOKUP: u32 = 1;
    pub const FORGET: u32 = 2;
    pub const GETATTR: u32 = 3;
    pub const SETATTR: u32 = 4;
    pub const READLINK: u32 = 5;
    pub const SYMLINK: u32 = 6;
    pub const MKNOD: u32 = 8;
    pub const MKDIR: u32 = 9;
    pub const UNLINK: u32 = 10;
    pub const RMDIR: u32 = 11;
    pub const RENAME: u32 = 12;
    pub const LINK: u32 = 13;
    pub const OPEN: u32 = 14;
    pub const READ: u32 = 15;
    pub const WRITE: u32 = 16;
    pub const STATFS: u32 = 17;
    pub const RELEASE: u32 = 18;
    pub const FSYNC: u32 = 20;
    pub const SETXATTR: u32 = 21;
    pub const GETXATTR: u32 = 22;
    pub const LISTXATTR: u32 = 23;
    pub const REMOVEXATTR: u32 = 24;
    pub const FLUSH: u32 = 25;
    pub const INIT: u32 = 26;
    pub const OPENDIR: u32 = 27;
    pub const READDIR: u32 = 28;
    pub const RELEASEDIR: u32 = 29;
    pub const FSYNCDIR: u32 = 30;
    pub const ACCESS: u32 = 34;
    pub const CREATE: u32 = 35;
    pub const INTERRUPT: u32 = 36;
    pub const DESTROY: u32 = 38;
    pub const IOCTL: u32 = 39;
    pub const BATCH_FORGET: u32 = 42;
    pub const FALLOCATE: u32 = 43;
    pub const READDIRPLUS: u32 = 44;
    pub const RENAME2: u32 = 45;
    pub const LSEEK: u32 = 46;
    pub const COPY_FILE_RANGE: u32 = 47;
    pub const SYNCFS: u32 = 50;
    pub const TMPFILE: u32 = 51;
    pub const STATX: u32 = 52;
}

/// Notification codes (the `error` field of an unsolicited `fuse_out_header`).
pub mod notify {
    pub const INVAL_INODE: i32 = 2;
    pub const INVAL_ENTRY: i32 = 3;
    pub const DELETE: i32 = 6;
    pub const INC_EPOCH: i32 = 8;
    /// `fuse_notify_inval_entry_out.flags`: mark the entry for a fresh LOOKUP at its next
    /// use instead of unhashing it (Linux 6.2+, offered as `init::HAS_EXPIRE_ONLY`).
    pub const EXPIRE_ONLY: u32 = 1 << 0;
}

/// INIT flags (64 bits: the high half travels in `flags2`).
pub mod init {
    pub const ASYNC_READ: u64 = 1 << 0;
    pub const ATOMIC_O_TRUNC: u64 = 1 << 3;
    pub const EXPORT_SUPPORT: u64 = 1 << 4;
    pub const BIG_WRITES: u64 = 1 << 5;
    pub const DONT_MASK: u64 = 1 << 6;
    pub const AUTO_INVAL_DATA: u64 = 1 << 12;
    pub const DO_READDIRPLUS: u64 = 1 << 13;
    pub const READDIRPLUS_AUTO: u64 = 1 << 14;
    pub const ASYNC_DIO: u64 = 1 << 15;
    pub const WRITEBACK_CACHE: u64 = 1 << 16;
    pub const PARALLEL_DIROPS: u64 = 1 << 18;
    pub const POSIX_ACL: u64 = 1 << 20;
    pub const ABORT_ERROR: u64 = 1 << 21;
    pub const MAX_PAGES: u64 = 1 << 22;
    pub const CACHE_SYMLINKS: u64 = 1 << 23;
    pub const SUBMOUNTS: u64 = 1 << 27;
    pub const HANDLE_KILLPRIV_V2: u64 = 1 << 28;
    pub const SETXATTR_EXT: u64 = 1 << 29;
    pub const INIT_EXT: u64 = 1 << 30;
    pub const SECURITY_CTX: u64 = 1 << 32;
    pub const HAS_EXPIRE_ONLY: u64 = 1 << 35;
    pub const DIRECT_IO_ALLOW_MMAP: u64 = 1 << 36;
    pub const PASSTHROUGH: u64 = 1 << 37;
    pub const NO_EXPORT_SUPPORT: u64 = 1 << 38;
    pub const OVER_IO_URING: u64 = 1 << 41;
}

/// `fuse_setattr_in.valid` bits.
pub mod fattr {
    pub const MODE: u32 = 1 << 0;
    pub const UID: u32 = 1 << 1;
    pub const GID: u32 = 1 << 2;
    pub const SIZE: u32 = 1 << 3;
    pub const ATIME: u32 = 1 << 4;
    pub const MTIME: u32 = 1 << 5;
    pub const FH: u32 = 1 << 6;
    pub const ATIME_NOW: u32 = 1 << 7;
    pub const MTIME_NOW: u32 = 1 << 8;
    pub const CTIME: u32 = 1 << 10;
    pub const KILL_SUIDGID: u32 = 1 << 11;
}

/// `fuse_open_out.open_flags` bits.
pub mod fopen {
    pub const DIRECT_IO: u32 = 1 << 0;
    pub const KEEP_CACHE: u32 = 1 << 1;
    pub const CACHE_DIR: u32 = 1 << 3;
    pub const NOFLUSH: u32 = 1 << 5;
    pub const PASSTHROUGH: u32 = 1 << 7;
}

/// `fuse_getattr_in.getattr_flags`: `fh` is valid.
pub const GETATTR_FH: u32 = 1 << 0;

/// `fuse_attr.flags`: the directory is the root of another filesystem (a submount).
pub const FUSE_ATTR_SUBMOUNT: u32 = 1 << 0;
/// `fuse_write_in.write_flags`: the kernel's writeback of cached pages.
pub const WRITE_CACHE: u32 = 1 << 0;
/// `fuse_write_in.write_flags`: clear setuid/setgid.
pub const WRITE_KILL_SUIDGID: u32 = 1 << 2;
/// `fuse_open_in.open_flags`: clear setuid/setgid (an `O_TRUNC` open).
pub const OPEN_KILL_SUIDGID: u32 = 1 << 0;
/// `fuse_setxattr_in.setxattr_flags`: setting an access ACL clears setgid.
pub const SETXATTR_ACL_KILL_SGID: u32 = 1 << 0;
/// `fuse_fsync_in.fsync_flags`: fdatasync.
pub const FSYNC_FDATASYNC: u32 = 1 << 0;
/// `fuse_ioctl_in.flags`: the ioctl is on a directory.
pub const IOCTL_DIR: u32 = 1 << 4;
/// The size of `fuse_setxattr_in` without `FUSE_SETXATTR_EXT`.
pub const COMPAT_SETXATTR_IN_SIZE: usize = 8;
/// The size of `fuse_init_in` before protocol 7.36.
pub const COMPAT_INIT_IN_SIZE: usize = 16;

/// `ioctl(2)` requests on `/dev/fuse`.
pub mod dev_ioc {
    /// `_IOR(229, 0, uint32_t)`: attach this descriptor to the connection of another.
    pub const CLONE: u64 = 0x8004_e500;
    /// `_IOW(229, 1, struct fuse_backing_map)`.
    pub const BACKING_OPEN: u64 = 0x4010_e501;
    /// `_IOW(229, 2, uint32_t)`.
    pub const BACKING_CLOSE: u64 = 0x4004_e502;
}

macro_rules! abi {
    ($($(#[$m:meta])* pub struct $name:ident { $($field:ident : $ty:ty),* $(,)? } = $size:expr;)*) => {
        $(
            $(#[$m])*
            #[repr(C)]
            #[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
            pub struct $name { $(pub $field: $ty),* }
            const _: () = assert!(std::mem::size_of::<$name>() == $size);
        )*
    };
}

abi! {
    pub struct fuse_in_header {
        len: u32, opcode: u32, unique: u64, nodeid: u64, uid: u32, gid: u32, pid: u32,
        total_extlen: u16, padding: u16,
    } = 40;
    pub struct fuse_out_header { len: u32, error: i32, unique: u64 } = 16;
    pub struct fuse_attr {
        ino: u64, size: u64, blocks: u64, atime: u64, mtime: u64, ctime: u64,
        atimensec: u32, mtimensec: u32, ctimensec: u32, mode: u32, nlink: u32, uid: u32,
        gid: u32, rdev: u32, blksize: u32, flags: u32,
    } = 88;
    pub struct fuse_entry_out {
        nodeid: u64, generation: u64, entry_valid: u64, attr_valid: u64,
        entry_valid_nsec: u32, attr_valid_nsec: u32, attr: fuse_attr,
    } = 128;
    pub struct fuse_forget_in { nlookup: u64 } = 8;
    pub struct fuse_batch_forget_in { count: u32, dummy: u32 } = 8;
    pub struct fuse_getattr_in { getattr_flags: u32, dummy: u32, fh: u64 } = 16;
    pub struct fuse_attr_out {
        attr_valid: u64, attr_valid_nsec: u32, dummy: u32, attr: fuse_attr,
    } = 104;
    pub struct fuse_sx_time { tv_sec: i64, tv_nsec: u32, reserved: i32 } = 16;
    pub struct fuse_statx {
        mask: u32, blksize: u32, attributes: u64, nlink: u32, uid: u32, gid: u32,
        mode: u16, spare0: u16, ino: u64, size: u64, blocks: u64, attributes_mask: u64,
        atime: fuse_sx_time, btime: fuse_sx_time, ctime: fuse_sx_time, mtime: fuse_sx_time,
        rdev_major: u32, rdev_minor: u32, dev_major: u32, dev_minor: u32, spare2: [u64; 14],
    } = 256;
    pub struct fuse_statx_in {
        getattr_flags: u32, reserved: u32, fh: u64, sx_flags: u32, sx_mask: u32,
    } = 24;
    pub struct fuse_statx_out {
        attr_valid: u64, attr_valid_nsec: u32, flags: u32, spare: [u64; 2], stat: fuse_statx,
    } = 288;
    pub struct fuse_mknod_in { mode: u32, rdev: u32, umask: u32, padding: u32 } = 16;
    pub struct fuse_mkdir_in { mode: u32, umask: u32 } = 8;
    pub struct fuse_rename_in { newdir: u64 } = 8;
    pub struct fuse_rename2_in { newdir: u64, flags: u32, padding: u32 } = 16;
    pub struct fuse_link_in { oldnodeid: u64 } = 8;
    pub struct fuse_setattr_in {
        valid: u32, padding: u32, fh: u64, size: u64, lock_owner: u64, atime: u64,
        mtime: u64, ctime: u64, atimensec: u32, mtimensec: u32, ctimensec: u32, mode: u32,
        unused4: u32, uid: u32, gid: u32, unused5: u32,
    } = 88;
    pub struct fuse_open_in { flags: u32, open_flags: u32 } = 8;
    pub struct fuse_create_in { flags: u32, mode: u32, umask: u32, open_flags: u32 } = 16;
    pub struct fuse_ext_header { size: u32, ext_type: u32 } = 8;
    pub struct fuse_secctx { size: u32, padding: u32 } = 8;
    pub struct fuse_open_out { fh: u64, open_flags: u32, backing_id: i32 } = 16;
    pub struct fuse_release_in { fh: u64, flags: u32, release_flags: u32, lock_owner: u64 } = 24;
    pub struct fuse_flush_in { fh: u64, unused: u32, padding: u32, lock_owner: u64 } = 24;
    pub struct fuse_read_in {
        fh: u64, offset: u64, size: u32, read_flags: u32, lock_owner: u64, flags: u32,
        padding: u32,
    } = 40;
    pub struct fuse_write_in {
        fh: u64, offset: u64, size: u32, write_flags: u32, lock_owner: u64, flags: u32,
        padding: u32,
    } = 40;
    pub struct fuse_write_out { size: u32, padding: u32 } = 8;
    pub struct fuse_kstatfs {
        blocks: u64, bfree: u64, bavail: u64, files: u64, ffree: u64, bsize: u32,
        namelen: u32, frsize: u32, padding: u32, spare: [u32; 6],
    } = 80;
    pub struct fuse_fsync_in { fh: u64, fsync_flags: u32, padding: u32 } = 16;
    pub struct fuse_setxattr_in { size: u32, flags: u32, setxattr_flags: u32, padding: u32 } = 16;
    pub struct fuse_getxattr_in { size: u32, padding: u32 } = 8;
    pub struct fuse_getxattr_out { size: u32, padding: u32 } = 8;
    pub struct fuse_access_in { mask: u32, padding: u32 } = 8;
    pub struct fuse_init_in {
        major: u32, minor: u32, max_readahead: u32, flags: u32, flags2: u32, unused: [u32; 11],
    } = 64;
    pub struct fuse_init_out {
        major: u32, minor: u32, max_readahead: u32, flags: u32, max_background: u16,
        congestion_threshold: u16, max_write: u32, time_gran: u32, max_pages: u16,
        map_alignment: u16, flags2: u32, max_stack_depth: u32, request_timeout: u16,
        unused: [u16; 11],
    } = 64;
    pub struct fuse_interrupt_in { unique: u64 } = 8;
    pub struct fuse_ioctl_in {
        fh: u64, flags: u32, cmd: u32, arg: u64, in_size: u32, out_size: u32,
    } = 32;
    pub struct fuse_ioctl_out { result: i32, flags: u32, in_iovs: u32, out_iovs: u32 } = 16;
    pub struct fuse_fallocate_in { fh: u64, offset: u64, length: u64, mode: u32, padding: u32 } = 32;
    pub struct fuse_lseek_in { fh: u64, offset: u64, whence: u32, padding: u32 } = 24;
    pub struct fuse_lseek_out { offset: u64 } = 8;
    pub struct fuse_copy_file_range_in {
        fh_in: u64, off_in: u64, nodeid_out: u64, fh_out: u64, off_out: u64, len: u64,
        flags: u64,
    } = 56;
    pub struct fuse_dirent { ino: u64, off: u64, namelen: u32, typ: u32 } = 24;
    pub struct fuse_notify_inval_inode_out { ino: u64, off: i64, len: i64 } = 24;
    pub struct fuse_notify_inval_entry_out { parent: u64, namelen: u32, flags: u32 } = 16;
    pub struct fuse_notify_delete_out { parent: u64, child: u64, namelen: u32, padding: u32 } = 24;
    pub struct fuse_backing_map { fd: i32, flags: u32, padding: u64 } = 16;
    pub struct fuse_uring_ent_in_out {
        flags: u64, commit_id: u64, payload_sz: u32, padding: u32, reserved: u64,
    } = 32;
    pub struct fuse_uring_req_header {
        in_out: [u8; 128], op_in: [u8; 128], ring_ent_in_out: fuse_uring_ent_in_out,
    } = 288;
    pub struct fuse_uring_cmd_req { flags: u64, commit_id: u64, qid: u16, padding: [u8; 6] } = 24;
}

impl fuse_out_header {
    /// The header of the reply to request `unique` with `error` (0 or a negative errno) and
    /// `body` bytes after the header.
    pub fn reply(unique: u64, error: i32, body: usize) -> fuse_out_header {
        fuse_out_header {
            len: (std::mem::size_of::<fuse_out_header>() + body) as u32,
            error,
            unique,
        }
    }
}

/// `sizeof(struct fuse_direntplus)` before the name: an entry and a dirent.
pub const DIRENTPLUS_HEAD: usize = 128 + 24;
/// Records in READDIR replies are aligned to 8 bytes.
pub const fn dirent_align(len: usize) -> usize {
    (len + 7) & !7
}
