//! memofs's virtio-fs transport: a vhost-user-fs device backend, so that a virtual machine's
//! guest mounts memofs with `mount -t virtiofs TAG DIR`.
//!
//! A VMM (QEMU's `vhost-user-fs-pci`, cloud-hypervisor, crosvm) connects to a unix socket,
//! shares the guest's memory and says where the device's virtqueues are (the vhost-user
//! protocol, served by `vhost-user-backend`). The guest's virtio-fs driver puts each FUSE
//! request on a queue as one descriptor chain: the request in its readable descriptors,
//! room for the reply in its writable ones. Queue 0 is the high-priority queue (FORGET,
//! INTERRUPT); the others carry every other request. This crate only moves bytes: [`chain`]
//! reads a request out of guest memory and writes the reply back; [`guest`] decodes it
//! with the same `memofs_proto::decode` the `/dev/fuse` channel uses, hands it to the
//! request layer (`memofs_request::Server`) and encodes the answer. The request layer learns
//! nothing about virtqueues.
//!
//! What differs from a `/dev/fuse` mount:
//! - INIT arrives as an ordinary request once the guest mounts; the request layer starts
//!   then, and again at the guest's next mount (the backend, and the files, stay);
//! - there is no notification queue in upstream Linux's virtio-fs, so the guest cannot be
//!   told of changes made on the host (a passthrough export's watcher has nowhere to send
//!   them): the cache timeouts bound how long the guest keeps what it cached;
//! - no FUSE passthrough: file data is copied through the queues;
//! - the device can move with its VM ([`migrate`]): with the mem backend, the files go too.
#![deny(missing_docs)]

mod ahead;
pub mod chain;
mod config;
pub mod guest;
mod guest_io;
mod migrate;
mod pool;

use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;

use memofs_core::Backend;
use vhost::vhost_user::message::{
    VhostTransferStateDirection, VhostTransferStatePhase, VhostUserProtocolFeatures,
    VhostUserVirtioFeatures,
};
use vhost_user_backend::bitmap::BitmapMmapRegion;
use vhost_user_backend::{VhostUserBackend, VhostUserDaemon, VringRwLock, VringT};
use virtio_bindings::bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::bindings::virtio_ring::{
    VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC,
};
use virtio_queue::QueueT;
use vm_memory::{GuestAddressSpace, GuestMemoryAtomic, GuestMemoryMmap};
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::event::{
    new_event_consumer_and_notifier, EventConsumer, EventFlag, EventNotifier,
};

pub use crate::ahead::Incoming;
pub use crate::chain::{Buffers, MAX_REQUEST};
pub use crate::config::{Tag, TagError};
pub use crate::guest::GuestFs;
pub use vhost::vhost_user::Listener;

/// Descriptors per queue the device accepts (QEMU asks for 1024 with `queue-size=1024`).
pub const QUEUE_SIZE: usize = 1024;
/// Request queues the device offers besides the high-priority one: QEMU's
/// `vhost-user-fs-pci` uses one unless told `num-request-queues=` (up to this many here);
/// each queue the VMM enables has a thread of its own.
pub const REQUEST_QUEUES: usize = 4;

/// The guest's memory as the device maps it: each region with a dirty bitmap that, while a
/// VMM migrates the VM (`VHOST_USER_SET_LOG_BASE`), marks in the VMM's log every page the
/// device writes (replies, used ring entries, READ data), so that the VMM copies those pages
/// again.
pub type GuestRam = GuestMemoryMmap<BitmapMmapRegion>;
/// The guest's memory as the VMM replaces it.
pub type SharedMemory = GuestMemoryAtomic<GuestRam>;
/// One of the device's queues.
pub type Vring = VringRwLock<SharedMemory>;

