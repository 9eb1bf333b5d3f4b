//! A guest as a vhost-user-fs server sees one: guest memory in a memfd the server maps, two
//! split virtqueues laid out in it (the high-priority queue and one request queue), and the
//! vhost-user messages a VMM sends to set them up. Every byte of the rings and descriptors is
//! written here by hand, so that any of them can be wrong on purpose.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use memofs_proto::abi;
use vhost::vhost_user::message::{
    VhostTransferStateDirection, VhostTransferStatePhase, VhostUserProtocolFeatures,
    VhostUserVirtioFeatures,
};
use vhost::vhost_user::{Frontend, VhostUserFrontend};
use vhost::{VhostBackend, VhostUserDirtyLogRegion, VhostUserMemoryRegionInfo, VringConfigData};
use virtio_bindings::bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::bindings::virtio_ring::{
    VIRTIO_RING_F_INDIRECT_DESC, VRING_DESC_F_INDIRECT, VRING_DESC_F_NEXT, VRING_DESC_F_WRITE,
};
use vm_memory::{
    Bytes, FileOffset, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestRegionMmap,
};
use vmm_sys_util::eventfd::EventFd;
use zerocopy::{FromBytes, FromZeros, IntoBytes};

/// Guest memory.
pub const MEM_SIZE: usize = 64 << 20;
/// Entries per queue.
pub const QSIZE: u16 = 256;
/// The request queue (queue 0 is the high-priority one).
pub const REQ: usize = 1;
/// Where request buffers start (each chain of a batch gets [`SLOT`] bytes of request and as
/// much of reply room).
const BUF: u64 = 0x10_0000;
/// Bytes per request and per reply in a batch.
pub const SLOT: u64 = 0x2_0000;
/// Room for large requests and replies (a WRITE or READ of 1 MiB and more).
pub const BIG: u64 = 0x200_0000;
/// Where an indirect table goes.
const INDIRECT: u64 = 0x1_8000;

/// The page of a VMM's dirty log: one bit of the log per page of guest memory.
pub const PAGE: u64 = 4096;

/// Descriptor flags.
pub const NEXT: u16 = VRING_DESC_F_NEXT as u16;
pub const WRITE: u16 = VRING_DESC_F_WRITE as u16;
pub const INDIRECT_F: u16 = VRING_DESC_F_INDIRECT as u16;

/// One descriptor as the guest writes it.
#[derive(Clone, Copy, Debug)]
pub struct Desc {
    pub addr: u64,
    pub len: u32,
    pub flags: u16,
    pub next: u16,
}

/// One split virtqueue's rings in guest memory.
struct Ring {
    desc: u64,
    avail: u64,
    used: u64,
    /// The avail index the guest has published.
    avail_idx: u16,
    /// The used index the guest has read up to.
    used_idx: u16,
}

impl Ring {
    /// The rings from `base`, the used ring on a page of its own (the only page of a queue
    /// the server writes), as a VMM's dirty log sees pages.
    fn at(base: u64) -> Ring {
        let n = QSIZE as u64;
        let desc = base;
        let avail = desc + 16 * n;
        let used = (avail + 4 + 2 * n + 2 + PAGE - 1) & !(PAGE - 1);
        Ring {
            desc,
            avail,
            used,
            avail_idx: 0,
            used_idx: 0,
        }
    }
}

/// The guest: its memory, its queues, its connection to the server.
pub struct Guest {
    pub frontend: Frontend,
    pub mem: GuestMemoryMmap,
    /// The memory as the VMM describes it to a server.
    info: VhostUserMemoryRegionInfo,
    kicks: Vec<EventFd>,
    _calls: Vec<EventFd>,
    rings: Vec<Ring>,
    next_unique: u64,
    /// The protocol minor version the server answered INIT with.
    pub minor: u32,
    /// The virtio features agreed with the server.
    features: u64,
    /// The pages of guest memory this guest wrote itself (requests, descriptors, the avail
    /// ring) since [`Guest::log_all`] started counting.
    own_writes: RefCell<BTreeSet<u64>>,
}

/// The dirty log a VMM hands a server while it migrates the VM (`SET_LOG_BASE`): a bit per
/// page of guest memory, which the server sets for every page it writes.
pub struct DirtyLog {
    file: std::fs::File,
    /// Guest memory as it was when logging started.
    before: Vec<u8>,
}

