//! What the request layer answers, for a transport to encode.
//!
//! [`crate::Server::handle`] calls exactly one terminal method of [`ReplyOut`] per request
//! that wants a reply ([`ReplyOut::dirent`] may come several times before
//! [`ReplyOut::dir_done`]). The transport turns each call into the kernel's wire format and
//! sends it; the request layer never sees bytes.

use std::time::Duration;

use memofs_core::ops::FdRead;
use memofs_core::{Attr, DirEntry, Entry, Errno, StatFs};

/// What [`ReplyOut::data_from_fd`] asks: the backend's READ, given a reader.
pub type FdSource<'a> = dyn FnMut(&mut FdRead<'_>) -> Option<memofs_core::Result<usize>> + 'a;

/// How an opened file or directory is to be treated by the kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenOut {
    /// The handle the kernel passes back.
    pub fh: u64,
    /// Every read and write of this open reaches the server (no page cache).
    pub direct_io: bool,
    /// Keep the page cache (or, for a directory, the cached listing) from earlier opens.
    pub keep_cache: bool,
    /// The kernel may cache this directory's listing.
    pub cache_dir: bool,
    /// `close(2)` needs no FLUSH round trip.
    pub noflush: bool,
    /// Reads and writes go to this FUSE passthrough backing file, not to the server.
    pub backing_id: Option<u32>,
}

/// A transport's encoder for one reply.
pub trait ReplyOut {
    /// The request failed.
    fn error(&mut self, e: Errno);
    /// Success with nothing to say.
    fn empty(&mut self);
    /// A LOOKUP, MKNOD, MKDIR, SYMLINK or LINK answer (`attr: None`: a negative entry).
    fn entry(&mut self, e: &Entry);
    /// A GETATTR or SETATTR answer.
    fn attr(&mut self, attr: &Attr, ttl: Duration);
    /// A STATX answer (with the birth time), and the inode's flags (`FS_IOC_GETFLAGS`'s)
    /// where it has them, for statx's attributes.
    fn statx(&mut self, attr: &Attr, iflags: Option<u32>, ttl: Duration);
    /// An OPEN or OPENDIR answer.
    fn opened(&mut self, o: &OpenOut);
    /// A CREATE or TMPFILE answer.
    fn created(&mut self, e: &Entry, o: &OpenOut);
    /// Bytes: READ, READLINK, GETXATTR, LISTXATTR.
    fn data(&mut self, data: &[u8]);
    /// Bytes in consecutive parts (READ): a transport that can write them out as they are
    /// overrides this, which copies them together.
    fn data_parts(&mut self, parts: &[&[u8]]) {
        self.data(&parts.concat())
    }
    /// READ's bytes read from a descriptor by the transport, straight to where they go (a
    /// guest's buffers), where it can: `source` is called with the reader and answers what
    /// the backend made of it (`Some(Ok(n))`: `n` bytes read, which the transport then
    /// sends; `Some(Err)`: the error, sent; `None`: the data is in no descriptor). Whether
    /// the request was answered; the default can do nothing of the kind and calls nothing.
    fn data_from_fd(&mut self, _source: &mut FdSource<'_>) -> bool {
        false
    }
    /// Bytes written (WRITE, COPY_FILE_RANGE).
    fn written(&mut self, n: u32);
    /// The size an xattr value or list would need (asked with size 0).
    fn xattr_size(&mut self, n: u32);
    /// A STATFS answer.
    fn statfs(&mut self, s: &StatFs);
    /// An LSEEK answer.
    fn offset(&mut self, offset: u64);
    /// An IOCTL answer: the ioctl's return value and its output argument.
    fn ioctl(&mut self, result: i32, out: &[u8]);
    /// Adds one directory entry to a READDIR (`plus: None`) or READDIRPLUS answer; false
    /// when it does not fit (it was not added, and the listing ends there).
    fn dirent(&mut self, e: &DirEntry, plus: Option<&Entry>) -> bool;
    /// Sends the entries added so far as the READDIR/READDIRPLUS answer.
    fn dir_done(&mut self);
}
