//! memofs's in-memory backend: a tmpfs-like filesystem kept in the server's memory.
//!
//! Files are split by object kind, as in gVisor's tmpfs: [`dir`] (directories),
//! [`regular`] (regular files and their page store), [`symlink`] (symbolic links); device
//! nodes, FIFOs and sockets carry no data. [`inode`] holds what every kind shares
//! (attributes, timestamps, link and lookup counts, the atime choke point) and the inode
//! table; [`namespace`] implements the operations that change names; [`xattr`] extended
//! attributes, [`acl`] the POSIX ACLs among them; [`iflags`] the inode flags (`chattr`);
//! [`limits`] the `size=`/`nr_inodes=` accounting and [`machine`] the bound the machine's
//! free memory puts on it; [`pages`] a page-store file's page map; [`migrate`] the whole
//! filesystem as a state stream, to move it to another server process.
//!
//! # Lock order
//! Take locks only in this order; functions that need a lock held end in `_locked`.
//! 1. [`MemFs::rename_lock`]: held by every operation that locks two directories (rename,
//!    rmdir), so at most one thread ever holds more than one directory lock;
//! 2. directory locks ([`dir::DirNode`]). A thread without `rename_lock` holds at most one
//!    and takes no other while holding it: a child directory's attributes (READDIRPLUS,
//!    LOOKUP) read its size from an atomic, not under its lock. The `rename_lock` holder
//!    takes the two parents in ascending inode number, then, as it needs them, the moved or
//!    replaced directories and the ancestors it walks; the other threads, holding one
//!    directory lock each and waiting for no second, cannot close a cycle with it;
//! 3. an inode's `meta` mutex;
//! 4. a regular file's page-store lock;
//! 5. leaf locks, never held while taking another: an inode's xattr mutex, inode-table shards.
//!
//! Counters (`nlink`, lookup and open counts, timestamps, usage) are atomics and need no lock.
#![deny(missing_docs)]

pub mod acl;
mod copy;
pub mod dir;
pub mod iflags;
pub mod inode;
pub mod kernel_data;
pub mod limits;
pub mod machine;
pub mod migrate;
mod namespace;
mod ops;
pub mod pages;
mod precopy;
pub mod reclaim;
pub mod regular;
pub mod symlink;
pub mod xattr;

use memofs_core::options::HugeMode;
use memofs_core::{AtimePolicy, AtomicAtime, Timestamp};
use parking_lot::Mutex;

use crate::inode::{InodeTable, NodeData, Owner};
use crate::kernel_data::BackingStore;
use crate::limits::Limits;
use crate::regular::RegularFile;

/// Configuration of a mem filesystem.
#[derive(Clone, Copy, Debug)]
pub struct MemConfig {
    /// Byte limit for data, xattrs and symlink targets; 0 = unlimited.
    pub size_limit: u64,
    /// Inode limit; 0 = unlimited.
    pub inode_limit: u64,
    /// Root directory permission bits.
    pub root_mode: u32,
    /// Root directory owner.
    pub root_uid: u32,
    /// Root directory group.
    pub root_gid: u32,
    /// atime rule.
    pub atime: AtimePolicy,
    /// Keep regular files' data in a private kernel tmpfs, for FUSE passthrough.
    pub kernel_data: bool,
    /// The private tmpfs's `huge=` (kernel data only).
    pub huge: HugeMode,
}

impl Default for MemConfig {
    fn default() -> Self {
        MemConfig {
            size_limit: 0,
            inode_limit: 0,
            root_mode: 0o1777,
            root_uid: 0,
            root_gid: 0,
            atime: AtimePolicy::default(),
            kernel_data: false,
            huge: HugeMode::Never,
        }
    }
}

/// The in-memory filesystem.
pub struct MemFs {
    pub(crate) table: InodeTable,
    pub(crate) limits: Limits,
    /// The atime rule: a remount may change it (see [`MemFs::change_atime`]).
    pub(crate) atime: AtomicAtime,
    /// Lock order 1: serializes operations that lock two directories.
    pub(crate) rename_lock: Mutex<()>,
    /// Where regular files keep their data when it is kernel-backed.
    pub(crate) store: Option<BackingStore>,
    /// Data sent ahead of a migration's state, or received ahead of it (see [`precopy`]).
    pub(crate) precopy: precopy::Precopy,
}

impl MemFs {
    /// Creates an empty filesystem with only its root directory. With `kernel_data`, fails
    /// if the private tmpfs for file data cannot be mounted (needs root).
    pub fn new(config: MemConfig) -> std::io::Result<MemFs> {
        let inode_limit = config.inode_limit;
        let store = match config.kernel_data {
            // The server enforces nr_inodes; the private tmpfs needs room for its own root
            // and the ballast besides the data files.
            true => Some(BackingStore::new(
                config.size_limit,
                if inode_limit == 0 { 0 } else { inode_limit + 2 },
                config.atime,
                config.huge,
            )?),
            false => None,
        };
        Ok(MemFs::with_store(config, store))
    }

