//! Kernel request bytes to [`memofs_request::Request`].
//!
//! A request is a `fuse_in_header`, then its arguments: a per-opcode struct (none for some
//! opcodes), then names or data. `/dev/fuse` delivers them back to back; an io_uring ring
//! entry delivers the per-opcode struct in its header area and the rest in its payload
//! buffer. [`Args`] hides the difference, so both transports share this decoder.

use std::ffi::OsStr;
use std::mem::size_of;
use std::os::unix::ffi::OsStrExt;

use memofs_core::{Caller, Errno, Result, SetAttr, TimeSet, Timestamp};
use memofs_request::{Op, Payload, Request, WriteData};
use zerocopy::{FromBytes, IntoBytes};

use crate::abi::{self, fattr, opcode};

/// What decoding depends on from INIT.
#[derive(Clone, Copy, Debug, Default)]
pub struct Proto {
    /// `fuse_setxattr_in` has its extended (16-byte) form.
    pub setxattr_ext: bool,
    /// Requests that make a node carry its security label (`FUSE_SECURITY_CTX`).
    pub security_ctx: bool,
}

/// The arguments of one request (after `fuse_in_header`).
#[derive(Clone, Copy)]
pub struct Args<'a> {
    /// Holds the per-opcode struct; for `/dev/fuse`, everything after the header.
    head: &'a [u8],
    /// For a ring entry: the payload (the arguments after the per-opcode struct).
    payload: Option<&'a [u8]>,
    /// A WRITE's bytes, where the transport left them where the sender put them.
    elsewhere: Option<&'a dyn Payload>,
}

impl<'a> Args<'a> {
    /// Arguments back to back, as `/dev/fuse` delivers them.
    pub fn contiguous(body: &'a [u8]) -> Args<'a> {
        Args {
            head: body,
            payload: None,
            elsewhere: None,
        }
    }

    /// Arguments as a ring entry delivers them: the per-opcode struct in `op_in`, the rest
    /// in `payload`.
    pub fn split(op_in: &'a [u8], payload: &'a [u8]) -> Args<'a> {
        Args {
            head: op_in,
            payload: Some(payload),
            elsewhere: None,
        }
    }

    /// A WRITE's arguments up to its data in `body`, its data left in `data` (a guest's
    /// memory, written to the backend's file from there).
    pub fn write_elsewhere(body: &'a [u8], data: &'a dyn Payload) -> Args<'a> {
        Args {
            head: body,
            payload: None,
            elsewhere: Some(data),
        }
    }

    /// Takes the per-opcode struct `T`, of which `wire` bytes were sent (an older, shorter
    /// form reads its missing fields as 0), and returns it with the arguments after it.
    fn take_sized<T: FromBytes + IntoBytes>(self, wire: usize) -> Result<(T, &'a [u8])> {
        let src = self.head.get(..wire).ok_or(Errno::EINVAL)?;
        let mut v = T::new_zeroed();
        let n = wire.min(size_of::<T>());
        v.as_mut_bytes()[..n].copy_from_slice(&src[..n]);
        let rest = match self.payload {
            Some(p) => p,
            None => &self.head[wire..],
        };
        Ok((v, rest))
    }

    /// The arguments without the `len` bytes of extensions at their end, and those bytes.
    fn split_extensions(self, len: usize) -> Result<(Args<'a>, &'a [u8])> {
        let tail = |b: &'a [u8]| {
            let at = b.len().checked_sub(len).ok_or(Errno::EINVAL)?;
            Ok::<_, Errno>(b.split_at(at))
        };
        Ok(match self.payload {
            Some(p) => {
                let (p, ext) = tail(p)?;
                (
                    Args {
                        payload: Some(p),
                        ..self
                    },
                    ext,
                )
            }
            None => {
                let (head, ext) = tail(self.head)?;
                (Args { head, ..self }, ext)
            }
        })
    }

    fn take<T: FromBytes + IntoBytes>(self) -> Result<(T, &'a [u8])> {
        self.take_sized(size_of::<T>())
    }

    /// The arguments of an opcode without a per-opcode struct.
    fn rest(self) -> &'a [u8] {
        self.payload.unwrap_or(self.head)
    }
}

