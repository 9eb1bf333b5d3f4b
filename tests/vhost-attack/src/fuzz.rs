//! Mutated requests: a corpus of valid ones (what a guest's kernel sends while it works
//! with a small tree), each sent with its bytes changed at random, in batches.

use std::time::Duration;

use memofs_proto::abi::{self, opcode};
use zerocopy::{FromZeros, IntoBytes};

use crate::guest::{Guest, QSIZE, REQ};

/// A small deterministic generator (xorshift64*), so that a failing run can be repeated with
/// its seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn name(n: &str) -> Vec<u8> {
    let mut v = n.as_bytes().to_vec();
    v.push(0);
    v
}

fn with_name<T: IntoBytes + zerocopy::Immutable>(head: &T, names: &[&str]) -> Vec<u8> {
    let mut v = head.as_bytes().to_vec();
    for n in names {
        v.extend(name(n));
    }
    v
}

/// Valid requests about the root (1) and the node ids a guest would have learnt (`nodes`).
fn corpus(g: &mut Guest, nodes: &[u64]) -> Vec<Vec<u8>> {
    let n = |i: usize| nodes.get(i).copied().unwrap_or(1);
    let read = abi::fuse_read_in {
        size: 4096,
        ..FromZeros::new_zeroed()
    };
    let mut write = abi::fuse_write_in {
        size: 8,
        ..FromZeros::new_zeroed()
    };
    write.offset = 4096;
    let mut w = write.as_bytes().to_vec();
    w.extend(b"abcdefgh");
    let setattr = abi::fuse_setattr_in {
        valid: 1 | 8,
        mode: 0o600,
        size: 100,
        ..FromZeros::new_zeroed()
    };
    let xattr = abi::fuse_setxattr_in {
        size: 3,
        ..FromZeros::new_zeroed()
    };
    let mut x = with_name(&xattr, &["user.fuzz"]);
    x.extend(b"abc");
    let reqs: Vec<(u32, u64, Vec<u8>)> = vec![
        (opcode::LOOKUP, 1, name("f")),
        (opcode::LOOKUP, 1, name("d")),
        (
            opcode::GETATTR,
            n(0),
            abi::fuse_getattr_in::new_zeroed().as_bytes().to_vec(),
        ),
        (opcode::SETATTR, n(0), setattr.as_bytes().to_vec()),
        (
            opcode::MKDIR,
            1,
            with_name(
                &abi::fuse_mkdir_in {
                    mode: 0o755,
                    umask: 0,
                },
                &["fd"],
            ),
        ),
        (
            opcode::CREATE,
            n(1),
            with_name(
                &abi::fuse_create_in {
                    flags: 2,
                    mode: 0o644,
                    ..FromZeros::new_zeroed()
                },
                &["fc"],
            ),
        ),
        (
            opcode::MKNOD,
            1,
            with_name(
                &abi::fuse_mknod_in {
                    mode: 0o010644,
                    ..FromZeros::new_zeroed()
                },
                &["fifo"],
            ),
        ),
        (opcode::SYMLINK, 1, [name("fl"), name("f")].concat()),
        (
            opcode::LINK,
            1,
            with_name(&abi::fuse_link_in { oldnodeid: n(0) }, &["fh"]),
        ),
        (
            opcode::RENAME,
            1,
            with_name(&abi::fuse_rename_in { newdir: n(1) }, &["fl", "fm"]),
        ),
        (opcode::UNLINK, 1, name("fh")),
        (opcode::RMDIR, 1, name("fd")),
        (
            opcode::OPEN,
            n(0),
            abi::fuse_open_in {
                flags: 2,
                open_flags: 0,
            }
            .as_bytes()
            .to_vec(),
        ),
        (opcode::READ, n(0), read.as_bytes().to_vec()),
        (opcode::WRITE, n(0), w),
        (opcode::READDIR, 1, read.as_bytes().to_vec()),
        (opcode::READDIRPLUS, 1, read.as_bytes().to_vec()),
        (opcode::STATFS, 1, Vec::new()),
        (opcode::SETXATTR, n(0), x),
        (
            opcode::GETXATTR,
            n(0),
            with_name(
                &abi::fuse_getxattr_in {
                    size: 64,
                    padding: 0,
                },
                &["user.fuzz"],
            ),
        ),
        (
            opcode::LISTXATTR,
            n(0),
            abi::fuse_getxattr_in {
                size: 256,
                padding: 0,
            }
            .as_bytes()
            .to_vec(),
        ),
        (opcode::REMOVEXATTR, n(0), name("user.fuzz")),
        (
            opcode::FLUSH,
            n(0),
            abi::fuse_flush_in::new_zeroed().as_bytes().to_vec(),
        ),
        (
            opcode::FSYNC,
            n(0),
            abi::fuse_fsync_in::new_zeroed().as_bytes().to_vec(),
        ),
        (
            opcode::RELEASE,
            n(0),
            abi::fuse_release_in::new_zeroed().as_bytes().to_vec(),
        ),
        (
            opcode::OPENDIR,
            1,
            abi::fuse_open_in::new_zeroed().as_bytes().to_vec(),
        ),
        (
            opcode::RELEASEDIR,
            1,
            abi::fuse_release_in::new_zeroed().as_bytes().to_vec(),
        ),
        (
            opcode::ACCESS,
            n(0),
            abi::fuse_access_in {
                mask: 4,
                padding: 0,
            }
            .as_bytes()
            .to_vec(),
        ),
        (
            opcode::FORGET,
            n(0),
            abi::fuse_forget_in { nlookup: 1 }.as_bytes().to_vec(),
        ),
        (opcode::SYNCFS, 1, vec![0; 8]),
    ];
    reqs.into_iter()
        .map(|(op, node, body)| g.fuse(op, node, &body))
        .collect()
}

