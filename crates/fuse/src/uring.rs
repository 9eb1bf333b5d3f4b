//! The io_uring channel (FUSE over io_uring, Linux 6.14+, module parameter
//! `fuse.enable_uring`).
//!
//! After INIT grants `FUSE_OVER_IO_URING`, the kernel holds every request until each possible
//! CPU has a queue with at least one registered ring entry, then delivers requests through
//! the entries of the queue of the CPU that issued them. Each queue here is one thread with
//! its own ring (128-byte SQEs) and [`DEPTH`] entries; an entry is a header buffer
//! (`fuse_uring_req_header`: the request's `fuse_in_header`, its per-opcode struct, and the
//! commit id and payload size) and a payload buffer (names, data). A thread registers its
//! entries (`FUSE_IO_URING_CMD_REGISTER`), and for each completion decodes the request with
//! the decoder `/dev/fuse` uses, hands it to the request layer, writes the reply into the same
//! entry and commits it, which also asks for the next request on it
//! (`FUSE_IO_URING_CMD_COMMIT_AND_FETCH`): one system call per request, no wakeup of another
//! thread. FORGET, INTERRUPT and notifications still use `/dev/fuse`, so one `/dev/fuse`
//! thread keeps reading (see [`crate::KernelMount::serve`]).
//!
//! A queue's thread is pinned to its CPU, and after committing answers it polls its
//! completion queue for up to the `busy_poll=` window, yielding the CPU between looks, before
//! it sleeps in `io_uring_enter(2)`; as on `/dev/fuse` (see [`crate::busy_poll`]) only while
//! requests keep arriving within a window of the previous answer. A thread asleep leaves its
//! vCPU idle, and the kernel then wakes the caller there rather than on the CPU it issued
//! from: its next request lands on the other CPU's queue, and every request pays for waking
//! an idle vCPU (figures in docs/performance.md). A request that finds the thread asleep
//! arrives later than it would have, so up to [`QUICK`] windows count as quick here.
//!
//! Large READs are the exception to the pinning. A file read in sequence reaches the server
//! as readahead, which the reader does not wait for page by page: on the reader's CPU, the
//! thread's copy and the kernel's copy out of the ring entry run only when the reader stops,
//! and never beside it. So while a queue serves READs of at least [`SPREAD_READ`] bytes its
//! thread may run on any CPU the process may use (the kernel wakes it where a CPU is idle);
//! the next other request pins it again ([`Placement`]).
//!
//! Requests that may wait for a disk (FSYNC) run on [`crate::blocking`]'s threads; their
//! answer comes back to the queue's thread through a channel and an eventfd the ring polls
//! ([`Waker`]), because only that thread submits to its ring. Requests the request layer lets
//! a transport answer first ([`Op::answered_first`]: RELEASE) go to those threads too, after
//! their answer is committed, so the work need not take the CPU of the caller, who is
//! already on to its next file (over `/dev/fuse` it runs on another thread anyway). At most
//! [`LATER_MAX`] of them wait there at once: a release still to do holds the open's
//! descriptors, and when those threads fall behind (a loaded machine runs the queue threads
//! first) an opener that keeps going would spend the descriptor budget on files it closed
//! long ago. Past that the queue's thread does the release itself before answering.
//!
//! The kernel may write into a queue's buffers for as long as it holds one of its ring
//! entries, so the ring and the buffers have one owner ([`Entries`]) that closes the ring
//! first and frees the buffers only once the kernel has given every entry back.

use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use memofs_core::{Backend, Errno};
use memofs_request::stats::Stats;
use memofs_request::{Handled, Op, ReplyOut, Request, Server};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

use crate::abi;
use crate::blocking::Blocking;
use crate::busy_poll::Payoff;
use crate::cpu_latency::CpuLatency;
use memofs_proto::decode::{decode, Args, Proto};
use memofs_proto::encode::{Encoder, ReplySink};
use memofs_proto::init::MAX_WRITE;