/// How the device serves its queues, besides the filesystem.
#[derive(Clone, Debug, Default)]
pub struct DeviceOptions {
    /// Worker threads that serve the request queues' chains (virtiofsd's
    /// `--thread-pool-size`); 0: each queue's own thread serves them.
    pub thread_pool: usize,
    /// The tag the device's configuration space names (virtiofsd's `--tag`), for a VMM that
    /// asks the device for it (`VHOST_USER_PROTOCOL_F_CONFIG`); without it the VMM names the
    /// tag itself, as QEMU does with `tag=`.
    pub tag: Option<Tag>,
}

/// The vhost-user-fs device: the queues' side of a [`GuestFs`].
pub struct VirtioFs<B: Backend> {
    guest_fs: Arc<GuestFs<B>>,
    options: DeviceOptions,
    /// The workers of `--thread-pool-size`, if any.
    pool: Option<pool::Pool>,
    /// Chains handed to the pool and not yet returned.
    in_flight: Arc<pool::InFlight>,
    mem: RwLock<Option<SharedMemory>>,
    event_idx: AtomicBool,
    /// Each queue thread's buffers (a thread serves one queue, see `queues_per_thread`).
    buffers: Vec<Mutex<Buffers>>,
    /// What stops each queue's thread when the VMM has gone (`vhost-user-backend` signals
    /// them when its handler is dropped).
    exits: Vec<(EventConsumer, EventNotifier)>,
    /// Held shared by each queue thread while it serves or hands out a batch, exclusively
    /// while a queue stops and while the state is transferred: a migration sees no request
    /// half done, and no request runs on a half-loaded filesystem.
    quiet: Arc<RwLock<()>>,
    /// The state transfer under way, whose end `CHECK_DEVICE_STATE` waits for.
    transfer: Mutex<Option<JoinHandle<io::Result<()>>>>,
    /// The data sent ahead of a migration's state, while it goes (see [`ahead`]).
    sending: Mutex<Option<ahead::Sending>>,
}

impl<B: Backend> VirtioFs<B> {
    /// A device serving `guest_fs`.
    pub fn new(guest_fs: GuestFs<B>, options: DeviceOptions) -> io::Result<VirtioFs<B>> {
        let queues = 1 + REQUEST_QUEUES;
        let pool = match options.thread_pool {
            0 => None,
            n => Some(pool::Pool::new(n)?),
        };
        Ok(VirtioFs {
            guest_fs: Arc::new(guest_fs),
            options,
            pool,
            in_flight: Arc::default(),
            mem: RwLock::new(None),
            event_idx: AtomicBool::new(false),
            buffers: (0..queues)
                .map(|_| Mutex::new(Buffers::default()))
                .collect(),
            exits: (0..queues)
                .map(|_| new_event_consumer_and_notifier(EventFlag::NONBLOCK))
                .collect::<io::Result<_>>()?,
            quiet: Arc::new(RwLock::new(())),
            transfer: Mutex::new(None),
            sending: Mutex::new(None),
        })
    }

    /// The source of a migration: sends the filesystem's data to the destination's server
    /// on `channel`, a socket connected to where it listens ([`VirtioFs::receive_ahead`]),
    /// from now until the VMM asks for the state, which then carries only what changed
    /// since it was sent. Returns once every file's data went once, with its bytes. A
    /// channel sent on before is ended first.
    pub fn send_ahead(&self, channel: File) -> io::Result<u64> {
        let sending = || self.sending.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(earlier) = sending().take() {
            let _ = earlier.finish();
        }
        let (started, rounds) = ahead::Sending::start(self.guest_fs.clone(), channel)?;
        *sending() = Some(started);
        match rounds.recv() {
            Ok(bytes) => Ok(bytes),
            // The sender ended before its first round: why.
            Err(_) => match sending().take().map(ahead::Sending::finish) {
                Some(Err(e)) => Err(e),
                _ => Err(io::Error::other(
                    "the channel ended before every file went once",
                )),
            },
        }
    }

    /// The destination of a migration: takes the data a source sends ahead on `incoming`
    /// ([`VirtioFs::send_ahead`]), kept for the state that names it.
    pub fn receive_ahead(&self, incoming: Incoming) -> io::Result<()> {
        ahead::receive(self.guest_fs.clone(), incoming)
    }

