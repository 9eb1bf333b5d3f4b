//! A pool of worker threads that serve the request queues' chains (virtiofsd's
//! `--thread-pool-size`): a queue's thread pops each chain the guest made available and hands
//! it to the pool; a worker answers it, returns it to the used ring and tells the guest if it
//! asked. Without a pool each queue's thread answers its chains itself, one after another.
//!
//! What a pool buys: a request that blocks (an `fsync` of a host file, a READ of a cold host
//! file) no longer holds up the chains behind it on the same queue, and one queue's requests
//! run on several host CPUs at once. What it costs: each chain crosses from the queue's thread
//! to a worker, and a worker's answer takes the queue's lock to return it.
//!
//! Chains handed out but not yet returned are counted ([`InFlight`]): a VMM that stops a queue
//! (`GET_VRING_BASE`) reads the used index once every chain taken from it is answered, and a
//! state transfer never starts with a request half done.

use std::cell::RefCell;
use std::io;
use std::sync::{Condvar, Mutex};

use crate::chain::Buffers;

/// Chains taken from the queues and not yet returned to them.
#[derive(Default)]
pub(crate) struct InFlight {
    count: Mutex<usize>,
    idle: Condvar,
}

impl InFlight {
    /// A chain was taken.
    pub(crate) fn begin(&self) {
        *self.count.lock().unwrap_or_else(|e| e.into_inner()) += 1;
    }

    /// A chain taken was returned.
    pub(crate) fn end(&self) {
        let mut n = self.count.lock().unwrap_or_else(|e| e.into_inner());
        *n = n.saturating_sub(1);
        if *n == 0 {
            self.idle.notify_all();
        }
    }

    /// Waits until every chain taken was returned.
    pub(crate) fn wait_idle(&self) {
        let n = self.count.lock().unwrap_or_else(|e| e.into_inner());
        drop(
            self.idle
                .wait_while(n, |n| *n > 0)
                .unwrap_or_else(|e| e.into_inner()),
        );
    }
}

/// The workers: each sleeps on the pool's queue until a chain comes (virtiofsd's pool, the
/// `futures` executor's; a pool whose idle workers spin looking for work takes the host CPUs a
/// guest's vCPUs run on).
pub(crate) struct Pool {
    workers: futures_executor::ThreadPool,
}

thread_local! {
    /// A worker's buffers, reused from one chain to the next.
    static BUFFERS: RefCell<Buffers> = RefCell::new(Buffers::default());
}

impl Pool {
    /// `size` workers (at least one), started now.
    pub(crate) fn new(size: usize) -> io::Result<Pool> {
        let workers = futures_executor::ThreadPool::builder()
            .pool_size(size.max(1))
            .name_prefix("memofs-pool-")
            .create()?;
        Ok(Pool { workers })
    }

    /// Runs `job` on a worker with that worker's buffers.
    pub(crate) fn spawn(&self, job: impl FnOnce(&mut Buffers) + Send + 'static) {
        self.workers
            .spawn_ok(async move { BUFFERS.with(|b| job(&mut b.borrow_mut())) });
    }
}
