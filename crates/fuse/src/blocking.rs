//! Requests that may wait for the disk (FSYNC, FSYNCDIR) run on threads of their own, so the
//! request threads (often only one is reading, see [`crate::gate`]) keep serving other
//! requests meanwhile: an `fsync` of a large file on a slow host disk must not stall every
//! `stat` on the mount.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock};

/// Threads for blocking requests (two `fsync`s may wait at once; more queue).
pub const WORKERS: usize = 2;

type Job = Box<dyn FnOnce() + Send>;

/// A small pool of threads for blocking requests, started on first use.
#[derive(Default)]
pub struct Blocking {
    tx: OnceLock<Option<Mutex<Sender<Job>>>>,
}

impl Blocking {
    /// Runs `job` on a worker thread; on the calling thread if none could be started.
    pub fn run(&self, job: impl FnOnce() + Send + 'static) {
        let tx = self.tx.get_or_init(start);
        let job: Job = Box::new(job);
        let job = match tx {
            Some(tx) => match tx.lock().unwrap_or_else(|e| e.into_inner()).send(job) {
                Ok(()) => return,
                Err(returned) => returned.0,
            },
            None => job,
        };
        job();
    }
}

fn start() -> Option<Mutex<Sender<Job>>> {
    let (tx, rx) = channel::<Job>();
    let rx = Arc::new(Mutex::new(rx));
    let mut started = 0;
    for i in 0..WORKERS {
        let rx = rx.clone();
        match std::thread::Builder::new()
            .name(format!("memofs-sync-{i}"))
            .spawn(move || work(&rx))
        {
            Ok(_) => started += 1,
            Err(e) => log::warn!("no thread for blocking requests ({e})"),
        }
    }
    (started > 0).then(|| Mutex::new(tx))
}

fn work(rx: &Mutex<Receiver<Job>>) {
    loop {
        let job = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
        match job {
            Ok(job) => job(),
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;
    use std::time::Duration;

    #[test]
    fn a_waiting_job_does_not_hold_up_the_caller_or_the_next_job() {
        let b = Blocking::default();
        let (release, wait) = channel::<()>();
        let (done, finished) = channel::<&str>();
        let d1 = done.clone();
        b.run(move || {
            wait.recv().unwrap();
            d1.send("slow").unwrap();
        });
        b.run(move || done.send("quick").unwrap());
        // The caller got here while the first job waits; the second ran on the other worker.
        assert_eq!(finished.recv_timeout(Duration::from_secs(10)), Ok("quick"));
        release.send(()).unwrap();
        assert_eq!(finished.recv_timeout(Duration::from_secs(10)), Ok("slow"));
    }
}