/// Ring entries per queue: requests one CPU's callers can have at the server at once.
pub const DEPTH: usize = 4;
/// `FUSE_IO_URING_CMD_REGISTER`.
const CMD_REGISTER: u32 = 1;
/// `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`.
const CMD_COMMIT_AND_FETCH: u32 = 2;
/// A payload buffer: the largest request or reply (`max(8192, max_write, max_pages * 4096)`).
const PAYLOAD: usize = MAX_WRITE as usize;
/// Counts a request answered first as done when dropped (also if its work panics).
struct LaterDone<'a>(&'a AtomicUsize);

impl Drop for LaterDone<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The `user_data` of the eventfd poll that brings answers from other threads.
const WAKE: u64 = u64::MAX;

/// Why this process cannot create the rings FUSE-over-io_uring needs, if it cannot: a
/// container's seccomp profile commonly refuses `io_uring_setup`. Asked before INIT asks the
/// kernel for io_uring, since once INIT grants it the kernel holds every request until the
/// rings are registered, and a server that cannot make them would hang its mount.
pub fn rings_refused() -> Option<io::Error> {
    IoUring::<squeue::Entry128, cqueue::Entry>::builder()
        .build(2)
        .err()
}

/// The CPUs the kernel may route requests from (`/sys/devices/system/cpu/possible`): a
/// queue is needed for each, or the mount hangs.
pub fn possible_cpus() -> io::Result<Vec<usize>> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    let bad = || io::Error::other(format!("cannot parse the possible CPUs '{}'", text.trim()));
    let mut cpus = Vec::new();
    for part in text.trim().split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (usize, usize) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
        cpus.extend(a..=b);
    }
    Ok(cpus)
}

/// One ring entry's buffers. The header buffer holds the request header, the per-opcode
/// struct and the ring's own bookkeeping (`fuse_uring_req_header`, 288 bytes).
struct Slot {
    header: Box<abi::fuse_uring_req_header>,
    payload: Vec<u8>,
    /// The two buffers as REGISTER takes them; read by the kernel while the SQE is issued.
    iov: Box<[libc::iovec; 2]>,
}

impl Slot {
    fn new() -> Slot {
        let mut header = Box::new(abi::fuse_uring_req_header::new_zeroed());
        let mut payload = vec![0u8; PAYLOAD];
        let iov = Box::new([
            libc::iovec {
                iov_base: header.as_mut_bytes().as_mut_ptr().cast(),
                iov_len: std::mem::size_of::<abi::fuse_uring_req_header>(),
            },
            libc::iovec {
                iov_base: payload.as_mut_ptr().cast(),
                iov_len: payload.len(),
            },
        ]);
        Slot {
            header,
            payload,
            iov,
        }
    }

    /// Writes a reply into the slot: the `fuse_out_header` in the header buffer, `parts`
    /// back to back at the start of the payload, and their length as `payload_sz`.
    fn put_reply(&mut self, unique: u64, error: i32, parts: &[&[u8]]) {
        let mut len = 0;
        for p in parts {
            let n = p.len().min(self.payload.len() - len);
            self.payload[len..len + n].copy_from_slice(&p[..n]);
            len += n;
        }
        let out = abi::fuse_out_header::reply(unique, error, len);
        self.header.in_out[..16].copy_from_slice(out.as_bytes());
        self.header.ring_ent_in_out.payload_sz = len as u32;
    }
}

/// A reply written straight into a slot (the request borrowed nothing from it).
struct SlotSink<'a>(&'a mut Slot);

impl ReplySink for SlotSink<'_> {
    fn send(&mut self, unique: u64, error: i32, parts: &[&[u8]]) {
        self.0.put_reply(unique, error, parts);
    }
}

/// The reply to a request already answered.
struct Discard;

impl ReplySink for Discard {
    fn send(&mut self, _unique: u64, _error: i32, _parts: &[&[u8]]) {}
}

