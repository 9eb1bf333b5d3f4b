//! The `/dev/fuse` channel: request threads, each reading requests from a queue of its own
//! (a cloned descriptor), decoding them, handing them to the request layer and writing the
//! replies back to the same queue.
//!
//! Which threads read is up to [`crate::gate`], and how the one reading thread waits for
//! the next request to [`crate::busy_poll`]; requests that may wait for a disk run on
//! [`crate::blocking`]'s threads and answer from there.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

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
pub struct Serving(
    pub(crate) Vec<std::thread::JoinHandle<io::Result<()>>>,
    pub(crate) Option<Arc<Pause>>,
);

impl Serving {
    /// Something that stops the request threads between requests and starts them again
    /// (see [`Pause`]); `None` where requests come through io_uring rings.
    pub fn pause(&self) -> Option<Arc<Pause>> {
        self.1.clone()
    }

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
    pause: Arc<Pause>,
}

/// Stops the request threads of a channel where no request is in hand, for a handover of
/// the connection to another process (`memofs upgrade`): every request a thread has read
/// is answered on the queue it came from before [`Pause::stop`] returns, and the requests
/// the kernel queues meanwhile wait for whoever reads next.
///
/// A thread waiting in `read(2)` is woken by [`WAKE`], whose handler does nothing and is
/// installed without `SA_RESTART`: the read ends with `EINTR` and the thread looks at the
/// flag before reading again. The signal is sent again until every thread has stopped (one
/// sent just before a thread's `read(2)` begins is lost).
#[derive(Default)]
pub struct Pause {
    asked: AtomicBool,
    state: Mutex<PauseState>,
    changed: Condvar,
    /// Requests handed to [`Blocking`] and not yet answered.
    blocking: AtomicUsize,
}

#[derive(Default)]
struct PauseState {
    /// The request threads serving, each by its `pthread_t` (removed under this lock before
    /// the thread ends, so a signal never goes to a thread that is gone).
    threads: Vec<libc::pthread_t>,
    /// How many of them have stopped.
    stopped: usize,
}

/// The signal that ends a request thread's `read(2)` while a pause is asked.
fn wake_signal() -> libc::c_int {
    libc::SIGRTMIN() + 1
}

extern "C" fn woken(_: libc::c_int) {}

