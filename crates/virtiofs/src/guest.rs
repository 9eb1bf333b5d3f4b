//! One guest mount's requests: the INIT handshake, the request layer it starts, and the
//! answer to every later request, as bytes in and bytes out (no virtqueue here).

use std::ffi::OsStr;
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::{Arc, RwLock};

use memofs_core::options::Want;
use memofs_core::plan::{MountPlan, Passthrough};
use memofs_core::{Backend, Errno, Ino};
use memofs_proto::abi;
use memofs_proto::decode::{decode, Args, Proto};
use memofs_proto::encode::{reply_bound, Encoder, ReplySink};
use memofs_proto::init::{self, MAX_WRITE};
use memofs_request::kernel::BackingWrites;
use memofs_request::{Handled, Kernel, Op, Payload, ReplyOut, Server, Stats};
use zerocopy::FromBytes;

/// The guest's mount as it moves with its VM: its INIT's arguments, the answer, and its
/// opens to execute files, (inode, handle, count).
pub(crate) type Session = (Vec<u8>, Vec<u8>, Vec<(u64, u64, u32)>);

/// The kernel side of a virtio-fs connection: upstream Linux's virtio-fs driver has no
/// notification queue and takes no backing files, so every notification fails with
/// `ENOSYS` (counted by the request layer as failed, never retried for the epoch) and the
/// guest's cache timeouts are what ends what it caches.
struct NoNotify;

fn unsupported<T>() -> io::Result<T> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}

impl Kernel for NoNotify {
    fn open_backing(&self, _fd: BorrowedFd<'_>, _writes: BackingWrites) -> io::Result<u32> {
        unsupported()
    }
    fn close_backing(&self, _id: u32) -> io::Result<()> {
        unsupported()
    }
    fn inval_entry(&self, _parent: Ino, _name: &OsStr, _expire_only: bool) -> io::Result<()> {
        unsupported()
    }
    fn delete(&self, _parent: Ino, _child: Ino, _name: &OsStr) -> io::Result<()> {
        unsupported()
    }
    fn inval_inode(&self, _ino: Ino, _offset: i64, _len: i64) -> io::Result<()> {
        unsupported()
    }
    fn inc_epoch(&self) -> io::Result<()> {
        unsupported()
    }
}

/// The reply's header.
pub(crate) const OUT_HEADER: usize = std::mem::size_of::<abi::fuse_out_header>();

/// The request layer of the guest's current mount, from its INIT.
struct Mounted<B: Backend> {
    server: Server<B>,
    proto: Proto,
    /// The INIT request's arguments as the guest sent them, and the answer: what a server
    /// this mount moves to starts its own from (see [`crate::migrate`]).
    init: Vec<u8>,
    reply: Vec<u8>,
}

/// The filesystem a guest mounts over the device: the backend, the options, and the request
/// layer the guest's INIT starts.
pub struct GuestFs<B: Backend> {
    backend: Arc<B>,
    plan: MountPlan,
    stats: Arc<Stats>,
    mounted: RwLock<Option<Arc<Mounted<B>>>>,
}

impl<B: Backend> GuestFs<B> {
    /// The filesystem of `backend` under `plan` (which loses what virtio-fs cannot carry: FUSE
    /// passthrough, io_uring, the CPU latency request), counting into `stats`.
    pub fn new(backend: Arc<B>, mut plan: MountPlan, stats: Arc<Stats>) -> GuestFs<B> {
        plan.passthrough = Passthrough::Off;
        plan.io_uring = Want::Off;
        plan.cpu_latency = Want::Off;
        GuestFs {
            backend,
            plan,
            stats,
            mounted: RwLock::new(None),
        }
    }

    /// The mount plan in effect.
    pub fn plan(&self) -> &MountPlan {
        &self.plan
    }

    /// The counters.
    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<B> {
        &self.backend
    }

