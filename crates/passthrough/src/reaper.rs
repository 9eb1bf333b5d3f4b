//! Closing forgotten inodes' descriptors off the request path.
//!
//! When the kernel forgets an inode the server closes its `O_PATH` descriptor, and when the
//! host file was already deleted that `close(2)` is what frees it: the host kernel evicts the
//! inode and drops its pages. In an `rm -rf` through the export that is a large share of the
//! server's work, and on the request thread it would sit between the FORGET and the caller's
//! next request (which waits for it). A reaper thread does it instead: forgotten inodes
//! queue up and the thread drops them in batches, at most [`BATCH`] apart, so it wakes at
//! most once per batch. At most [`MAX_PENDING`] wait (besides the batch being dropped);
//! past that the request thread drops them itself, so the descriptors held for closing stay
//! bounded. They still count against the descriptor budget until closed (see
//! [`crate::fd`]), and a request that finds the budget spent closes what waits before it
//! gives up ([`Reaper::drain_now`]).

use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// How long the reaper lets forgotten items gather before it drops them.
pub(crate) const BATCH: Duration = Duration::from_millis(1);
/// Most items waiting to be dropped.
pub(crate) const MAX_PENDING: usize = 256;

struct Queue<T> {
    items: Vec<T>,
    stop: bool,
}

struct Shared<T> {
    queue: Mutex<Queue<T>>,
    wake: Condvar,
    /// Held by the reaper thread while it drops a batch (see [`Reaper::drain_now`]).
    dropping: Mutex<()>,
}

impl<T> Shared<T> {
    fn new() -> Arc<Shared<T>> {
        Arc::new(Shared {
            queue: Mutex::new(Queue {
                items: Vec::new(),
                stop: false,
            }),
            wake: Condvar::new(),
            dropping: Mutex::new(()),
        })
    }
}

/// Drops values on its own thread.
pub(crate) struct Reaper<T: Send + 'static> {
    shared: Arc<Shared<T>>,
    /// The thread, started with the first value handed in (a server sets up its sandbox
    /// before it starts any thread); `None` inside if it could not start.
    thread: OnceLock<Option<JoinHandle<()>>>,
}

impl<T: Send + 'static> Reaper<T> {
    /// A reaper whose thread starts when first needed; if it cannot start, values are
    /// dropped where they are handed in.
    pub(crate) fn start() -> Reaper<T> {
        Reaper {
            shared: Shared::new(),
            thread: OnceLock::new(),
        }
    }

    fn thread(&self) -> &Option<JoinHandle<()>> {
        self.thread.get_or_init(|| {
            let s = self.shared.clone();
            std::thread::Builder::new()
                .name("memofs-reaper".into())
                .spawn(move || run(&s))
                .map_err(|e| {
                    log::warn!("passthrough: descriptors close on the request threads ({e})")
                })
                .ok()
        })
    }

    /// Drops `item` on the reaper thread (or here, when too many wait or there is no thread).
    pub(crate) fn drop_later(&self, item: T) {
        if self.thread().is_none() {
            return;
        }
        let mut q = self.shared.queue.lock();
        if q.items.len() >= MAX_PENDING {
            drop(q);
            drop(item);
            return;
        }
        q.items.push(item);
        if q.items.len() == 1 {
            self.shared.wake.notify_one();
        }
    }

    /// Drops every waiting item here and now, and waits for a batch the reaper thread is
    /// dropping: afterwards everything handed in before has been dropped.
    pub(crate) fn drain_now(&self) {
        let items = std::mem::take(&mut self.shared.queue.lock().items);
        drop(items);
        drop(self.shared.dropping.lock());
    }

    /// Items waiting (for tests).
    #[cfg(test)]
    fn pending(&self) -> usize {
        self.shared.queue.lock().items.len()
    }
}

fn run<T>(shared: &Shared<T>) {
    let mut batch = Vec::new();
    loop {
        {
            let mut q = shared.queue.lock();
            while q.items.is_empty() && !q.stop {
                shared.wake.wait(&mut q);
            }
            if q.items.is_empty() {
                return;
            }
            if !q.stop {
                // Let the batch gather (a stop signal ends the wait early).
                shared.wake.wait_for(&mut q, BATCH);
            }
            std::mem::swap(&mut batch, &mut q.items);
            // Taken before the queue lock goes, so `drain_now` cannot miss this batch.
            let _dropping = shared.dropping.lock();
            drop(q);
            batch.clear();
        }
    }
}

impl<T: Send + 'static> Drop for Reaper<T> {
    fn drop(&mut self) {
        self.shared.queue.lock().stop = true;
        self.shared.wake.notify_one();
        if let Some(Some(t)) = self.thread.take() {
            // The last owner may be an item the thread itself is dropping.
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    /// Counts its drops.
    struct Counted(Arc<AtomicUsize>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn drops_on_its_thread_soon_and_everything_at_the_end() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let r = Reaper::start();
        for _ in 0..10 {
            r.drop_later(Counted(dropped.clone()));
        }
        let start = Instant::now();
        while dropped.load(Ordering::SeqCst) < 10 {
            assert!(start.elapsed() < Duration::from_secs(10), "nothing dropped");
            std::thread::yield_now();
        }
        assert_eq!(r.pending(), 0);
        r.drop_later(Counted(dropped.clone()));
        drop(r);
        assert_eq!(
            dropped.load(Ordering::SeqCst),
            11,
            "dropping the reaper drops the rest"
        );
    }

    /// A reaper whose thread never takes a batch.
    fn stalled() -> Reaper<Counted> {
        Reaper {
            shared: Shared::new(),
            thread: OnceLock::from(Some(std::thread::spawn(|| {}))),
        }
    }

    #[test]
    fn drain_now_drops_what_waits() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let r = stalled();
        for _ in 0..5 {
            r.drop_later(Counted(dropped.clone()));
        }
        assert_eq!(dropped.load(Ordering::SeqCst), 0);
        r.drain_now();
        assert_eq!(dropped.load(Ordering::SeqCst), 5);
    }

    #[test]
    fn past_the_limit_drops_right_away() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let r = stalled();
        for _ in 0..MAX_PENDING {
            r.drop_later(Counted(dropped.clone()));
        }
        assert_eq!(dropped.load(Ordering::SeqCst), 0);
        r.drop_later(Counted(dropped.clone()));
        assert_eq!(dropped.load(Ordering::SeqCst), 1, "the one past the limit");
        drop(r);
        assert_eq!(dropped.load(Ordering::SeqCst), MAX_PENDING + 1);
    }
}
