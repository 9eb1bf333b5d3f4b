//! The pre-copy channel's ends ([`memofs_core::migrate::Precopy`]): a backend's file data
//! sent ahead of the state, from the server a VM leaves to the one it arrives at, while the
//! VM still runs.
//!
//! The vhost-user protocol moves a device's state only in the stopped phase, so whatever is
//! in it is downtime; the channel is the two servers' own. The destination listens on an
//! address it was given at start ([`Incoming`]); the source is handed a connected socket by
//! the operator (`memofs migrate SOCKET ADDRESS`, through the control socket: the server
//! itself opens no connection, whatever its sandbox) and sends on it until the VMM asks
//! for its state ([`Sending::finish`]). What the channel carried is named in the state,
//! which the destination checks it against.

use std::io::{self, BufReader, BufWriter, Read};
use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use memofs_core::migrate::Sent;
use memofs_core::Backend;

use crate::guest::GuestFs;

/// Buffered bytes each way (a chunk and its frame header).
const BUFFER: usize = 2 << 20;

/// Where a destination listens for a source's channel.
pub enum Incoming {
    /// A TCP address.
    Tcp(TcpListener),
    /// A unix socket.
    Unix(UnixListener),
}

impl Incoming {
    fn accept(&self) -> io::Result<Box<dyn Read + Send>> {
        Ok(match self {
            Incoming::Tcp(l) => Box::new(l.accept()?.0),
            Incoming::Unix(l) => Box::new(l.accept()?.0),
        })
    }
}

/// Takes channels on `incoming`, one after another, for as long as the server runs: each
/// one's data is kept aside for the state that names it.
pub(crate) fn receive<B: Backend + 'static>(
    fs: Arc<GuestFs<B>>,
    incoming: Incoming,
) -> io::Result<()> {
    if fs.backend().migration().and_then(|m| m.precopy()).is_none() {
        return Err(io::Error::other(
            "this backend sends no data ahead: its files stay where they are",
        ));
    }
    std::thread::Builder::new()
        .name("memofs-ahead".into())
        .spawn(move || loop {
            let conn = match incoming.accept() {
                Ok(c) => c,
                Err(e) => {
                    log::warn!("pre-copy: accepting a channel: {e}");
                    continue;
                }
            };
            let Some(pre) = fs.backend().migration().and_then(|m| m.precopy()) else {
                return;
            };
            match pre.receive(&mut BufReader::with_capacity(BUFFER, conn)) {
                Ok(sent) => log::info!("pre-copy: a channel of {} frames arrived", sent.frames),
                Err(e) => log::warn!("pre-copy: a channel ended badly: {e}"),
            }
        })?;
    Ok(())
}

/// A source's channel under way.
pub(crate) struct Sending {
    stop: Arc<AtomicBool>,
    job: JoinHandle<io::Result<Sent>>,
}

impl Sending {
    /// Starts sending `fs`'s data on `channel`; each round's bytes go to the receiver
    /// returned (the first tells that every file's data went once).
    pub(crate) fn start<B: Backend + 'static>(
        fs: Arc<GuestFs<B>>,
        channel: std::fs::File,
    ) -> io::Result<(Sending, mpsc::Receiver<u64>)> {
        if fs.backend().migration().and_then(|m| m.precopy()).is_none() {
            return Err(io::Error::other(
                "this backend sends no data ahead: its files stay where they are",
            ));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (rounds, rounds_rx) = mpsc::channel();
        let halt = stop.clone();
        let job = std::thread::Builder::new()
            .name("memofs-ahead".into())
            .spawn(move || {
                let pre = fs
                    .backend()
                    .migration()
                    .and_then(|m| m.precopy())
                    .expect("checked at start");
                let mut out = BufWriter::with_capacity(BUFFER, channel);
                pre.send(&mut out, &halt, &mut |bytes| {
                    let _ = rounds.send(bytes);
                })
            })?;
        Ok((Sending { stop, job }, rounds_rx))
    }

    /// The VMM asks for the state: the channel ends (what it did not carry goes in the
    /// state); how it ended.
    pub(crate) fn finish(self) -> io::Result<Sent> {
        self.stop.store(true, Ordering::Release);
        let ended = self
            .job
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the sending thread panicked")));
        match &ended {
            Ok(sent) => log::info!("pre-copy: channel ended after {} frames", sent.frames),
            Err(e) => log::warn!("pre-copy failed ({e}): the state carries all the data"),
        }
        ended
    }
}