    /// The filesystem the guest mounts.
    pub fn guest_fs(&self) -> &GuestFs<B> {
        &self.guest_fs
    }

    /// Serves every chain the guest made available on `vring` (queue `thread`): on the
    /// queue's own thread with its buffers, or, for a request queue of a device with a pool,
    /// on the pool's workers. What a guest gets wrong here (a kick before its memory is known,
    /// a head index outside the queue) is logged and skipped: the queue's thread goes on
    /// serving, as it must for the chains that follow.
    fn process(&self, thread: usize, vring: &Vring) -> io::Result<()> {
        let Some(atomic) = self.mem.read().unwrap_or_else(|e| e.into_inner()).clone() else {
            log::warn!("queue {thread}: kicked before the guest's memory is known: ignored");
            return Ok(());
        };
        match &self.pool {
            Some(pool) if thread != 0 => {
                self.dispatch(pool, thread, vring, &atomic);
                Ok(())
            }
            _ => self.serve_here(thread, vring, &atomic),
        }
    }

    /// [`VirtioFs::process`] on the queue's thread: every chain answered in turn, the guest
    /// told once at the end.
    fn serve_here(&self, thread: usize, vring: &Vring, atomic: &SharedMemory) -> io::Result<()> {
        let mem = atomic.memory();
        let Some(bufs) = self.buffers.get(thread) else {
            return Err(io::Error::other(format!("no queue thread {thread}")));
        };
        let mut bufs = bufs.lock().unwrap_or_else(|e| e.into_inner());
        let _serving = self.quiet.read().unwrap_or_else(|e| e.into_inner());
        let mut used = false;
        loop {
            let chain = vring.get_mut().get_queue_mut().pop_descriptor_chain(&*mem);
            let Some(chain) = chain else { break };
            let head = chain.head_index();
            let written = chain::serve(&self.guest_fs, chain, &mut bufs);
            used |= give_back(thread, vring, head, written);
        }
        if used && vring.needs_notification().unwrap_or(true) {
            vring.signal_used_queue()?;
        }
        Ok(())
    }

    /// [`VirtioFs::process`] with a pool: each chain goes to a worker, which answers it,
    /// returns it and tells the guest if it asked.
    fn dispatch(&self, pool: &pool::Pool, thread: usize, vring: &Vring, atomic: &SharedMemory) {
        let _serving = self.quiet.read().unwrap_or_else(|e| e.into_inner());
        loop {
            let chain = vring
                .get_mut()
                .get_queue_mut()
                .pop_descriptor_chain(atomic.memory());
            let Some(chain) = chain else { break };
            self.in_flight.begin();
            let (fs, vring, in_flight) =
                (self.guest_fs.clone(), vring.clone(), self.in_flight.clone());
            pool.spawn(move |bufs| {
                let head = chain.head_index();
                let written = chain::serve(&fs, chain, bufs);
                if give_back(thread, &vring, head, written)
                    && vring.needs_notification().unwrap_or(true)
                {
                    if let Err(e) = vring.signal_used_queue() {
                        log::warn!("queue {thread}: the guest could not be told: {e}");
                    }
                }
                in_flight.end();
            });
        }
    }
}

/// Returns the chain at `head` to queue `thread`'s used ring with `written` bytes of reply;
/// whether it was.
fn give_back(thread: usize, vring: &Vring, head: u16, written: u32) -> bool {
    match vring.add_used(head, written) {
        Ok(()) => true,
        Err(e) => {
            log::warn!("queue {thread}: chain at head {head} not returned: {e}");
            false
        }
    }
}

