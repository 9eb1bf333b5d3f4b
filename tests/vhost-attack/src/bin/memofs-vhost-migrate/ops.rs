//! The FUSE requests the migrating guest sends, one at a time or in batches.

use std::time::Duration;

use memofs_proto::abi::{self, opcode};
use memofs_vhost_attack::guest::{split_reply, Guest, REQ};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

use crate::{fold, FNV, MIB};

/// Chains per batch (a queue holds 256 descriptors, two per chain).
const BATCH: usize = 100;

/// A request's arguments followed by a NUL-terminated name.
pub fn name_arg(body: impl IntoBytes + zerocopy::Immutable, name: &str) -> Vec<u8> {
    let mut v = body.as_bytes().to_vec();
    v.extend(name.as_bytes());
    v.push(0);
    v
}

pub fn entry_id(r: &[u8]) -> Result<u64, String> {
    abi::fuse_entry_out::read_from_prefix(r)
        .map(|(e, _)| e.nodeid)
        .map_err(|_| "short entry reply".to_string())
}

/// Sends `reqs` in batches; each answer's (error, body), or an error naming the first
/// request left unanswered.
pub fn batch(g: &mut Guest, reqs: Vec<Vec<u8>>, room: u32) -> Result<Vec<(i32, Vec<u8>)>, String> {
    let mut out = Vec::with_capacity(reqs.len());
    for chunk in reqs.chunks(BATCH) {
        for r in g.batch(REQ, chunk, room, Duration::from_secs(30)) {
            out.push(
                r.and_then(|r| split_reply(&r))
                    .ok_or_else(|| format!("request {} not answered", out.len()))?,
            );
        }
    }
    Ok(out)
}

/// `batch`, every answer a success.
pub fn batch_ok(
    g: &mut Guest,
    what: &str,
    reqs: Vec<Vec<u8>>,
    room: u32,
) -> Result<Vec<Vec<u8>>, String> {
    batch(g, reqs, room)?
        .into_iter()
        .enumerate()
        .map(|(i, (e, body))| match e {
            0 => Ok(body),
            e => Err(format!("{what} {i}: error {e}")),
        })
        .collect()
}

pub fn call(g: &mut Guest, op: u32, node: u64, body: &[u8], room: u32) -> Result<Vec<u8>, String> {
    match g.call(op, node, body, room) {
        Some((0, r)) => Ok(r),
        Some((e, _)) => Err(format!("opcode {op} on {node}: error {e}")),
        None => Err(format!("opcode {op} on {node}: no answer")),
    }
}

pub fn write(g: &mut Guest, node: u64, fh: u64, offset: u64, data: &[u8]) -> Result<(), String> {
    let w = abi::fuse_write_in {
        fh,
        offset,
        size: data.len() as u32,
        ..FromZeros::new_zeroed()
    };
    let mut body = w.as_bytes().to_vec();
    body.extend_from_slice(data);
    call(g, opcode::WRITE, node, &body, 64).map(|_| ())
}

pub fn read(g: &mut Guest, node: u64, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>, String> {
    let r = abi::fuse_read_in {
        fh,
        offset,
        size,
        ..FromZeros::new_zeroed()
    };
    call(g, opcode::READ, node, r.as_bytes(), size + 64)
}

pub fn create(g: &mut Guest, parent: u64, name: &str) -> Result<(u64, u64), String> {
    let c = abi::fuse_create_in {
        flags: libc::O_RDWR as u32,
        mode: 0o644,
        ..FromZeros::new_zeroed()
    };
    let r = call(g, opcode::CREATE, parent, &name_arg(c, name), 4096)?;
    let fh = abi::fuse_open_out::read_from_prefix(&r[128..])
        .map_err(|_| "short CREATE reply")?
        .0
        .fh;
    Ok((entry_id(&r)?, fh))
}

pub fn release(node: u64, fh: u64, g: &mut Guest, dir: bool) -> Vec<u8> {
    let r = abi::fuse_release_in {
        fh,
        flags: libc::O_RDWR as u32,
        ..FromZeros::new_zeroed()
    };
    let op = if dir {
        opcode::RELEASEDIR
    } else {
        opcode::RELEASE
    };
    g.fuse(op, node, r.as_bytes())
}

/// RELEASE (or RELEASEDIR) of handle `fh` of `node`.
pub fn close(g: &mut Guest, node: u64, fh: u64, dir: bool) -> Result<(), String> {
    let req = release(node, fh, g, dir);
    match g.request(&req, 64).and_then(|r| split_reply(&r)) {
        Some((0, _)) => Ok(()),
        other => Err(format!("RELEASE of {node}: {other:?}")),
    }
}

/// Reads a whole file through `fh`, folding it into a checksum.
pub fn checksum(g: &mut Guest, node: u64, fh: u64, size: u64) -> Result<u64, String> {
    let mut h = FNV;
    let mut at = 0;
    while at < size {
        let data = read(g, node, fh, at, MIB as u32)?;
        if data.is_empty() {
            return Err(format!("node {node}: nothing at {at} of {size}"));
        }
        h = fold(h, &data);
        at += data.len() as u64;
    }
    Ok(h)
}

/// The names and offsets a READDIR reply lists.
pub fn dirents(mut r: &[u8]) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    while let Ok((d, rest)) = abi::fuse_dirent::read_from_prefix(r) {
        let len = d.namelen as usize;
        let name = String::from_utf8_lossy(&rest[..len.min(rest.len())]).into_owned();
        out.push((name, d.off));
        let rec = (24 + len).div_ceil(8) * 8;
        r = &r[rec.min(r.len())..];
    }
    out
}

pub fn readdir(
    g: &mut Guest,
    dir: u64,
    fh: u64,
    offset: u64,
    size: u32,
) -> Result<Vec<(String, u64)>, String> {
    let r = abi::fuse_read_in {
        fh,
        offset,
        size,
        ..FromZeros::new_zeroed()
    };
    call(g, opcode::READDIR, dir, r.as_bytes(), size + 64).map(|b| dirents(&b))
}