/// One mutation of `req`: bytes flipped, the length or a field replaced, the request cut
/// short or grown, another opcode or node.
fn mutate(rng: &mut Rng, req: &[u8]) -> Vec<u8> {
    let mut v = req.to_vec();
    match rng.below(8) {
        0 | 1 => {
            for _ in 0..1 + rng.below(8) {
                let i = rng.below(v.len() as u64) as usize;
                v[i] ^= 1 << rng.below(8);
            }
        }
        2 => v.truncate(rng.below(v.len() as u64) as usize),
        3 => {
            let extra = rng.below(512) as usize;
            v.extend((0..extra).map(|_| rng.next() as u8));
        }
        4 => v[0..4].copy_from_slice(&(rng.next() as u32).to_le_bytes()),
        5 => {
            // Another opcode, the header's length kept.
            let op = rng.below(60) as u32;
            if op != opcode::INIT {
                v[4..8].copy_from_slice(&op.to_le_bytes());
            }
        }
        6 => v[16..24].copy_from_slice(&rng.next().to_le_bytes()),
        _ => {
            // A word of the arguments set to an extreme.
            if v.len() >= 48 {
                let at = 40 + 8 * rng.below(((v.len() - 40) / 8) as u64) as usize;
                let word = [0, u64::MAX, 1 << 63, u32::MAX as u64][rng.below(4) as usize];
                v[at..at + 8].copy_from_slice(&word.to_le_bytes());
            }
        }
    }
    v
}

/// Sends `count` mutated requests in batches; returns how many chains came back.
pub fn run(g: &mut Guest, rng: &mut Rng, count: usize) -> usize {
    let mut nodes = Vec::new();
    // A small tree first, so that the corpus names real nodes.
    if let Ok((node, _)) = g.create("f") {
        nodes.push(node);
    }
    let d = abi::fuse_mkdir_in {
        mode: 0o755,
        umask: 0,
    };
    if let Some((0, r)) = g.call(opcode::MKDIR, 1, &with_name(&d, &["d"]), 4096) {
        nodes.push(u64::from_le_bytes(r[..8].try_into().expect("8 bytes")));
    }
    let corpus = corpus(g, &nodes);
    let mut back = 0;
    let per_batch = QSIZE as usize / 2;
    let mut sent = 0;
    while sent < count {
        let n = per_batch.min(count - sent);
        let batch: Vec<Vec<u8>> = (0..n)
            .map(|_| {
                let pick = rng.below(corpus.len() as u64) as usize;
                mutate(rng, &corpus[pick])
            })
            .collect();
        let came = g
            .batch(REQ, &batch, 8192, Duration::from_secs(10))
            .iter()
            .flatten()
            .count();
        if came == 0 {
            // The queue is silent: nothing more would come back.
            break;
        }
        back += came;
        sent += n;
    }
    back
}