/// Splits a NUL-terminated name off the front of `b`.
pub(crate) fn name(b: &[u8]) -> Result<(&OsStr, &[u8])> {
    let end = b.iter().position(|&c| c == 0).ok_or(Errno::EINVAL)?;
    Ok((OsStr::from_bytes(&b[..end]), &b[end + 1..]))
}

fn only_name(b: &[u8]) -> Result<&OsStr> {
    name(b).map(|(n, _)| n)
}

fn time(sec: u64, nsec: u32) -> Timestamp {
    Timestamp::from_timespec(sec as i64, nsec)
}

/// A SETATTR's fields. Under the writeback cache the kernel stamps times itself and sends
/// the ctime it took (`FATTR_CTIME`); a `utimensat(UTIME_NOW)` then comes as that same time,
/// not as `FATTR_*_NOW`, so a time equal to the ctime sent is decoded as "now" (which the
/// backend takes to be that ctime): touching stays a touch (allowed to any writer, and on
/// append-only files), not an explicit time.
fn setattr(a: &abi::fuse_setattr_in) -> SetAttr {
    let has = |bit| a.valid & bit != 0;
    let stamped_now = |sec, nsec| has(fattr::CTIME) && (sec, nsec) == (a.ctime, a.ctimensec);
    let when = |now, set, sec, nsec| {
        if has(now) || (has(set) && stamped_now(sec, nsec)) {
            Some(TimeSet::Now)
        } else if has(set) {
            Some(TimeSet::At(time(sec, nsec)))
        } else {
            None
        }
    };
    SetAttr {
        mode: has(fattr::MODE).then_some(a.mode),
        uid: has(fattr::UID).then_some(a.uid),
        gid: has(fattr::GID).then_some(a.gid),
        size: has(fattr::SIZE).then_some(a.size),
        atime: when(fattr::ATIME_NOW, fattr::ATIME, a.atime, a.atimensec),
        mtime: when(fattr::MTIME_NOW, fattr::MTIME, a.mtime, a.mtimensec),
        ctime: has(fattr::CTIME).then(|| time(a.ctime, a.ctimensec)),
        fh: has(fattr::FH).then_some(a.fh),
    }
}

/// Decodes one request (not INIT, which the transport answers before any other): the
/// opcode picks its family, and the family decodes its arguments.
pub fn decode<'a>(h: &abi::fuse_in_header, args: Args<'a>, proto: Proto) -> Result<Request<'a>> {
    let (args, ext) = args.split_extensions(usize::from(h.total_extlen) * 8)?;
    let label = match h.opcode {
        opcode::CREATE | opcode::TMPFILE | opcode::MKNOD | opcode::MKDIR | opcode::SYMLINK => {
            crate::ext::label(ext, proto.security_ctx)?
        }
        _ if ext.is_empty() => None,
        _ => return Err(Errno::EINVAL),
    };
    let op = match h.opcode {
        opcode::LOOKUP
        | opcode::FORGET
        | opcode::BATCH_FORGET
        | opcode::SYMLINK
        | opcode::MKNOD
        | opcode::MKDIR
        | opcode::UNLINK
        | opcode::RMDIR
        | opcode::RENAME
        | opcode::RENAME2
        | opcode::LINK => namespace(h.opcode, args)?,
        opcode::GETATTR
        | opcode::STATX
        | opcode::SETATTR
        | opcode::READLINK
        | opcode::STATFS
        | opcode::ACCESS => attributes(h.opcode, args)?,
        opcode::OPEN
        | opcode::CREATE
        | opcode::TMPFILE
        | opcode::OPENDIR
        | opcode::FLUSH
        | opcode::RELEASE
        | opcode::RELEASEDIR
        | opcode::FSYNC
        | opcode::FSYNCDIR => handles(h.opcode, args)?,
        opcode::READ
        | opcode::READDIR
        | opcode::READDIRPLUS
        | opcode::WRITE
        | opcode::IOCTL
        | opcode::FALLOCATE
        | opcode::LSEEK
        | opcode::COPY_FILE_RANGE => data(h.opcode, args)?,
        opcode::SETXATTR | opcode::GETXATTR | opcode::LISTXATTR | opcode::REMOVEXATTR => {
            xattrs(h.opcode, args, proto)?
        }
        opcode::SYNCFS | opcode::INTERRUPT | opcode::DESTROY => connection(h.opcode, args)?,
        other => Op::Unsupported { opcode: other },
    };
    Ok(Request {
        unique: h.unique,
        nodeid: h.nodeid,
        caller: Caller {
            uid: h.uid,
            gid: h.gid,
            pid: h.pid,
        },
        op,
        label,
    })
}