    /// An empty filesystem (only its root) whose file data is in `store`, the private tmpfs
    /// another server process handed over ([`BackingStore::adopt`]), to load that process's
    /// state into ([`MemFs::load_handover`]).
    pub fn adopting(config: MemConfig, store: BackingStore) -> MemFs {
        MemFs::with_store(config, Some(store))
    }

    /// What another server process needs to take the private tmpfs over
    /// ([`BackingStore::handover`]); `None` where file data is in the server.
    pub fn store_handover(
        &self,
    ) -> Option<std::io::Result<(std::os::fd::OwnedFd, u64, Timestamp)>> {
        self.store.as_ref().map(BackingStore::handover)
    }

    /// Puts the atime rule `p` in effect (`mount -o remount,strictatime`, ...): for the
    /// server's own accesses and, where file data is kernel-backed, for the kernel's, whose
    /// rule is the private tmpfs mount's flag.
    pub fn change_atime(&self, p: AtimePolicy) -> std::result::Result<(), String> {
        if let Some(store) = &self.store {
            store
                .set_atime(p)
                .map_err(|e| format!("the kernel refused the file data's new atime rule: {e}"))?;
        }
        self.atime.store(p);
        Ok(())
    }

    /// Takes new size and inode limits (0 = unlimited) on the live filesystem, for the
    /// server's charges and, where file data is kernel-backed, for the private tmpfs (the
    /// kernel refuses limits below what is in use); both stay as they were if either refuses.
    pub fn change_limits(&self, size: u64, nr_inodes: u64) -> std::result::Result<(), String> {
        let old = (self.limits.bytes_limit(), self.limits.inodes_limit());
        self.limits.set_limits(size, nr_inodes)?;
        let Some(store) = &self.store else {
            return Ok(());
        };
        // The private tmpfs also holds its root and the ballast (see `MemFs::new`).
        let store_inodes = if nr_inodes == 0 { 0 } else { nr_inodes + 2 };
        let used = store.usage().map_or(0, |(total, free)| total - free);
        let resized = match size != 0 && size < used {
            true => Err(format!("size={size} is below the {used} bytes the files use")),
            false => store.resize(size, store_inodes).map_err(|e| {
                format!("size={size},nr_inodes={nr_inodes}: the kernel refused them for the files' data ({e})")
            }),
        };
        resized.inspect_err(|_| {
            let _ = self.limits.set_limits(old.0, old.1);
        })
    }

    /// The directories the kernel holds lookups of, and the root.
    pub fn known_directories(&self) -> Vec<memofs_core::Ino> {
        let known = |i: &inode::Inode| i.ino == memofs_core::ROOT_INO || i.looked_up();
        self.table
            .all()
            .into_iter()
            .filter(|i| i.kind() == memofs_core::FileKind::Directory && known(i))
            .map(|i| i.ino)
            .collect()
    }

    fn with_store(config: MemConfig, store: Option<BackingStore>) -> MemFs {
        let inode_limit = config.inode_limit;
        crate::reclaim::tune_allocator();
        let fs = MemFs {
            table: InodeTable::new(),
            limits: Limits::new(config.size_limit, inode_limit),
            atime: AtomicAtime::new(config.atime),
            rename_lock: Mutex::new(()),
            store,
            precopy: Default::default(),
        };
        fs.limits.charge_inode_unchecked();
        let owner = Owner {
            uid: config.root_uid,
            gid: config.root_gid,
        };
        let root = fs.table.insert_root(
            libc::S_IFDIR | (config.root_mode & 0o7777),
            owner,
            NodeData::new_dir(memofs_core::ROOT_INO),
            Timestamp::now(),
        );
        debug_assert_eq!(root.ino, memofs_core::ROOT_INO);
        fs
    }

    /// True if regular files keep their data in the kernel (FUSE passthrough possible).
    pub fn kernel_data(&self) -> bool {
        self.store.is_some()
    }

    /// Charges `n` bytes of the server's own data (xattrs, symlink targets) against `size=`;
    /// with kernel-backed file data they also take room in its private tmpfs, so that data
    /// and metadata share one limit.
    pub(crate) fn charge_meta(&self, n: u64) -> memofs_core::Result<()> {
        self.limits.charge_bytes(n)?;
        if let Some(store) = &self.store {
            if let Err(e) = store.set_ballast(self.limits.bytes()) {
                self.limits.uncharge_bytes(n);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Gives back what [`MemFs::charge_meta`] took.
    pub(crate) fn uncharge_meta(&self, n: u64) {
        self.limits.uncharge_bytes(n);
        // Freed xattrs, ACLs and symlink targets are heap memory the allocator may hand back.
        reclaim::pages_freed(n);
        if let Some(store) = &self.store {
            let _ = store.set_ballast(self.limits.bytes());
        }
    }

    /// Contents for a new regular file; `to_open` when the caller opens it next (see
    /// [`BackingStore::new_file`]).
    pub(crate) fn new_regular(&self, to_open: bool) -> memofs_core::Result<RegularFile> {
        match &self.store {
            None => Ok(RegularFile::new()),
            Some(store) => Ok(RegularFile::Kernel(store.new_file(to_open)?)),
        }
    }
}