impl<B: Backend + 'static> VhostUserBackend for VirtioFs<B> {
    type Bitmap = BitmapMmapRegion;
    type Vring = Vring;

    fn num_queues(&self) -> usize {
        1 + REQUEST_QUEUES
    }

    fn max_queue_size(&self) -> usize {
        QUEUE_SIZE
    }

    fn features(&self) -> u64 {
        (1 << VIRTIO_F_VERSION_1)
            | (1 << VIRTIO_RING_F_INDIRECT_DESC)
            | (1 << VIRTIO_RING_F_EVENT_IDX)
            | VhostUserVirtioFeatures::LOG_ALL.bits()
            | VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits()
    }

    fn protocol_features(&self) -> VhostUserProtocolFeatures {
        // LOG_SHMFD with LOG_ALL: the device logs what it writes into guest memory while the
        // VM migrates (QEMU refuses to migrate a vhost device without both).
        let base = VhostUserProtocolFeatures::MQ
            | VhostUserProtocolFeatures::LOG_SHMFD
            | VhostUserProtocolFeatures::REPLY_ACK
            | VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS
            | VhostUserProtocolFeatures::RESET_DEVICE;
        // Offered only where the backend can move: a VMM then refuses to migrate the VM
        // instead of losing its files.
        let base = match self.guest_fs.backend().migration() {
            Some(_) => base | VhostUserProtocolFeatures::DEVICE_STATE,
            None => base,
        };
        // The configuration space is the device's only where it was given a tag.
        match self.options.tag {
            Some(_) => base | VhostUserProtocolFeatures::CONFIG,
            None => base,
        }
    }

    /// The configuration space (`VHOST_USER_GET_CONFIG`): virtio-fs's tag and request queue
    /// count, for a VMM that asks the device (see [`DeviceOptions::tag`]).
    fn get_config(&self, offset: u32, size: u32) -> Vec<u8> {
        match &self.options.tag {
            Some(tag) => config::read(tag, offset, size),
            None => Vec::new(),
        }
    }

    /// The VMM stops a queue: the chains its thread and the pool have in hand are finished
    /// first, so that the index the VMM reads next counts only answered chains.
    fn stop_vring(&self, _queue: u32) -> io::Result<()> {
        let _quiet = self.quiet.write().unwrap_or_else(|e| e.into_inner());
        self.in_flight.wait_idle();
        Ok(())
    }

    /// Starts writing (`SAVE`) or reading (`LOAD`) the device's state on `file`, on a
    /// thread of its own (the VMM reads or writes the other end meanwhile).
    fn set_device_state_fd(
        &self,
        direction: VhostTransferStateDirection,
        phase: VhostTransferStatePhase,
        file: File,
    ) -> io::Result<Option<File>> {
        if phase != VhostTransferStatePhase::STOPPED {
            return Err(io::Error::other(
                "state transfer only with the queues stopped",
            ));
        }
        let mut transfer = self.transfer.lock().unwrap_or_else(|e| e.into_inner());
        if transfer.as_ref().is_some_and(|t| !t.is_finished()) {
            return Err(io::Error::other("a state transfer is already under way"));
        }
        let (fs, quiet) = (self.guest_fs.clone(), self.quiet.clone());
        // The VM is stopped: data sent ahead stops changing, and its channel ends.
        let sending = match direction {
            VhostTransferStateDirection::SAVE => self
                .sending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take(),
            _ => None,
        };
        let job = std::thread::Builder::new()
            .name("memofs-migrate".into())
            .spawn(move || {
                let _quiet = quiet.write().unwrap_or_else(|e| e.into_inner());
                if let Some(s) = sending {
                    let _ = s.finish();
                }
                let done = match direction {
                    VhostTransferStateDirection::SAVE => migrate::save(&fs, file),
                    VhostTransferStateDirection::LOAD => migrate::load(&fs, file),
                };
                if let Err(e) = &done {
                    log::error!("state transfer ({direction:?}) failed: {e}");
                }
                done
            })?;
        *transfer = Some(job);
        Ok(None)
    }

    /// How the last state transfer ended (waiting for it to end).
    fn check_device_state(&self) -> io::Result<()> {
        let job = self
            .transfer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        match job {
            None => Err(io::Error::other("no state transfer was started")),
            Some(job) => job
                .join()
                .map_err(|_| io::Error::other("the state transfer panicked"))?,
        }
    }

    /// The VMM reset the device (the guest rebooted, or its driver reset it): the guest's
    /// kernel is gone, and with it every reference and handle it held.
    fn reset_device(&self) {
        self.guest_fs.reset();
    }

    /// A thread per queue: the high-priority queue's FORGETs never wait behind a request.
    fn queues_per_thread(&self) -> Vec<u64> {
        (0..self.num_queues()).map(|q| 1 << q).collect()
    }

    fn exit_event(&self, thread_index: usize) -> Option<(EventConsumer, EventNotifier)> {
        let (consumer, notifier) = self.exits.get(thread_index)?;
        Some((consumer.try_clone().ok()?, notifier.try_clone().ok()?))
    }

    fn set_event_idx(&self, enabled: bool) {
        self.event_idx.store(enabled, Ordering::Relaxed);
    }

    fn update_memory(&self, mem: SharedMemory) -> io::Result<()> {
        *self.mem.write().unwrap_or_else(|e| e.into_inner()) = Some(mem);
        Ok(())
    }

    fn handle_event(
        &self,
        device_event: u16,
        evset: EventSet,
        vrings: &[Vring],
        thread_id: usize,
    ) -> io::Result<()> {
        if evset != EventSet::IN {
            return Err(io::Error::other(format!(
                "unexpected queue event {evset:?}"
            )));
        }
        // Each thread serves one queue (`queues_per_thread`): `vrings` holds it alone, and
        // `device_event` is its place there; the thread number is the queue's.
        let queue = thread_id;
        let Some(vring) = vrings.get(device_event as usize) else {
            return Err(io::Error::other(format!("no queue {queue}")));
        };
        if !self.event_idx.load(Ordering::Relaxed) {
            return self.process(thread_id, vring);
        }
        // With EVENT_IDX the guest is not told to kick again until the queue is seen empty
        // with notifications on: look once more after turning them on.
        // A ring the guest placed outside its memory fails here: logged, and the queue waits
        // for its next kick.
        loop {
            if let Err(e) = vring.disable_notification() {
                log::warn!("queue {queue}: {e}");
            }
            self.process(thread_id, vring)?;
            match vring.enable_notification() {
                Ok(true) => {}
                Ok(false) => return Ok(()),
                Err(e) => {
                    log::warn!("queue {queue}: {e}");
                    return Ok(());
                }
            }
        }
    }
}