/// Names: looking up, forgetting, making, removing and renaming them.
fn namespace<'a>(op: u32, args: Args<'a>) -> Result<Op<'a>> {
    Ok(match op {
        opcode::LOOKUP => Op::Lookup {
            name: only_name(args.rest())?,
        },
        opcode::FORGET => Op::Forget {
            nlookup: args.take::<abi::fuse_forget_in>()?.0.nlookup,
        },
        opcode::BATCH_FORGET => {
            let (b, rest) = args.take::<abi::fuse_batch_forget_in>()?;
            let len = (b.count as usize)
                .checked_mul(16)
                .filter(|&n| n <= rest.len())
                .ok_or(Errno::EINVAL)?;
            Op::BatchForget {
                forgets: <[[u64; 2]]>::ref_from_bytes(&rest[..len]).map_err(|_| Errno::EINVAL)?,
            }
        }
        opcode::SYMLINK => {
            let (n, rest) = name(args.rest())?;
            Op::Symlink {
                name: n,
                target: only_name(rest)?,
            }
        }
        opcode::MKNOD => {
            let (m, rest) = args.take::<abi::fuse_mknod_in>()?;
            Op::Mknod {
                name: only_name(rest)?,
                mode: m.mode,
                rdev: m.rdev,
                umask: m.umask,
            }
        }
        opcode::MKDIR => {
            let (m, rest) = args.take::<abi::fuse_mkdir_in>()?;
            Op::Mkdir {
                name: only_name(rest)?,
                mode: m.mode,
                umask: m.umask,
            }
        }
        opcode::UNLINK => Op::Unlink {
            name: only_name(args.rest())?,
        },
        opcode::RMDIR => Op::Rmdir {
            name: only_name(args.rest())?,
        },
        opcode::RENAME | opcode::RENAME2 => {
            let (newdir, flags, rest) = if op == opcode::RENAME {
                let (r, rest) = args.take::<abi::fuse_rename_in>()?;
                (r.newdir, 0, rest)
            } else {
                let (r, rest) = args.take::<abi::fuse_rename2_in>()?;
                (r.newdir, r.flags, rest)
            };
            let (old, rest) = name(rest)?;
            Op::Rename {
                name: old,
                new_parent: newdir,
                new_name: only_name(rest)?,
                flags,
            }
        }
        opcode::LINK => {
            let (l, rest) = args.take::<abi::fuse_link_in>()?;
            Op::Link {
                inode: l.oldnodeid,
                new_name: only_name(rest)?,
            }
        }
        other => Op::Unsupported { opcode: other },
    })
}

/// Attributes of an inode, and of the filesystem.
fn attributes<'a>(op: u32, args: Args<'a>) -> Result<Op<'a>> {
    Ok(match op {
        opcode::GETATTR => {
            let g = args.take::<abi::fuse_getattr_in>()?.0;
            Op::Getattr {
                fh: (g.getattr_flags & abi::GETATTR_FH != 0).then_some(g.fh),
            }
        }
        opcode::STATX => {
            let s = args.take::<abi::fuse_statx_in>()?.0;
            Op::Statx {
                fh: (s.getattr_flags & abi::GETATTR_FH != 0).then_some(s.fh),
                mask: s.sx_mask,
            }
        }
        opcode::SETATTR => {
            let s = args.take::<abi::fuse_setattr_in>()?.0;
            Op::Setattr {
                set: setattr(&s),
                kill_suidgid: s.valid & fattr::KILL_SUIDGID != 0,
            }
        }
        opcode::READLINK => Op::Readlink,
        opcode::STATFS => Op::Statfs,
        opcode::ACCESS => Op::Access,
        other => Op::Unsupported { opcode: other },
    })
}