/// A reply kept aside while the request still borrows the slot's payload.
#[derive(Default)]
struct Staged {
    unique: u64,
    error: i32,
    bytes: Vec<u8>,
}

impl ReplySink for Staged {
    fn send(&mut self, unique: u64, error: i32, parts: &[&[u8]]) {
        self.unique = unique;
        self.error = error;
        self.bytes.clear();
        for p in parts {
            self.bytes.extend_from_slice(p);
        }
    }
}

/// Releases answered first whose work may wait on the blocking threads at once (see the
/// module documentation).
const LATER_MAX: usize = 32;

/// The io_uring channel of one mount.
pub struct UringChannel<B: Backend> {
    server: Arc<Server<B>>,
    proto: Proto,
    /// A duplicate of the session's `/dev/fuse` descriptor, which ring commands name.
    dev: OwnedFd,
    blocking: Blocking,
    /// Releases answered first and not yet done (at most [`LATER_MAX`]).
    later: AtomicUsize,
    /// Whether the queues' busy polling pays off (see [`crate::busy_poll`]).
    payoff: Arc<Payoff>,
    latency: Arc<CpuLatency>,
}

/// An answer computed off the queue's thread.
struct Answer {
    /// The ring entry the request came in.
    slot: usize,
    /// What the entry is committed with (the kernel's, from the entry's header).
    commit_id: u64,
    /// The request answered.
    unique: u64,
    /// Its result (0 or a negative errno).
    error: i32,
}

/// A queue's ring and the buffers its entries name, with one owner: dropped, it closes the
/// ring first, and frees the buffers only if the kernel holds none of the entries (every
/// one ended with a completion). Otherwise the kernel may still copy a request into them
/// until it has cancelled its entries, so they are left allocated (an error path: a queue
/// that stopped while its connection was alive).
struct Entries<R, S> {
    ring: ManuallyDrop<R>,
    slots: ManuallyDrop<S>,
    /// Entries the kernel may hold: registered, not yet ended by a completion.
    held: usize,
}

impl<R, S> Entries<R, S> {
    /// `held`: entries counted as held from the start (their registration is under way).
    fn new(ring: R, slots: S, held: usize) -> Self {
        Entries {
            ring: ManuallyDrop::new(ring),
            slots: ManuallyDrop::new(slots),
            held,
        }
    }
}

impl<R, S> Drop for Entries<R, S> {
    fn drop(&mut self) {
        // SAFETY: each field is dropped at most once, here, and never used afterwards.
        unsafe {
            ManuallyDrop::drop(&mut self.ring);
            if self.held == 0 {
                ManuallyDrop::drop(&mut self.slots);
            }
        }
    }
}

/// Commits, on queue `qid` of `dev`, the answers computed on other threads.
fn commit_answers(
    dev: RawFd,
    qid: u16,
    rx: &Receiver<Answer>,
    slots: &mut [Slot],
    pending: &mut Vec<squeue::Entry128>,
) {
    for a in rx.try_iter() {
        slots[a.slot].put_reply(a.unique, a.error, &[]);
        pending.push(sqe_commit(dev, qid, a.commit_id, a.slot));
    }
}

/// The queue's eventfd, shared with the jobs that answer from other threads: each holds
/// it open, so a job that ends after the queue's thread never writes into a descriptor
/// number reused meanwhile.
#[derive(Clone)]
struct Waker(Arc<OwnedFd>);

impl Waker {
    fn new() -> io::Result<Waker> {
        Ok(Waker(Arc::new(eventfd()?)))
    }

    /// Wakes the queue's thread.
    fn wake(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer to the eventfd this value holds open.
        unsafe { libc::write(self.0.as_raw_fd(), one.as_ptr().cast(), 8) };
    }