/// Serves the VMM that connects on `listener` until it disconnects (as virtiofsd does: one
/// VMM, one guest, then the process ends). `VhostUserDaemon::serve` does the same from a
/// socket path, but makes the listener itself, replacing whatever is at the path: the
/// caller here has decided that already (a live server's socket is never taken over) or
/// was handed a listening descriptor (`--fd`).
pub fn serve<B: Backend + 'static>(
    device: Arc<VirtioFs<B>>,
    mut listener: Listener,
) -> io::Result<()> {
    let mut daemon = VhostUserDaemon::new(
        "memofs-virtiofs".into(),
        device,
        GuestMemoryAtomic::new(GuestRam::new()),
    )
    .map_err(|e| io::Error::other(format!("vhost-user daemon: {e}")))?;
    daemon
        .start(&mut listener)
        .map_err(|e| io::Error::other(format!("vhost-user connection: {e}")))?;
    let ended = daemon.wait();
    // Dropping the daemon drops its handler, which signals every queue thread's exit event
    // (`exit_event`) and joins the threads.
    drop(daemon);
    match ended {
        Ok(()) => Ok(()),
        // The VMM went away (it exited, or the guest powered off): the normal end.
        Err(vhost_user_backend::Error::HandleRequest(
            vhost::vhost_user::Error::Disconnected | vhost::vhost_user::Error::PartialMessage,
        )) => Ok(()),
        Err(e) => Err(io::Error::other(format!("vhost-user connection: {e}"))),
    }
}