/// Opening, creating, flushing, syncing and releasing handles.
fn handles<'a>(op: u32, args: Args<'a>) -> Result<Op<'a>> {
    Ok(match op {
        opcode::OPEN => {
            let o = args.take::<abi::fuse_open_in>()?.0;
            Op::Open {
                flags: o.flags as i32,
                kill_suidgid: o.open_flags & abi::OPEN_KILL_SUIDGID != 0,
            }
        }
        opcode::CREATE => {
            let (c, rest) = args.take::<abi::fuse_create_in>()?;
            Op::Create {
                name: only_name(rest)?,
                mode: c.mode,
                umask: c.umask,
                flags: c.flags as i32,
            }
        }
        opcode::TMPFILE => {
            let c = args.take::<abi::fuse_create_in>()?.0;
            Op::Tmpfile {
                mode: c.mode,
                umask: c.umask,
                flags: c.flags as i32,
            }
        }
        opcode::OPENDIR => Op::Opendir {
            flags: args.take::<abi::fuse_open_in>()?.0.flags as i32,
        },
        opcode::FLUSH => Op::Flush {
            fh: args.take::<abi::fuse_flush_in>()?.0.fh,
        },
        opcode::RELEASE | opcode::RELEASEDIR => {
            let fh = args.take::<abi::fuse_release_in>()?.0.fh;
            if op == opcode::RELEASE {
                Op::Release { fh }
            } else {
                Op::Releasedir { fh }
            }
        }
        opcode::FSYNC | opcode::FSYNCDIR => {
            let f = args.take::<abi::fuse_fsync_in>()?.0;
            let datasync = f.fsync_flags & abi::FSYNC_FDATASYNC != 0;
            if op == opcode::FSYNC {
                Op::Fsync { fh: f.fh, datasync }
            } else {
                Op::Fsyncdir { fh: f.fh, datasync }
            }
        }
        other => Op::Unsupported { opcode: other },
    })
}

/// What moves or changes file data through a handle.
fn data<'a>(op: u32, args: Args<'a>) -> Result<Op<'a>> {
    Ok(match op {
        opcode::READ | opcode::READDIR | opcode::READDIRPLUS => {
            let r = args.take::<abi::fuse_read_in>()?.0;
            match op {
                opcode::READ => Op::Read {
                    fh: r.fh,
                    offset: r.offset,
                    size: r.size,
                },
                op => Op::Readdir {
                    fh: r.fh,
                    offset: r.offset,
                    size: r.size,
                    plus: op == opcode::READDIRPLUS,
                },
            }
        }
        opcode::WRITE => {
            let (w, rest) = args.take::<abi::fuse_write_in>()?;
            let size = w.size as usize;
            let data = match args.elsewhere {
                Some(p) if rest.is_empty() && p.len() == size => WriteData::Elsewhere(p),
                Some(_) => return Err(Errno::EINVAL),
                None => WriteData::Bytes(rest.get(..size).ok_or(Errno::EINVAL)?),
            };
            Op::Write {
                fh: w.fh,
                offset: w.offset,
                data,
                kill_suidgid: w.write_flags & abi::WRITE_KILL_SUIDGID != 0,
                cached: w.write_flags & abi::WRITE_CACHE != 0,
            }
        }
        opcode::IOCTL => {
            let (i, rest) = args.take::<abi::fuse_ioctl_in>()?;
            Op::Ioctl {
                fh: i.fh,
                cmd: i.cmd,
                input: rest.get(..i.in_size as usize).ok_or(Errno::EINVAL)?,
                out_size: i.out_size,
            }
        }
        opcode::FALLOCATE => {
            let f = args.take::<abi::fuse_fallocate_in>()?.0;
            Op::Fallocate {
                fh: f.fh,
                offset: f.offset,
                length: f.length,
                mode: f.mode as i32,
            }
        }
        opcode::LSEEK => {
            let l = args.take::<abi::fuse_lseek_in>()?.0;
            Op::Lseek {
                fh: l.fh,
                offset: l.offset as i64,
                whence: l.whence as i32,
            }
        }
        opcode::COPY_FILE_RANGE => {
            let c = args.take::<abi::fuse_copy_file_range_in>()?.0;
            Op::CopyFileRange {
                fh_in: c.fh_in,
                offset_in: c.off_in,
                ino_out: c.nodeid_out,
                fh_out: c.fh_out,
                offset_out: c.off_out,
                len: c.len,
            }
        }
        other => Op::Unsupported { opcode: other },
    })
}