fn other(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

/// Connects to a server and agrees on features and memory, as a VMM does before it sets up
/// queues.
fn handshake(socket: &Path, info: &VhostUserMemoryRegionInfo) -> io::Result<(Frontend, u64)> {
    let mut frontend = Frontend::connect(socket, 2).map_err(other)?;
    frontend.set_owner().map_err(other)?;
    let offered = frontend.get_features().map_err(other)?;
    let features = offered & GUEST_FEATURES;
    frontend.set_features(features).map_err(other)?;
    let pf = frontend.get_protocol_features().map_err(other)?;
    frontend
        .set_protocol_features(
            pf & (VhostUserProtocolFeatures::MQ
                | VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS
                | VhostUserProtocolFeatures::LOG_SHMFD
                | VhostUserProtocolFeatures::CONFIG
                | VhostUserProtocolFeatures::DEVICE_STATE),
        )
        .map_err(other)?;
    frontend
        .set_mem_table(std::slice::from_ref(info))
        .map_err(other)?;
    Ok((frontend, features))
}

/// The virtio features this guest's driver takes where the server offers them.
const GUEST_FEATURES: u64 = (1 << VIRTIO_F_VERSION_1)
    | (1 << VIRTIO_RING_F_INDIRECT_DESC)
    | VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits();

impl Guest {
    /// Connects to the server's socket and sets up memory and both queues, as QEMU's
    /// vhost-user-fs-pci does.
    pub fn connect(socket: &Path) -> io::Result<Guest> {
        let fd =
            nix::sys::memfd::memfd_create(c"memofs-guest", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
                .map_err(other)?;
        let file = std::fs::File::from(fd);
        file.set_len(MEM_SIZE as u64)?;
        let region =
            GuestRegionMmap::from_range(GuestAddress(0), MEM_SIZE, Some(FileOffset::new(file, 0)))
                .map_err(other)?;
        let info = VhostUserMemoryRegionInfo::from_guest_region(&region).map_err(other)?;
        let mem = GuestMemoryMmap::from_regions(vec![region]).map_err(other)?;
        let (frontend, features) = handshake(socket, &info)?;
        let mut guest = Guest {
            frontend,
            mem,
            info,
            kicks: Vec::new(),
            _calls: Vec::new(),
            rings: vec![Ring::at(0), Ring::at(0x8000)],
            next_unique: 1,
            minor: 0,
            features,
            own_writes: RefCell::default(),
        };
        guest.start_queues([0, 0])?;
        Ok(guest)
    }

    /// Sets up both queues, starting at the given avail indexes.
    fn start_queues(&mut self, bases: [u16; 2]) -> io::Result<()> {
        self.kicks.clear();
        self._calls.clear();
        for (q, base) in bases.into_iter().enumerate() {
            let kick = EventFd::new(libc::EFD_NONBLOCK).map_err(other)?;
            let call = EventFd::new(libc::EFD_NONBLOCK).map_err(other)?;
            let r = &self.rings[q];
            let config = VringConfigData {
                queue_max_size: QSIZE,
                queue_size: QSIZE,
                flags: 0,
                desc_table_addr: self.host_addr(r.desc),
                used_ring_addr: self.host_addr(r.used),
                avail_ring_addr: self.host_addr(r.avail),
                log_addr: None,
            };
            let f = &mut self.frontend;
            f.set_vring_num(q, QSIZE).map_err(other)?;
            f.set_vring_addr(q, &config).map_err(other)?;
            f.set_vring_base(q, base).map_err(other)?;
            f.set_vring_call(q, &call).map_err(other)?;
            f.set_vring_kick(q, &kick).map_err(other)?;
            f.set_vring_enable(q, true).map_err(other)?;
            self.kicks.push(kick);
            self._calls.push(call);
        }
        Ok(())
    }

    /// Live migration, as a VMM does it: stops both queues on the current server, connects
    /// to the server at `to` with the same guest memory, has the current server write its
    /// state into a pipe whose other end the new one reads, checks that both succeeded, and
    /// starts the queues on the new server where they stopped. Afterwards the old server's
    /// connection is closed (its process ends). A migration that fails leaves the guest on
    /// the old server, its queues started again where they stopped (as a VMM resumes a VM
    /// whose migration failed).
    pub fn migrate(&mut self, to: &Path) -> io::Result<()> {
        let mut bases = [0u16; 2];
        for (q, base) in bases.iter_mut().enumerate() {
            *base = self.frontend.get_vring_base(q).map_err(other)? as u16;
        }
        match self.transfer(to) {
            Ok(dest) => {
                let old = std::mem::replace(&mut self.frontend, dest);
                drop(old);
                self.start_queues(bases)
            }
            Err(e) => {
                self.start_queues(bases)?;
                Err(e)
            }
        }
    }

    /// The state transfer of [`Guest::migrate`]: the new server's frontend, its state loaded.
    fn transfer(&mut self, to: &Path) -> io::Result<Frontend> {
        let (dest, _) = handshake(to, &self.info)?;
        let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(other)?;
        let save = VhostTransferStateDirection::SAVE;
        let load = VhostTransferStateDirection::LOAD;
        let stopped = VhostTransferStatePhase::STOPPED;
        dest.set_device_state_fd(load, stopped, read)
            .map_err(|e| other(format!("LOAD refused: {e}")))?;
        self.frontend
            .set_device_state_fd(save, stopped, write)
            .map_err(|e| other(format!("SAVE refused: {e}")))?;
        let saved = self.frontend.check_device_state();
        let loaded = dest.check_device_state();
        saved.map_err(|e| other(format!("the source's save failed: {e}")))?;
        loaded.map_err(|e| other(format!("the destination's load failed: {e}")))?;
        Ok(dest)
    }

    /// The address in this process of guest address `gpa` (what a VMM gives the rings as).
    fn host_addr(&self, gpa: u64) -> u64 {
        self.mem
            .get_host_address(GuestAddress(gpa))
            .expect("inside guest memory") as u64
    }

    /// A fresh request id.
    pub fn unique(&mut self) -> u64 {
        self.next_unique += 1;
        self.next_unique
    }

    /// Writes `bytes` at guest address `at`.
    pub fn write(&self, at: u64, bytes: &[u8]) {
        self.mem
            .write_slice(bytes, GuestAddress(at))
            .expect("inside guest memory");
        self.wrote(at, bytes.len());
    }

    /// Notes that this guest wrote `len` bytes at `at` (see [`Guest::unlogged_writes`]).
    fn wrote(&self, at: u64, len: usize) {
        let last = at + (len.max(1) as u64 - 1);
        self.own_writes.borrow_mut().extend(at / PAGE..=last / PAGE);
    }

    /// Turns on the server's dirty log as a VMM does when it starts to migrate the VM
    /// (`VHOST_F_LOG_ALL` and a shared log of a bit per page, `SET_LOG_BASE`): from here the
    /// server must mark every page of guest memory it writes.
    pub fn log_all(&mut self) -> io::Result<DirtyLog> {
        if self.features & VhostUserVirtioFeatures::LOG_ALL.bits() == 0 {
            let offered = self.frontend.get_features().map_err(other)?;
            if offered & VhostUserVirtioFeatures::LOG_ALL.bits() == 0 {
                return Err(other("the server does not offer VHOST_F_LOG_ALL"));
            }
            self.features |= VhostUserVirtioFeatures::LOG_ALL.bits();
            self.frontend.set_features(self.features).map_err(other)?;
        }
        let fd =
            nix::sys::memfd::memfd_create(c"memofs-log", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
                .map_err(other)?;
        let file = std::fs::File::from(fd);
        let size = (MEM_SIZE as u64 / PAGE).div_ceil(8).next_multiple_of(PAGE);
        file.set_len(size)?;
        let region = VhostUserDirtyLogRegion {
            mmap_size: size,
            mmap_offset: 0,
            mmap_handle: file.as_raw_fd(),
        };
        self.frontend
            .set_log_base(0, Some(region))
            .map_err(|e| other(format!("SET_LOG_BASE refused: {e}")))?;
        self.own_writes.borrow_mut().clear();
        Ok(DirtyLog {
            file,
            before: self.read(0, MEM_SIZE),
        })
    }

    /// The pages of guest memory that changed since `log` started, that this guest did not
    /// write and the server did not mark (a VMM would have copied them stale), and how many
    /// pages the server marked.
    pub fn unlogged_writes(&self, log: &DirtyLog) -> io::Result<(Vec<u64>, usize)> {
        let mut bits = vec![0u8; (MEM_SIZE as u64 / PAGE).div_ceil(8) as usize];
        log.file.read_exact_at(&mut bits, 0)?;
        let marked = |page: u64| bits[(page / 8) as usize] & (1 << (page % 8)) != 0;
        let now = self.read(0, MEM_SIZE);
        let own = self.own_writes.borrow();
        let unlogged = (0..MEM_SIZE as u64 / PAGE)
            .filter(|&p| {
                let at = (p * PAGE) as usize..((p + 1) * PAGE) as usize;
                now[at.clone()] != log.before[at] && !own.contains(&p) && !marked(p)
            })
            .collect();
        let count = (0..MEM_SIZE as u64 / PAGE).filter(|&p| marked(p)).count();
        Ok((unlogged, count))
    }

    /// Reads `len` bytes at guest address `at`.
    pub fn read(&self, at: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.mem
            .read_slice(&mut v, GuestAddress(at))
            .expect("inside guest memory");
        v
    }

    /// Writes descriptor `index` of queue `q`'s table.
    pub fn put_desc(&self, q: usize, index: u16, d: Desc) {
        let mut raw = [0u8; 16];
        raw[..8].copy_from_slice(&d.addr.to_le_bytes());
        raw[8..12].copy_from_slice(&d.len.to_le_bytes());
        raw[12..14].copy_from_slice(&d.flags.to_le_bytes());
        raw[14..16].copy_from_slice(&d.next.to_le_bytes());
        self.write(self.rings[q].desc + 16 * index as u64, &raw);
    }

    /// Writes an indirect table of `descs` and returns the descriptor that names it.
    pub fn indirect(&self, descs: &[Desc]) -> Desc {
        for (i, d) in descs.iter().enumerate() {
            let mut raw = [0u8; 16];
            raw[..8].copy_from_slice(&d.addr.to_le_bytes());
            raw[8..12].copy_from_slice(&d.len.to_le_bytes());
            raw[12..14].copy_from_slice(&d.flags.to_le_bytes());
            raw[14..16].copy_from_slice(&d.next.to_le_bytes());
            self.write(INDIRECT + 16 * i as u64, &raw);
        }
        Desc {
            addr: INDIRECT,
            len: 16 * descs.len() as u32,
            flags: INDIRECT_F,
            next: 0,
        }
    }

    /// Makes the chains starting at `heads` available on queue `q` and kicks it.
    pub fn publish(&mut self, q: usize, heads: &[u16]) {
        let r = &self.rings[q];
        let mut idx = r.avail_idx;
        for &h in heads {
            let slot = r.avail + 4 + 2 * (idx % QSIZE) as u64;
            self.write(slot, &h.to_le_bytes());
            idx = idx.wrapping_add(1);
        }
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        self.write(r.avail + 2, &idx.to_le_bytes());
        self.rings[q].avail_idx = idx;
        self.kick(q);
    }

    /// Publishes an avail index of the guest's choosing, without chains behind it.
    pub fn publish_index(&mut self, q: usize, idx: u16) {
        self.write(self.rings[q].avail + 2, &idx.to_le_bytes());
        self.rings[q].avail_idx = idx;
        self.kick(q);
    }

    /// The avail index the guest has published on queue `q`.
    pub fn avail_index(&self, q: usize) -> u16 {
        self.rings[q].avail_idx
    }

    pub fn kick(&self, q: usize) {
        let _ = self.kicks[q].write(1);
    }

    /// The server's used index on queue `q`.
    pub fn used_index(&self, q: usize) -> u16 {
        let raw: u16 = self
            .mem
            .read_obj(GuestAddress(self.rings[q].used + 2))
            .expect("inside");
        u16::from_le(raw)
    }

    /// Waits up to `limit` for `n` more used entries on queue `q`; returns them (id, len),
    /// or what came by then.
    pub fn wait_used(&mut self, q: usize, n: u16, limit: Duration) -> Vec<(u32, u32)> {
        let deadline = Instant::now() + limit;
        let target = self.rings[q].used_idx.wrapping_add(n);
        while self.used_index(q) != target && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(20));
        }
        let now = self.used_index(q);
        let mut got = Vec::new();
        let r = &self.rings[q];
        let mut i = r.used_idx;
        while i != now {
            let at = r.used + 4 + 8 * (i % QSIZE) as u64;
            let id: u32 = self.mem.read_obj(GuestAddress(at)).expect("inside");
            let len: u32 = self.mem.read_obj(GuestAddress(at + 4)).expect("inside");
            got.push((u32::from_le(id), u32::from_le(len)));
            i = i.wrapping_add(1);
        }
        self.rings[q].used_idx = now;
        got
    }

    /// Sends the requests `reqs` at once on queue `q` (each its own chain: its bytes in one
    /// readable descriptor, `room` bytes of writable descriptor) and returns each reply (in
    /// order of the chains; `None` for a chain not returned within `limit`).
    pub fn batch(
        &mut self,
        q: usize,
        reqs: &[Vec<u8>],
        room: u32,
        limit: Duration,
    ) -> Vec<Option<Vec<u8>>> {
        assert!(reqs.len() <= QSIZE as usize / 2 && room as u64 <= SLOT);
        let mut heads = Vec::new();
        for (i, req) in reqs.iter().enumerate() {
            let (at, reply) = (BUF + 2 * SLOT * i as u64, BUF + 2 * SLOT * i as u64 + SLOT);
            let len = req.len().min(SLOT as usize);
            self.write(at, &req[..len]);
            let head = 2 * i as u16;
            self.put_desc(
                q,
                head,
                Desc {
                    addr: at,
                    len: len as u32,
                    flags: NEXT,
                    next: head + 1,
                },
            );
            self.put_desc(
                q,
                head + 1,
                Desc {
                    addr: reply,
                    len: room,
                    flags: WRITE,
                    next: 0,
                },
            );
            heads.push(head);
        }
        self.publish(q, &heads);
        let used = self.wait_used(q, reqs.len() as u16, limit);
        let mut out = vec![None; reqs.len()];
        for (id, len) in used {
            let i = (id / 2) as usize;
            if id % 2 == 0 && i < out.len() {
                let reply = BUF + 2 * SLOT * i as u64 + SLOT;
                out[i] = Some(self.read(reply, (len as u64).min(SLOT) as usize));
            }
        }
        out
    }

    /// One request on the request queue with `room` bytes for its reply: the reply, or
    /// `None` when the chain did not come back within 5 s.
    pub fn request(&mut self, req: &[u8], room: u32) -> Option<Vec<u8>> {
        if req.len() as u64 > SLOT || room as u64 > SLOT {
            return self.big_request(req, room);
        }
        self.batch(REQ, &[req.to_vec()], room, Duration::from_secs(5))
            .pop()
            .flatten()
    }

    /// A request or reply larger than a batch slot, from the big area.
    fn big_request(&mut self, req: &[u8], room: u32) -> Option<Vec<u8>> {
        let (at, reply) = (BIG, BIG + 0x80_0000);
        self.write(at, req);
        self.put_desc(
            REQ,
            0,
            Desc {
                addr: at,
                len: req.len() as u32,
                flags: NEXT,
                next: 1,
            },
        );
        self.put_desc(
            REQ,
            1,
            Desc {
                addr: reply,
                len: room,
                flags: WRITE,
                next: 0,
            },
        );
        self.publish(REQ, &[0]);
        let used = self.wait_used(REQ, 1, Duration::from_secs(10));
        used.first()
            .map(|&(_, len)| self.read(reply, (len as usize).min(room as usize)))
    }

    /// A FUSE request: header with `opcode`, `nodeid` and a new unique, then `body`.
    pub fn fuse(&mut self, opcode: u32, nodeid: u64, body: &[u8]) -> Vec<u8> {
        self.fuse_as(opcode, nodeid, body, (0, 0))
    }

    /// [`Guest::fuse`], sent by the guest's user and group `(uid, gid)`.
    pub fn fuse_as(&mut self, opcode: u32, nodeid: u64, body: &[u8], ids: (u32, u32)) -> Vec<u8> {
        let mut h = abi::fuse_in_header::new_zeroed();
        h.len = (std::mem::size_of::<abi::fuse_in_header>() + body.len()) as u32;
        h.opcode = opcode;
        h.unique = self.unique();
        h.nodeid = nodeid;
        (h.uid, h.gid) = ids;
        let mut v = h.as_bytes().to_vec();
        v.extend_from_slice(body);
        v
    }

    /// Sends a FUSE request and returns (error, body) of its reply.
    pub fn call(
        &mut self,
        opcode: u32,
        nodeid: u64,
        body: &[u8],
        room: u32,
    ) -> Option<(i32, Vec<u8>)> {
        let req = self.fuse(opcode, nodeid, body);
        self.request(&req, room).and_then(|r| split_reply(&r))
    }

    /// CREATE of `name` (read-write, 0644) in the root: its node id and handle, or the
    /// error (0 when the server did not answer).
    pub fn create(&mut self, name: &str) -> Result<(u64, u64), i32> {
        let c = abi::fuse_create_in {
            flags: libc::O_RDWR as u32,
            mode: 0o644,
            ..FromZeros::new_zeroed()
        };
        let mut body = c.as_bytes().to_vec();
        body.extend(name.as_bytes());
        body.push(0);
        match self.call(abi::opcode::CREATE, 1, &body, 4096) {
            Some((0, r)) if r.len() >= 144 => Ok((
                u64::from_le_bytes(r[..8].try_into().expect("8 bytes")),
                u64::from_le_bytes(r[128..136].try_into().expect("8 bytes")),
            )),
            Some((e, _)) => Err(e),
            None => Err(0),
        }
    }

    /// INIT, as a guest's kernel starts.
    pub fn init(&mut self) -> io::Result<()> {
        self.init_offering(0).map(drop)
    }

    /// INIT offering the capability bits `offered` (as a kernel's `flags` and `flags2`):
    /// the bits the server granted.
    pub fn init_offering(&mut self, offered: u64) -> io::Result<u64> {
        let mut i = abi::fuse_init_in::new_zeroed();
        i.major = abi::KERNEL_VERSION;
        i.minor = abi::KERNEL_MINOR_VERSION;
        i.max_readahead = 1 << 20;
        i.flags = offered as u32 | abi::init::INIT_EXT as u32;
        i.flags2 = (offered >> 32) as u32;
        let (err, body) = self
            .call(abi::opcode::INIT, 0, i.as_bytes(), 4096)
            .ok_or_else(|| other("INIT not answered"))?;
        if err != 0 {
            return Err(other(format!("INIT answered {err}")));
        }
        let out = abi::fuse_init_out::read_from_prefix(&body)
            .map_err(|_| other("short INIT reply"))?
            .0;
        self.minor = out.minor;
        Ok(out.flags as u64 | (out.flags2 as u64) << 32)
    }

    /// The device's configuration space as the server answers `GET_CONFIG` (`None` where it
    /// does not offer `VHOST_USER_PROTOCOL_F_CONFIG`).
    pub fn config(&mut self, size: u32) -> io::Result<Option<Vec<u8>>> {
        let offered = self.frontend.get_protocol_features().map_err(other)?;
        if !offered.contains(VhostUserProtocolFeatures::CONFIG) {
            return Ok(None);
        }
        let buf = vec![0u8; size as usize];
        let flags = vhost::vhost_user::message::VhostUserConfigFlags::WRITABLE;
        let (_, payload) = self
            .frontend
            .get_config(0, size, flags, &buf)
            .map_err(other)?;
        Ok(Some(payload.to_vec()))
    }

    /// Whether the server answers a valid request: GETATTR of the root.
    pub fn answers(&mut self) -> bool {
        let g = abi::fuse_getattr_in::new_zeroed();
        matches!(
            self.call(abi::opcode::GETATTR, 1, g.as_bytes(), 4096),
            Some((0, _))
        )
    }
}

/// A reply's (error, body), if it has a whole header whose length is the reply's.
pub fn split_reply(r: &[u8]) -> Option<(i32, Vec<u8>)> {
    let (h, body) = abi::fuse_out_header::read_from_prefix(r).ok()?;
    (h.len as usize == r.len()).then(|| (h.error, body.to_vec()))
}