    /// Clears the wakeups counted so far (the poll saw them).
    fn clear(&self) {
        let mut buf = [0u8; 8];
        // SAFETY: reads 8 bytes into a live buffer from the eventfd this value holds open.
        unsafe { libc::read(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
    }

    fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

fn sqe_register(fd: RawFd, qid: u16, slot: &Slot, index: usize) -> squeue::Entry128 {
    let req = abi::fuse_uring_cmd_req {
        flags: 0,
        commit_id: 0,
        qid,
        padding: [0; 6],
    };
    let mut cmd = [0u8; 80];
    cmd[..req.as_bytes().len()].copy_from_slice(req.as_bytes());
    let mut e = opcode::UringCmd80::new(types::Fd(fd), CMD_REGISTER)
        .addr(Some(slot.iov.as_ptr() as u64))
        .cmd(cmd)
        .build()
        .user_data(index as u64);
    // The kernel wants `sqe->len` = 2 (the two iovecs), which the builder cannot set: the
    // 32-bit `len` is at byte 24 of the SQE.
    // SAFETY: `Entry128` is `repr(C)` over the kernel's 128-byte `io_uring_sqe` layout; byte
    // 24..28 is `len`, inside the entry, and the write is unaligned-safe.
    unsafe {
        let p = (&mut e as *mut squeue::Entry128).cast::<u8>();
        p.add(24).cast::<u32>().write_unaligned(2);
    }
    e
}

fn sqe_commit(fd: RawFd, qid: u16, commit_id: u64, index: usize) -> squeue::Entry128 {
    let req = abi::fuse_uring_cmd_req {
        flags: 0,
        commit_id,
        qid,
        padding: [0; 6],
    };
    let mut cmd = [0u8; 80];
    cmd[..req.as_bytes().len()].copy_from_slice(req.as_bytes());
    opcode::UringCmd80::new(types::Fd(fd), CMD_COMMIT_AND_FETCH)
        .cmd(cmd)
        .build()
        .user_data(index as u64)
}

fn sqe_wake(efd: RawFd) -> squeue::Entry128 {
    opcode::PollAdd::new(types::Fd(efd), libc::POLLIN as u32)
        .build()
        .user_data(WAKE)
        .into()
}

fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd takes integer arguments; the result is checked before it is owned.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Keeps the calling thread on `cpu`, where the requests of this queue come from (best
/// effort: a CPU outside the allowed set leaves the thread where it may run).
fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes inside it.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        set
    };
    run_on(&set);
}

/// READs of at least this many bytes let a queue's thread leave its CPU (see the module
/// documentation).
const SPREAD_READ: u32 = 64 * 1024;

/// Whether a request is a READ of at least [`SPREAD_READ`] bytes.
fn large_read(header: &abi::fuse_uring_req_header) -> bool {
    let read = abi::fuse_read_in::read_from_prefix(&header.op_in);
    abi::fuse_in_header::read_from_prefix(&header.in_out)
        .is_ok_and(|(h, _)| h.opcode == abi::opcode::READ)
        && read.is_ok_and(|(r, _)| r.size >= SPREAD_READ)
}

/// The CPUs the calling thread may run on.
fn allowed_cpus() -> libc::cpu_set_t {
    // SAFETY: a zeroed cpu_set_t is valid, and sched_getaffinity writes at most its size
    // into it; on failure it stays empty, which `run_on` treats as "leave it".
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set);
        set
    }
}

/// Lets the calling thread run on every CPU in `set` (nothing if `set` is empty; a set the
/// kernel refuses leaves the thread where it may run).
fn run_on(set: &libc::cpu_set_t) {
    // SAFETY: CPU_COUNT reads a valid set; sched_setaffinity reads the set for the calling
    // thread.
    unsafe {
        if libc::CPU_COUNT(set) > 0 {
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set);
        }
    }
}

/// Where a queue's thread runs: on its CPU, or, while large READs come, anywhere.
#[derive(Debug, PartialEq, Eq)]
struct Placement {
    spread: bool,
}