/// Extended attributes.
fn xattrs<'a>(op: u32, args: Args<'a>, proto: Proto) -> Result<Op<'a>> {
    Ok(match op {
        opcode::SETXATTR => {
            let wire = if proto.setxattr_ext {
                size_of::<abi::fuse_setxattr_in>()
            } else {
                abi::COMPAT_SETXATTR_IN_SIZE
            };
            let (s, rest) = args.take_sized::<abi::fuse_setxattr_in>(wire)?;
            let (n, rest) = name(rest)?;
            Op::Setxattr {
                name: n,
                value: rest.get(..s.size as usize).ok_or(Errno::EINVAL)?,
                flags: s.flags as i32,
                acl_kill_sgid: s.setxattr_flags & abi::SETXATTR_ACL_KILL_SGID != 0,
            }
        }
        opcode::GETXATTR => {
            let (g, rest) = args.take::<abi::fuse_getxattr_in>()?;
            Op::Getxattr {
                name: only_name(rest)?,
                size: g.size,
            }
        }
        opcode::LISTXATTR => Op::Listxattr {
            size: args.take::<abi::fuse_getxattr_in>()?.0.size,
        },
        opcode::REMOVEXATTR => Op::Removexattr {
            name: only_name(args.rest())?,
        },
        other => Op::Unsupported { opcode: other },
    })
}