impl Pause {
    /// Stops every request thread between requests and waits until requests handed to
    /// blocking threads are answered; gives up after `limit` (the threads go on serving).
    pub fn stop(&self, limit: Duration) -> io::Result<()> {
        // SAFETY: installs a handler that does nothing, for a signal only memofs sends.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = woken as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(wake_signal(), &sa, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        self.asked.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + limit;
        let mut state = self.state.lock();
        loop {
            if state.stopped == state.threads.len() && self.blocking.load(Ordering::SeqCst) == 0 {
                return Ok(());
            }
            if Instant::now() >= deadline {
                drop(state);
                self.resume();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the request threads did not stop",
                ));
            }
            for &t in &state.threads {
                // SAFETY: every thread listed is alive (it leaves the list under this lock
                // before it ends); the signal's handler does nothing.
                unsafe { libc::pthread_kill(t, wake_signal()) };
            }
            self.changed.wait_for(&mut state, Duration::from_millis(2));
        }
    }

    /// Lets the request threads read again; returns once they have left the pause (or after
    /// a second), so that a [`Pause::stop`] right after it finds them serving.
    pub fn resume(&self) {
        let mut state = self.state.lock();
        self.asked.store(false, Ordering::SeqCst);
        self.changed.notify_all();
        let deadline = Instant::now() + Duration::from_secs(1);
        while state.stopped > 0 && Instant::now() < deadline {
            self.changed.wait_for(&mut state, Duration::from_millis(10));
        }
    }

    /// A request thread starts serving.
    fn enter(&self) {
        // SAFETY: pthread_self has no preconditions.
        self.state
            .lock()
            .threads
            .push(unsafe { libc::pthread_self() });
    }

    /// A request thread ends.
    fn leave(&self) {
        // SAFETY: pthread_self has no preconditions.
        let me = unsafe { libc::pthread_self() };
        let mut state = self.state.lock();
        state.threads.retain(|&t| t != me);
        self.changed.notify_all();
    }

    /// Between requests: stops here while a pause is asked.
    fn check(&self) {
        if !self.asked.load(Ordering::SeqCst) {
            return;
        }
        let mut state = self.state.lock();
        state.stopped += 1;
        self.changed.notify_all();
        while self.asked.load(Ordering::SeqCst) {
            self.changed.wait(&mut state);
        }
        state.stopped -= 1;
        self.changed.notify_all();
    }
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
            pause: Arc::default(),
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
        Ok(Serving(workers, Some(self.pause.clone())))
    }

    /// One request thread: reads, handles and answers requests from `fd`.
    fn serve(&self, fd: OwnedFd) -> io::Result<()> {
        self.pause.enter();
        let served = self.serve_queue(fd);
        self.pause.leave();
        served
    }

    fn serve_queue(&self, fd: OwnedFd) -> io::Result<()> {
        let fd = Arc::new(fd);
        let mut buf = vec![0u64; BUFFER / 8];
        let mut scratch = Vec::new();
        loop {
            self.pause.check();
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
            let pause = self.pause.clone();
            pause.blocking.fetch_add(1, Ordering::SeqCst);
            self.blocking.run(move || {
                let error = job().err().map_or(0, |e: Errno| -e.0);
                use memofs_proto::encode::ReplySink;
                FdSink(fd.as_fd()).send(unique, error, &[]);
                pause.blocking.fetch_sub(1, Ordering::SeqCst);
                pause.changed.notify_all();
            });
        }
        if gated {
            let answered = self.poll.answered();
            let alone = self.gate.leave();
            self.poll.wait(answered, alone);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::FromRawFd;

    /// A thread that reads a pipe as a request thread reads its queue.
    fn reader(pause: Arc<Pause>, fd: OwnedFd) -> std::thread::JoinHandle<usize> {
        std::thread::spawn(move || {
            pause.enter();
            let mut reads = 0;
            let mut buf = [0u8; 1];
            loop {
                pause.check();
                // SAFETY: reads into a live one-byte buffer.
                match unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), 1) } {
                    0 => break,
                    n if n > 0 => reads += 1,
                    _ => {}
                }
            }
            pause.leave();
            reads
        })
    }

    #[test]
    fn threads_waiting_in_read_stop_and_go_on() {
        let mut fds = [0; 2];
        // SAFETY: pipe fills the two descriptors.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: just made, owned by nothing else.
        let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let pause = Arc::new(Pause::default());
        let readers: Vec<_> = (0..3)
            .map(|_| reader(pause.clone(), r.try_clone().unwrap()))
            .collect();
        while pause.state.lock().threads.len() < 3 {
            std::thread::yield_now();
        }
        // Every thread sits in read(2) with nothing to read: each is stopped all the same.
        pause.stop(Duration::from_secs(10)).unwrap();
        assert_eq!(pause.state.lock().stopped, 3);
        // What is written meanwhile waits for them.
        // SAFETY: writes from a live buffer.
        assert_eq!(
            unsafe { libc::write(w.as_raw_fd(), b"ab".as_ptr().cast(), 2) },
            2
        );
        pause.resume();
        assert_eq!(
            pause.state.lock().stopped,
            0,
            "resume returns once they serve"
        );
        drop(w);
        let reads: usize = readers.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(reads, 2);
        assert!(pause.state.lock().threads.is_empty());
    }

    #[test]
    fn a_pause_gives_up_while_a_blocking_request_runs() {
        let pause = Pause::default();
        pause.blocking.fetch_add(1, Ordering::SeqCst);
        let e = pause.stop(Duration::from_millis(50)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(!pause.asked.load(Ordering::SeqCst), "the threads serve on");
    }
}