impl Placement {
    /// The thread starts pinned.
    fn pinned() -> Placement {
        Placement { spread: false }
    }

    /// Before a request (`large`: a large READ); returns `Some(spread)` when the thread is
    /// to move: `true` to run anywhere, `false` back to its CPU.
    fn next(&mut self, large: bool) -> Option<bool> {
        (large != self.spread).then(|| {
            self.spread = large;
            large
        })
    }
}

/// How many windows after an answer a request still counts as coming quickly.
const QUICK: u32 = 4;

/// One queue's busy polling: whether requests keep arriving within a window of the answer
/// before them, and the wait for the next completion after an answer.
struct RingPoll {
    window: Duration,
    /// When the last answers were committed.
    answered: Instant,
    /// The last request arrived within a window of the answer before it.
    quick: bool,
    /// Shared by the queues: a queue whose caller moved on still keeps its CPU busy.
    payoff: Arc<Payoff>,
}

impl RingPoll {
    fn new(window: Duration, payoff: Arc<Payoff>) -> RingPoll {
        RingPoll {
            window,
            answered: Instant::now(),
            quick: false,
            payoff,
        }
    }

    /// A request arrived (`polled`: the last wait saw it come). A request that finds the
    /// thread asleep arrives later than it would have (the wakeup of an idle vCPU is in the
    /// gap), so a gap of up to [`QUICK`] windows counts as quick.
    fn arrived(&mut self, polled: bool) {
        self.quick = polled || self.answered.elapsed() <= self.window * QUICK;
    }

    /// After answers were committed: waits until `ready` says a completion is there or the
    /// window is over, yielding the CPU between looks; at once unless requests have been
    /// coming quickly and polls have been paying off ([`Payoff`]). Returns whether a
    /// completion came.
    fn wait(&mut self, stats: &Stats, mut ready: impl FnMut() -> bool) -> bool {
        self.answered = Instant::now();
        if self.window.is_zero() || !self.quick || !self.payoff.worth_polling() {
            return false;
        }
        loop {
            if ready() {
                self.payoff.polled(true, stats);
                return true;
            }
            if self.answered.elapsed() >= self.window {
                self.payoff.polled(false, stats);
                return false;
            }
            // SAFETY: sched_yield has no preconditions.
            unsafe { libc::sched_yield() };
        }
    }
}

impl<B: Backend> UringChannel<B> {
    /// A channel for `server` on `dev`, a duplicate of the session descriptor (INIT granted
    /// the ring), telling `latency` of each request.
    pub fn new(
        server: Arc<Server<B>>,
        proto: Proto,
        dev: OwnedFd,
        latency: Arc<CpuLatency>,
    ) -> Self {
        UringChannel {
            server,
            proto,
            dev,
            blocking: Blocking::default(),
            later: AtomicUsize::new(0),
            payoff: Arc::default(),
            latency,
        }
    }