/// The connection itself: syncing the filesystem, interrupts, the end.
fn connection<'a>(op: u32, args: Args<'a>) -> Result<Op<'a>> {
    Ok(match op {
        opcode::SYNCFS => Op::Syncfs,
        opcode::INTERRUPT => Op::Interrupt {
            unique: args.take::<abi::fuse_interrupt_in>()?.0.unique,
        },
        opcode::DESTROY => Op::Destroy,
        other => Op::Unsupported { opcode: other },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::FromZeros;

    fn header(opcode: u32) -> abi::fuse_in_header {
        let mut h = abi::fuse_in_header::new_zeroed();
        h.opcode = opcode;
        h.unique = 7;
        h.nodeid = 1;
        h.uid = 1000;
        h
    }

    fn body(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    #[test]
    fn names_and_structs_back_to_back_and_split() {
        let mut m = abi::fuse_mkdir_in::new_zeroed();
        m.mode = 0o755;
        m.umask = 0o22;
        let wire = body(&[m.as_bytes(), b"dir\0"]);
        for args in [Args::contiguous(&wire), Args::split(m.as_bytes(), b"dir\0")] {
            let r = decode(&header(opcode::MKDIR), args, Proto::default()).unwrap();
            assert_eq!(r.caller.uid, 1000);
            match r.op {
                Op::Mkdir { name, mode, umask } => {
                    assert_eq!((name.as_bytes(), mode, umask), (&b"dir"[..], 0o755, 0o22));
                }
                op => panic!("{op:?}"),
            }
        }
    }

    #[test]
    fn rename_symlink_and_write_data() {
        let mut r = abi::fuse_rename2_in::new_zeroed();
        r.newdir = 9;
        r.flags = libc::RENAME_NOREPLACE;
        let wire = body(&[r.as_bytes(), b"a\0b\0"]);
        match decode(
            &header(opcode::RENAME2),
            Args::contiguous(&wire),
            Proto::default(),
        )
        .unwrap()
        .op
        {
            Op::Rename {
                name,
                new_parent,
                new_name,
                flags,
            } => {
                assert_eq!(
                    (name.as_bytes(), new_parent, new_name.as_bytes()),
                    (&b"a"[..], 9, &b"b"[..])
                );
                assert_eq!(flags, libc::RENAME_NOREPLACE);
            }
            op => panic!("{op:?}"),
        }
        let wire = b"link\0target\0".to_vec();
        assert!(matches!(
            decode(&header(opcode::SYMLINK), Args::contiguous(&wire), Proto::default()).unwrap().op,
            Op::Symlink { target, .. } if target.as_bytes() == b"target"
        ));
        let mut w = abi::fuse_write_in::new_zeroed();
        w.size = 3;
        w.write_flags = abi::WRITE_KILL_SUIDGID | abi::WRITE_CACHE;
        let wire = body(&[w.as_bytes(), b"xyz"]);
        assert!(matches!(
            decode(
                &header(opcode::WRITE),
                Args::contiguous(&wire),
                Proto::default()
            )
            .unwrap()
            .op,
            Op::Write {
                data: WriteData::Bytes(b"xyz"),
                kill_suidgid: true,
                cached: true,
                ..
            }
        ));
        // Data left where the sender put them: taken for as long as the WRITE says.
        struct Three;
        impl Payload for Three {
            fn len(&self) -> usize {
                3
            }
            fn write_at(&self, _: std::os::fd::BorrowedFd<'_>, _: u64) -> std::io::Result<usize> {
                Ok(3)
            }
            fn copy_into(&self, buf: &mut Vec<u8>) -> std::io::Result<()> {
                buf.extend_from_slice(b"xyz");
                Ok(())
            }
        }
        let h = header(opcode::WRITE);
        let args = Args::write_elsewhere(w.as_bytes(), &Three);
        let op = decode(&h, args, Proto::default()).unwrap().op;
        assert!(matches!(op, Op::Write { data: WriteData::Elsewhere(p), .. } if p.len() == 3));
        w.size = 4;
        let args = Args::write_elsewhere(w.as_bytes(), &Three);
        assert_eq!(
            decode(&h, args, Proto::default()).err(),
            Some(Errno::EINVAL)
        );
        let args = Args::write_elsewhere(&wire, &Three);
        assert_eq!(
            decode(&h, args, Proto::default()).err(),
            Some(Errno::EINVAL)
        );
    }

    #[test]
    fn short_or_unterminated_arguments_are_einval() {
        let h = header(opcode::LOOKUP);
        assert_eq!(
            decode(&h, Args::contiguous(b"no-nul"), Proto::default()).err(),
            Some(Errno::EINVAL)
        );
        let h = header(opcode::SETATTR);
        assert_eq!(
            decode(&h, Args::contiguous(&[0u8; 10]), Proto::default()).err(),
            Some(Errno::EINVAL)
        );
        let mut w = abi::fuse_write_in::new_zeroed();
        w.size = 100;
        let wire = body(&[w.as_bytes(), b"short"]);
        assert_eq!(
            decode(
                &header(opcode::WRITE),
                Args::contiguous(&wire),
                Proto::default()
            )
            .err(),
            Some(Errno::EINVAL)
        );
    }

    #[test]
    fn a_new_nodes_label_comes_off_the_end_of_its_arguments() {
        let mut m = abi::fuse_mkdir_in::new_zeroed();
        m.mode = 0o755;
        let mut ext = [32u32.to_ne_bytes(), 1u32.to_ne_bytes()].concat();
        ext.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
        ext.extend_from_slice(b"security.x\0v\0\0\0\0");
        let ext = &ext[..32];
        let mut h = header(opcode::MKDIR);
        h.total_extlen = (ext.len() / 8) as u16;
        let proto = Proto {
            security_ctx: true,
            ..Proto::default()
        };
        let whole = body(&[m.as_bytes(), b"dir\0", ext]);
        let payload = body(&[b"dir\0", ext]);
        for args in [
            Args::contiguous(&whole),
            Args::split(m.as_bytes(), &payload),
        ] {
            let r = decode(&h, args, proto).unwrap();
            assert!(matches!(r.op, Op::Mkdir { name, .. } if name == "dir"));
            let label = r.label.expect("a label");
            assert_eq!(
                (label.name, label.value),
                (OsStr::new("security.x"), &b"v"[..])
            );
        }
        // Not asked for, past the arguments, or on a request that makes nothing.
        assert_eq!(
            decode(&h, Args::contiguous(&whole), Proto::default()).err(),
            Some(Errno::EINVAL)
        );
        h.total_extlen = 100;
        assert_eq!(
            decode(&h, Args::contiguous(&whole), proto).err(),
            Some(Errno::EINVAL)
        );
        let mut u = header(opcode::UNLINK);
        u.total_extlen = (ext.len() / 8) as u16;
        let unlink = body(&[b"dir\0", ext]);
        assert_eq!(
            decode(&u, Args::contiguous(&unlink), proto).err(),
            Some(Errno::EINVAL)
        );
    }

    #[test]
    fn setxattr_compat_and_extended_forms() {
        let mut s = abi::fuse_setxattr_in::new_zeroed();
        s.size = 2;
        s.setxattr_flags = abi::SETXATTR_ACL_KILL_SGID;
        let ext = body(&[s.as_bytes(), b"user.a\0hi"]);
        let compat = body(&[&s.as_bytes()[..abi::COMPAT_SETXATTR_IN_SIZE], b"user.a\0hi"]);
        let h = header(opcode::SETXATTR);
        let r = decode(
            &h,
            Args::contiguous(&ext),
            Proto {
                setxattr_ext: true,
                ..Proto::default()
            },
        )
        .unwrap();
        assert!(matches!(
            r.op,
            Op::Setxattr {
                value: b"hi",
                acl_kill_sgid: true,
                ..
            }
        ));
        let r = decode(&h, Args::contiguous(&compat), Proto::default()).unwrap();
        assert!(matches!(
            r.op,
            Op::Setxattr {
                value: b"hi",
                acl_kill_sgid: false,
                ..
            }
        ));
    }

    #[test]
    fn setattr_times_before_1970_keep_their_fraction() {
        let mut s = abi::fuse_setattr_in::new_zeroed();
        s.valid = fattr::MTIME | fattr::ATIME_NOW | fattr::KILL_SUIDGID;
        s.mtime = (-1i64) as u64;
        s.mtimensec = 500_000_000;
        let r = decode(
            &header(opcode::SETATTR),
            Args::contiguous(s.as_bytes()),
            Proto::default(),
        )
        .unwrap();
        match r.op {
            Op::Setattr { set, kill_suidgid } => {
                assert!(kill_suidgid);
                assert_eq!(set.atime, Some(TimeSet::Now));
                assert_eq!(
                    set.mtime,
                    Some(TimeSet::At(Timestamp::from_timespec(-1, 500_000_000)))
                );
                assert_eq!(set.mode, None);
            }
            op => panic!("{op:?}"),
        }
    }

    #[test]
    fn times_stamped_with_the_ctime_sent_are_now() {
        let mut s = abi::fuse_setattr_in::new_zeroed();
        s.valid = fattr::MTIME | fattr::ATIME | fattr::CTIME;
        (s.ctime, s.ctimensec) = (1_700_000_000, 7);
        (s.atime, s.atimensec) = (1_700_000_000, 7);
        (s.mtime, s.mtimensec) = (1_700_000_000, 8);
        let set = |s: &abi::fuse_setattr_in| match decode(
            &header(opcode::SETATTR),
            Args::contiguous(s.as_bytes()),
            Proto::default(),
        )
        .unwrap()
        .op
        {
            Op::Setattr { set, .. } => set,
            op => panic!("{op:?}"),
        };
        let got = set(&s);
        assert_eq!(got.atime, Some(TimeSet::Now));
        assert_eq!(
            got.mtime,
            Some(TimeSet::At(Timestamp::from_timespec(1_700_000_000, 8)))
        );
        assert_eq!(got.ctime, Some(Timestamp::from_timespec(1_700_000_000, 7)));
        // Without a ctime sent, an explicit time is explicit whatever its value.
        s.valid = fattr::ATIME;
        assert!(matches!(set(&s).atime, Some(TimeSet::At(_))));
    }

    #[test]
    fn batch_forget_pairs() {
        let mut b = abi::fuse_batch_forget_in::new_zeroed();
        b.count = 2;
        let mut wire: Vec<u64> = vec![0; 5];
        wire[1] = 5;
        wire[2] = 1;
        wire[3] = 6;
        wire[4] = 2;
        let bytes = wire.as_bytes();
        let mut aligned = bytes.to_vec();
        aligned[..8].copy_from_slice(b.as_bytes());
        let words: Vec<u64> = <[u64]>::ref_from_bytes(&aligned).unwrap().to_vec();
        let r = decode(
            &header(opcode::BATCH_FORGET),
            Args::contiguous(words.as_bytes()),
            Proto::default(),
        )
        .unwrap();
        assert!(matches!(
            r.op,
            Op::BatchForget {
                forgets: [[5, 1], [6, 2]]
            }
        ));
    }
}