    fn mounted(&self) -> Option<Arc<Mounted<B>>> {
        self.mounted
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Answers the request `h` with arguments `body` into `out` (left empty for requests
    /// that take no reply), whose chain has `room` bytes for the reply. A WRITE's data may
    /// have been left in guest memory (`elsewhere`). `scratch` is reused between calls.
    pub(crate) fn answer(
        &self,
        h: &abi::fuse_in_header,
        body: &[u8],
        elsewhere: Option<&dyn Payload>,
        room: usize,
        scratch: &mut Vec<u8>,
        out: &mut dyn ReplySink,
    ) {
        if h.opcode == abi::opcode::INIT {
            self.init(h, body, scratch, out);
            return;
        }
        let Some(mounted) = self.mounted() else {
            // Nothing but INIT before INIT (as the kernel's own FUSE device answers).
            Encoder::new(h.unique, scratch, out).error(Errno::EIO);
            return;
        };
        let args = match elsewhere {
            Some(data) => Args::write_elsewhere(body, data),
            None => Args::contiguous(body),
        };
        let req = match decode(h, args, mounted.proto) {
            Ok(r) => r,
            Err(e) => {
                log::warn!("malformed request (opcode {}): {e:?}", h.opcode);
                Encoder::new(h.unique, scratch, out).error(e);
                return;
            }
        };
        // The kernel never asks for more than a request's worth (INIT's max_pages); a guest
        // may, and would make the server allocate it.
        let asked = match req.op {
            Op::Read { size, .. }
            | Op::Readdir { size, .. }
            | Op::Getxattr { size, .. }
            | Op::Listxattr { size } => size,
            _ => 0,
        };
        if asked > MAX_WRITE {
            log::warn!("request for {asked} bytes (opcode {}) refused", h.opcode);
            Encoder::new(h.unique, scratch, out).error(Errno::EINVAL);
            return;
        }
        // A reply that could not be given back is refused before the work is done: a guest
        // that learns nothing of a LOOKUP or CREATE would leave its reference or handle
        // behind.
        let needed = OUT_HEADER + reply_bound(&req.op);
        if needed > room && req.op.wants_reply() {
            log::warn!(
                "{room} bytes of room for a reply of up to {needed} (opcode {}): refused",
                h.opcode
            );
            Encoder::new(h.unique, scratch, out).error(Errno::EINVAL);
            return;
        }
        let mut enc = Encoder::new(req.unique, scratch, out);
        if let Op::Readdir { size, plus, .. } = req.op {
            enc = enc.for_readdir(size, plus);
        }
        // A blocking request (fsync) runs here: its queue waits for it, the others do not.
        if let Handled::Blocking(job) = mounted.server.handle(&req, &mut enc) {
            let error = job().err().map_or(0, |e: Errno| -e.0);
            out.send(h.unique, error, &[]);
        }
        if h.opcode == abi::opcode::DESTROY {
            // The guest unmounts: its kernel ends the connection before it evicts its
            // inodes or releases its files, so their FORGETs and RELEASEs never come.
            self.reset();
        }
    }

    /// INIT: negotiates from the plan and starts a request layer for this guest mount (a
    /// guest that mounts again gets a new one; the backend and its files stay).
    fn init(
        &self,
        h: &abi::fuse_in_header,
        body: &[u8],
        scratch: &mut Vec<u8>,
        out: &mut dyn ReplySink,
    ) {
        match self.session(body) {
            Ok(mounted) => {
                out.send(h.unique, 0, &[&mounted.reply]);
                self.mount(mounted);
            }
            Err(e) => {
                log::warn!("INIT: {e}");
                Encoder::new(h.unique, scratch, out).error(Errno::EIO);
            }
        }
    }

    /// The request layer an INIT with arguments `body` starts.
    fn session(&self, body: &[u8]) -> Result<Mounted<B>, String> {
        let i = init::init_in(body);
        let negotiated = init::negotiate(&i, &self.plan).map_err(|e| format!("refused: {e}"))?;
        let plan = init::in_effect(self.plan.clone(), negotiated.granted);
        let mut server = Server::new(self.backend.clone(), plan, self.stats.clone());
        server
            .start(negotiated.granted, Arc::new(NoNotify))
            .map_err(|e| format!("the request layer could not start: {e}"))?;
        Ok(Mounted {
            server,
            proto: negotiated.proto,
            init: body.to_vec(),
            reply: negotiated.reply.to_vec(),
        })
    }

    /// Makes `mounted` the guest's mount.
    fn mount(&self, mounted: Mounted<B>) {
        let earlier = self
            .mounted
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .replace(Arc::new(mounted));
        if earlier.is_some() {
            // A guest that rebooted without unmounting holds none of the earlier mount's
            // inodes or open files any more.
            self.drop_references();
        }
    }

    /// What a guest can tell apart of this server's settings, as `name=value` lines: a VM
    /// moves only to a server whose settings are the same
    /// ([`MountPlan::guest_visible`](memofs_core::plan::MountPlan::guest_visible)).
    pub(crate) fn guest_settings(&self) -> String {
        self.plan
            .guest_visible()
            .into_iter()
            .map(|(k, v)| format!("{k}={v}\n"))
            .collect()
    }

    /// Refuses a VM whose source server had `theirs` ([`GuestFs::guest_settings`]) where
    /// this one differs, naming the first setting that does.
    pub(crate) fn check_settings(&self, theirs: &str) -> Result<(), String> {
        let ours = self.guest_settings();
        for (mine, other) in ours.lines().zip(theirs.lines()) {
            if mine != other {
                let name = mine.split('=').next().unwrap_or_default();
                return Err(format!(
                    "the source served the guest with {other}, this server with {mine}: start \
                     it with the options of the one the guest moves from ({name})"
                ));
            }
        }
        if ours.lines().count() != theirs.lines().count() {
            return Err("the source's settings are another memofs release's".into());
        }
        Ok(())
    }

    /// The guest's mount as a state stream carries it: its INIT's arguments and answer.
    pub(crate) fn saved_session(&self) -> Option<Session> {
        let m = self.mounted()?;
        Some((m.init.clone(), m.reply.clone(), m.server.exec_opens()))
    }

    /// Takes on the guest's mount from the server it moves from: the request layer its INIT
    /// started there, started here from the same arguments. The answer must be the one the
    /// guest got, or this server's options differ from that one's.
    /// `exec_opens` are the guest's opens to execute a file that it holds there.
    pub(crate) fn resume_session(
        &self,
        init: &[u8],
        reply: &[u8],
        exec_opens: &[(u64, u64, u32)],
    ) -> Result<(), String> {
        let mounted = self.session(init)?;
        if mounted.reply != reply {
            return Err(
                "the guest's INIT gets another answer here: start this server with the options \
                 of the one the guest moves from"
                    .into(),
            );
        }
        mounted.server.restore_exec_opens(exec_opens);
        *self.mounted.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(mounted));
        Ok(())
    }

    /// The guest's kernel is gone (it unmounted, or its device was reset): nothing more is
    /// served until its next INIT, and everything it held is given up.
    pub fn reset(&self) {
        let earlier = self
            .mounted
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        drop(earlier);
        self.drop_references();
    }

    /// Every lookup reference and open handle of the guest's kernel, given up: the files it
    /// deleted while it held them go, with their data and host descriptors.
    fn drop_references(&self) {
        self.backend.release_all();
        self.backend.forget_all();
    }
}

/// Reads a request header from the front of `bytes`.
pub(crate) fn header(bytes: &[u8]) -> Option<abi::fuse_in_header> {
    abi::fuse_in_header::read_from_prefix(bytes)
        .ok()
        .map(|(h, _)| h)
}