    /// Starts one queue thread per possible CPU.
    pub fn start(self: Arc<Self>) -> io::Result<Vec<std::thread::JoinHandle<io::Result<()>>>> {
        let mut threads = Vec::new();
        for cpu in possible_cpus()? {
            let me = self.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("memofs-ring-{cpu}"))
                    .spawn(move || me.queue(cpu))?,
            );
        }
        Ok(threads)
    }

    /// One queue: registers its entries, then serves requests until the connection ends.
    fn queue(self: Arc<Self>, cpu: usize) -> io::Result<()> {
        let allowed = allowed_cpus();
        pin_to(cpu);
        let mut placement = Placement::pinned();
        let qid = cpu as u16;
        let waker = Waker::new()?;
        let (tx, rx) = channel::<Answer>();
        let ring: IoUring<squeue::Entry128, cqueue::Entry> =
            IoUring::builder().build((2 * DEPTH + 2) as u32)?;
        let slots: Vec<Slot> = (0..DEPTH).map(|_| Slot::new()).collect();
        let mut pending: Vec<squeue::Entry128> = slots
            .iter()
            .enumerate()
            .map(|(i, s)| sqe_register(self.dev.as_raw_fd(), qid, s, i))
            .collect();
        pending.push(sqe_wake(waker.raw()));
        let mut q = Entries::new(ring, slots, DEPTH);
        let mut scratch = Vec::new();
        let mut staged = Staged::default();
        let mut poll = RingPoll::new(self.server.plan().busy_poll, self.payoff.clone());
        while q.held > 0 {
            let answered = !pending.is_empty();
            {
                let mut sq = q.ring.submission();
                for e in pending.drain(..) {
                    // SAFETY: every buffer an entry names (iovecs, header and payload
                    // buffers) is in `q.slots`, which `Entries` frees only after the ring
                    // is closed and the kernel gave every entry back.
                    if unsafe { sq.push(&e) }.is_err() {
                        return Err(io::Error::other("io_uring submission queue full"));
                    }
                }
            }
            // Answers (or the first registrations) go in first; then, while requests come
            // quickly, a look at the completion queue before sleeping.
            let polled = answered
                && q.ring.submit().is_ok()
                && poll.wait(self.server.stats(), || !q.ring.completion().is_empty());
            if !polled {
                match q.ring.submit_and_wait(1) {
                    Ok(_) => {}
                    Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                    Err(e) => return Err(e),
                }
            }
            let done: Vec<(u64, i32)> = q
                .ring
                .completion()
                .map(|c| (c.user_data(), c.result()))
                .collect();
            for (data, res) in done {
                if data == WAKE {
                    waker.clear();
                    commit_answers(self.dev.as_raw_fd(), qid, &rx, &mut q.slots, &mut pending);
                    pending.push(sqe_wake(waker.raw()));
                    continue;
                }
                let i = data as usize;
                match res {
                    0 => {
                        poll.arrived(polled);
                        self.latency.arrived();
                        match placement.next(large_read(&q.slots[i].header)) {
                            Some(true) => run_on(&allowed),
                            Some(false) => pin_to(cpu),
                            None => {}
                        }
                        let commit = self.request(
                            &mut q.slots[i],
                            i,
                            &tx,
                            &waker,
                            &mut scratch,
                            &mut staged,
                        );
                        if let Some(commit_id) = commit {
                            pending.push(sqe_commit(self.dev.as_raw_fd(), qid, commit_id, i));
                        }
                    }
                    e if e == -libc::EAGAIN || e == -libc::EINTR => {
                        pending.push(sqe_register(self.dev.as_raw_fd(), qid, &q.slots[i], i));
                    }
                    e if e == -libc::ENOTCONN
                        || e == -libc::ECONNABORTED
                        || e == -libc::ECANCELED =>
                    {
                        q.held -= 1;
                    }
                    e => {
                        log::warn!(
                            "ring queue {qid}: entry {i} failed ({})",
                            io::Error::from_raw_os_error(-e)
                        );
                        q.held -= 1;
                    }
                }
            }
        }
        Ok(())
    }

    /// Handles the request in slot `i`; returns the commit id to commit it with now, or
    /// `None` if it is answered later from another thread.
    fn request(
        self: &Arc<Self>,
        slot: &mut Slot,
        i: usize,
        tx: &Sender<Answer>,
        waker: &Waker,
        scratch: &mut Vec<u8>,
        staged: &mut Staged,
    ) -> Option<u64> {
        let header = *slot.header;
        let commit_id = header.ring_ent_in_out.commit_id;
        let h = match abi::fuse_in_header::read_from_prefix(&header.in_out) {
            Ok((h, _)) => h,
            Err(_) => return Some(commit_id),
        };
        let payload_sz = (header.ring_ent_in_out.payload_sz as usize).min(slot.payload.len());
        let handled = if payload_sz == 0 {
            // Nothing borrowed from the payload: the reply goes straight into it.
            let args = Args::split(&header.op_in, &[]);
            let mut sink = SlotSink(slot);
            // A malformed request is answered with its error, and committed now.
            let Some(req) = self.decoded(&h, args, scratch, &mut sink) else {
                return Some(commit_id);
            };
            if req.op.answered_first() && self.take_later() {
                sink.send(h.unique, 0, &[]);
                self.later(h, header.op_in);
                return Some(commit_id);
            }
            self.serve(&req, scratch, &mut sink)
        } else {
            let args = Args::split(&header.op_in, &slot.payload[..payload_sz]);
            let handled = self
                .decoded(&h, args, scratch, staged)
                .and_then(|req| self.serve(&req, scratch, staged));
            slot.put_reply(staged.unique, staged.error, &[&staged.bytes]);
            handled
        };
        match handled {
            None => Some(commit_id),
            Some(job) => {
                let (tx, waker, unique) = (tx.clone(), waker.clone(), h.unique);
                self.blocking.run(move || {
                    let error = job().err().map_or(0, |e: Errno| -e.0);
                    let answer = Answer {
                        slot: i,
                        commit_id,
                        unique,
                        error,
                    };
                    if tx.send(answer).is_ok() {
                        waker.wake();
                    }
                });
                None
            }
        }
    }

    /// Counts one more request answered first, unless [`LATER_MAX`] are still to do.
    fn take_later(&self) -> bool {
        let n = self.later.fetch_add(1, Ordering::AcqRel);
        if n >= LATER_MAX {
            self.later.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// Handles an already answered request (`h`, its per-opcode struct `op_in`) on a
    /// blocking thread; counted by [`Self::take_later`].
    fn later(self: &Arc<Self>, h: abi::fuse_in_header, op_in: [u8; 128]) {
        let me = self.clone();
        self.blocking.run(move || {
            let _done = LaterDone(&me.later);
            let mut scratch = Vec::new();
            let args = Args::split(&op_in, &[]);
            if let Some(req) = me.decoded(&h, args, &mut scratch, &mut Discard) {
                if let Some(job) = me.serve(&req, &mut scratch, &mut Discard) {
                    let _ = job();
                }
            }
        });
    }

    /// Decodes one request; a malformed one is answered with its error through `sink`.
    fn decoded<'a>(
        &self,
        h: &abi::fuse_in_header,
        args: Args<'a>,
        scratch: &mut Vec<u8>,
        sink: &mut dyn ReplySink,
    ) -> Option<Request<'a>> {
        match decode(h, args, self.proto) {
            Ok(req) => Some(req),
            Err(e) => {
                log::warn!("malformed ring request (opcode {}): {e:?}", h.opcode);
                Encoder::new(h.unique, scratch, sink).error(e);
                None
            }
        }
    }

    /// Handles one request, answering through `sink`; returns the job to run off the thread
    /// when the request layer deferred it.
    fn serve(
        &self,
        req: &Request<'_>,
        scratch: &mut Vec<u8>,
        sink: &mut dyn ReplySink,
    ) -> Option<Box<dyn FnOnce() -> memofs_core::Result<()> + Send>> {
        log::debug!(
            "ring request {} from pid {}: {:?} on {}",
            req.unique,
            req.caller.pid,
            req.op,
            req.nodeid
        );
        let mut enc = Encoder::new(req.unique, scratch, sink);
        if let Op::Readdir { size, plus, .. } = req.op {
            enc = enc.for_readdir(size, plus);
        }
        match self.server.handle(req, &mut enc) {
            Handled::Done => {
                if !req.op.wants_reply() {
                    // Every delivered request is committed, noreply ones with an empty answer.
                    sink.send(req.unique, 0, &[]);
                }
                None
            }
            Handled::Blocking(job) => Some(job),
        }
    }
}

#[cfg(test)]
#[path = "uring_tests.rs"]
mod tests;
