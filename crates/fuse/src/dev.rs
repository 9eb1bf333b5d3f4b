//! The `/dev/fuse` channel: request threads, each reading requests from a queue of its own
//! (a cloned descriptor), decoding them, handing them to the request layer and writing the
//! replies back to the same queue.
//!
//! Which threads read is up to [`crate::gate`], and how the one reading thread waits for
//! the next request to [`crate::busy_poll`]; requests that may wait for a disk run on
//! [`crate::blocking`]'s threads and answer from there.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;

use memofs_core::{Backend, Errno};
use memofs_request::{Handled, Op, ReplyOut, Server};
use zerocopy::{FromBytes, IntoBytes};

use crate::abi;
use crate::blocking::Blocking;
use crate::busy_poll::BusyPoll;
use crate::cpu_latency::CpuLatency;
use crate::device::{clone_queue, FdSink};
use crate::gate::Gate;
use memofs_proto::decode::{decode, Args, Proto};
use memofs_proto::encode::Encoder;
use memofs_proto::init::MAX_WRITE;

/// The request threads of a started channel.
pub struct Serving(pub(crate) Vec<std::thread::JoinHandle<io::Result<()>>>);

impl Serving {
    /// Waits until every request thread has ended (the connection is over).
    pub fn wait(self) -> io::Result<()> {
        let mut result = Ok(());
        for w in self.0 {
            match w.join() {
                Ok(r) => result = result.and(r),
                Err(_) => result = Err(io::Error::other("a request thread panicked")),
            }
        }
        result
    }
}

/// A request thread's read buffer: the largest WRITE plus its headers (the kernel refuses
/// reads into anything smaller than it might need).
const BUFFER: usize = MAX_WRITE as usize + 64 * 1024;

/// The `/dev/fuse` channel of one mount.
pub struct DevChannel<B: Backend> {
    server: Arc<Server<B>>,
    proto: Proto,
    gate: Gate,
    poll: Arc<BusyPoll>,
    latency: Arc<CpuLatency>,
    blocking: Blocking,
}

/// How a `read(2)` of the device ended.
enum Read {
    /// A request of this many bytes.
    Request(usize),
    /// Nothing this time (interrupted; or a request the kernel withdrew).
    Again,
    /// The connection is over (unmounted or aborted).
    Ended,
}

fn read_request(fd: &OwnedFd, buf: &mut [u64]) -> io::Result<Read> {
    let bytes = buf.as_mut_bytes();
    // SAFETY: reads into a live buffer of the stated length.
    let n = unsafe { libc::read(fd.as_raw_fd(), bytes.as_mut_ptr().cast(), bytes.len()) };
    if n >= 0 {
        return Ok(Read::Request(n as usize));
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EINTR | libc::EAGAIN | libc::ENOENT) => Ok(Read::Again),
        Some(libc::ENODEV | libc::ECONNABORTED) => Ok(Read::Ended),
        _ => Err(e),
    }
}

impl<B: Backend> DevChannel<B> {
    /// A channel serving `server` (INIT done, `proto` from it) with `threads` threads
    /// polling for `busy_poll` after answers and telling `latency` of each request.
    pub fn new(
        server: Arc<Server<B>>,
        proto: Proto,
        threads: usize,
        poll: Arc<BusyPoll>,
        latency: Arc<CpuLatency>,
    ) -> Self {
        DevChannel {
            server,
            proto,
            gate: Gate::new(threads),
            poll,
            latency,
            blocking: Blocking::default(),
        }
    }

    /// Starts serving requests on `session` and `threads - 1` cloned queues, each on a
    /// thread of its own; [`Serving::wait`] returns when the connection has ended.
    pub fn start(self: Arc<Self>, session: OwnedFd, threads: usize) -> io::Result<Serving> {
        let mut queues = vec![session];
        for _ in 1..threads {
            queues.push(clone_queue(queues[0].as_fd())?);
        }
        let mut workers = Vec::new();
        for (i, fd) in queues.into_iter().enumerate() {
            let me = self.clone();
            workers.push(
                std::thread::Builder::new()
                    .name(format!("memofs-req-{i}"))
                    .spawn(move || me.serve(fd))?,
            );
        }
        Ok(Serving(workers))
    }

    /// One request thread: reads, handles and answers requests from `fd`.
    fn serve(&self, fd: OwnedFd) -> io::Result<()> {
        let fd = Arc::new(fd);
        let mut buf = vec![0u64; BUFFER / 8];
        let mut scratch = Vec::new();
        loop {
            let n = match read_request(&fd, &mut buf)? {
                Read::Request(n) => n,
                Read::Again => continue,
                Read::Ended => return Ok(()),
            };
            self.one(&fd, &buf.as_bytes()[..n], &mut scratch);
        }
    }

    /// Handles one request read from `fd`.
    fn one(&self, fd: &Arc<OwnedFd>, bytes: &[u8], scratch: &mut Vec<u8>) {
        let Ok((h, _)) = abi::fuse_in_header::read_from_prefix(bytes) else {
            log::warn!("short request ({} bytes) ignored", bytes.len());
            return;
        };
        let end = (h.len as usize).min(bytes.len());
        let body = bytes
            .get(std::mem::size_of::<abi::fuse_in_header>()..end)
            .unwrap_or(&[]);
        let mut sink = FdSink(fd.as_fd());
        let req = match decode(&h, Args::contiguous(body), self.proto) {
            Ok(r) => r,
            Err(e) => {
                log::warn!("malformed request (opcode {}): {e:?}", h.opcode);
                Encoder::new(h.unique, scratch, &mut sink).error(e);
                return;
            }
        };
        log::debug!(
            "request {} from pid {}: {:?} on {}",
            req.unique,
            req.caller.pid,
            req.op,
            req.nodeid
        );
        // FORGETs come in batches the kernel sends as one; a thread must not park between
        // them, nor poll after them (docs/performance.md).
        let gated = req.op.wants_reply();
        if gated {
            self.poll.arrived();
            self.latency.arrived();
            self.gate.enter(req.caller.pid, req.op.moves_data());
        }
        let mut enc = Encoder::new(req.unique, scratch, &mut sink);
        if let Op::Readdir { size, plus, .. } = req.op {
            enc = enc.for_readdir(size, plus);
        }
        if let Handled::Blocking(job) = self.server.handle(&req, &mut enc) {
            let (fd, unique) = (fd.clone(), req.unique);
            self.blocking.run(move || {
                let error = job().err().map_or(0, |e: Errno| -e.0);
                use memofs_proto::encode::ReplySink;
                FdSink(fd.as_fd()).send(unique, error, &[]);
            });
        }
        if gated {
            let answered = self.poll.answered();
            let alone = self.gate.leave();
            self.poll.wait(answered, alone);
        }
    }
}
