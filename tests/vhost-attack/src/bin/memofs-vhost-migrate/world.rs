//! What the guest makes before it migrates, with work left in flight, and the checks of
//! every part of it on the server it arrives at.

use std::collections::BTreeSet;

use memofs_proto::abi::{self, opcode};
use memofs_vhost_attack::guest::Guest;
use zerocopy::{FromBytes, FromZeros, IntoBytes};

use crate::ops::{
    batch_ok, call, checksum, close, create, entry_id, name_arg, read, readdir, release, write,
};
use crate::{fill, fold, small, Options, BIG_FILES, FNV, MIB};

/// What the guest holds when it migrates, and what it expects afterwards.
pub struct World {
    /// Every node id the guest was given, with its GETATTR answer.
    nodes: Vec<(u64, Vec<u8>)>,
    /// The large files: node, size, checksum.
    big: Vec<(u64, u64, u64)>,
    /// Small files.
    small: Smalls,
    /// The file open and half written: node, handle, bytes so far.
    writing: (u64, u64, u64),
    /// The file unlinked while open, while the guest holds it: node, handle.
    unlinked: Option<(u64, u64)>,
    /// The directory being listed: node, handle, its names, those listed, the last offset.
    listing: (u64, u64, BTreeSet<String>, Vec<String>, u64),
    /// The file the guest holds open to execute it (a program running): node, handle.
    running: (u64, u64),
}

/// Linux's `__FMODE_EXEC`, in the flags of an OPEN made to execute a file.
const FMODE_EXEC: u32 = 0x20;
/// What the running program holds.
const PROGRAM: &[u8] = b"a program's text";

/// The seed of the half-written file's bytes.
const WRITING_SEED: u64 = 77;
/// Directories the small files are spread over.
const DIRS: usize = 100;

impl World {
    /// Node ids the guest holds.
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }
}

/// The GETATTR answer of every node in `nodes`.
fn getattrs(g: &mut Guest, nodes: impl Iterator<Item = u64>) -> Result<Vec<Vec<u8>>, String> {
    let g_in = abi::fuse_getattr_in::new_zeroed();
    let reqs = nodes
        .map(|n| g.fuse(opcode::GETATTR, n, g_in.as_bytes()))
        .collect();
    batch_ok(g, "GETATTR", reqs, 4096)
}

/// The handle of an OPEN reply.
fn handle(r: &[u8]) -> Result<u64, String> {
    abi::fuse_open_out::read_from_prefix(r)
        .map(|(o, _)| o.fh)
        .map_err(|_| "short open reply".to_string())
}

/// Small files as made: each one's node and index.
type Smalls = Vec<(u64, usize)>;

/// `DIRS` directories and `files` small files spread over them, written and closed:
/// the directories' nodes and the files.
fn make_small(g: &mut Guest, files: usize) -> Result<(Vec<u64>, Smalls), String> {
    let mk = abi::fuse_mkdir_in {
        mode: 0o755,
        umask: 0,
    };
    let dirs: Vec<Vec<u8>> = (0..DIRS)
        .map(|d| g.fuse(opcode::MKDIR, 1, &name_arg(mk, &format!("d{d:03}"))))
        .collect();
    let dirs: Vec<u64> = batch_ok(g, "MKDIR", dirs, 4096)?
        .iter()
        .map(|r| entry_id(r))
        .collect::<Result<_, _>>()?;
    let c = abi::fuse_create_in {
        flags: libc::O_RDWR as u32,
        mode: 0o644,
        ..FromZeros::new_zeroed()
    };
    let creates: Vec<Vec<u8>> = (0..files)
        .map(|i| {
            let name = name_arg(c, &format!("f{i:05}"));
            g.fuse(opcode::CREATE, dirs[i % DIRS], &name)
        })
        .collect();
    let created = batch_ok(g, "CREATE", creates, 4096)?;
    let (mut made, mut writes, mut releases) = (Vec::new(), Vec::new(), Vec::new());
    for (i, r) in created.iter().enumerate() {
        let node = entry_id(r)?;
        let fh = handle(r.get(128..).unwrap_or_default())?;
        let data = small(i);
        let w = abi::fuse_write_in {
            fh,
            size: data.len() as u32,
            ..FromZeros::new_zeroed()
        };
        let mut body = w.as_bytes().to_vec();
        body.extend_from_slice(&data);
        writes.push(g.fuse(opcode::WRITE, node, &body));
        releases.push(release(node, fh, g, false));
        made.push((node, i));
    }
    batch_ok(g, "WRITE", writes, 64)?;
    batch_ok(g, "RELEASE", releases, 64)?;
    Ok((dirs, made))
}

/// `BIG_FILES` files of `mib / BIG_FILES` MiB each, written 1 MiB at a time: (node, size,
/// checksum) of each.
fn make_big(g: &mut Guest, mib: usize) -> Result<Vec<(u64, u64, u64)>, String> {
    let per = (mib / BIG_FILES) as u64 * MIB as u64;
    let mut big = Vec::new();
    let mut buf = vec![0u8; MIB];
    for b in 0..BIG_FILES {
        let (node, fh) = create(g, 1, &format!("big{b}"))?;
        let mut h = FNV;
        for at in (0..per).step_by(MIB) {
            fill(b as u64, at, &mut buf);
            h = fold(h, &buf);
            write(g, node, fh, at, &buf)?;
        }
        close(g, node, fh, false)?;
        big.push((node, per, h));
    }
    Ok(big)
}

/// Makes the guest's files, and leaves work in flight.
pub fn build(o: &Options, g: &mut Guest) -> Result<World, String> {
    let (dirs, small) = make_small(g, o.files)?;
    let big = make_big(g, o.mib)?;
    let (wnode, wfh) = create(g, 1, "writing")?;
    let mut buf = vec![0u8; MIB];
    for at in (0..3 * MIB as u64).step_by(MIB) {
        fill(WRITING_SEED, at, &mut buf);
        write(g, wnode, wfh, at, &buf)?;
    }
    let (pnode, pfh) = create(g, 1, "program")?;
    write(g, pnode, pfh, 0, PROGRAM)?;
    close(g, pnode, pfh, false)?;
    let exec = abi::fuse_open_in {
        flags: libc::O_RDONLY as u32 | FMODE_EXEC,
        open_flags: 0,
    };
    let running = handle(&call(g, opcode::OPEN, pnode, exec.as_bytes(), 64)?)?;
    let (unode, ufh) = create(g, 1, "unlinked")?;
    write(g, unode, ufh, 0, b"unlinked but open")?;
    call(g, opcode::UNLINK, 1, b"unlinked\0", 64)?;
    let listed_dir = dirs[0];
    let names: BTreeSet<String> = (0..o.files)
        .filter(|i| i % DIRS == 0)
        .map(|i| format!("f{i:05}"))
        .chain([".".to_string(), "..".to_string()])
        .collect();
    let open = abi::fuse_open_in::new_zeroed();
    // A server may decline OPENDIR for good (ENOSYS): the kernel then lists with handle 0.
    let dfh = match g.call(opcode::OPENDIR, listed_dir, open.as_bytes(), 64) {
        Some((0, r)) => handle(&r)?,
        Some((e, _)) if e == -libc::ENOSYS => 0,
        other => return Err(format!("OPENDIR: {other:?}")),
    };
    let first = readdir(g, listed_dir, dfh, 0, 512)?;
    let last = first.last().map_or(0, |(_, off)| *off);
    let listed = first.into_iter().map(|(n, _)| n).collect();
    let nodes: Vec<u64> = dirs
        .iter()
        .copied()
        .chain(small.iter().map(|(n, _)| *n))
        .chain(big.iter().map(|(n, _, _)| *n))
        .chain([wnode, unode, pnode])
        .collect();
    let attrs = getattrs(g, nodes.iter().copied())?;
    Ok(World {
        nodes: nodes.into_iter().zip(attrs).collect(),
        big,
        small,
        writing: (wnode, wfh, 3 * MIB as u64),
        unlinked: Some((unode, ufh)),
        listing: (listed_dir, dfh, names, listed, last),
        running: (pnode, running),
    })
}

/// A check of the destination: a note on success, or what is wrong.
type Check = fn(&mut Guest, &World) -> Result<String, String>;

/// Every check of the destination, by name.
pub const CHECKS: &[(&str, Check)] = &[
    ("every-node-answers-the-same-attributes", same_attributes),
    ("a-listing-goes-on-where-it-was", listing_goes_on),
    ("a-file-being-written-goes-on", writing_goes_on),
    ("an-unlinked-open-file-still-reads", unlinked_reads),
    ("every-byte-arrived", every_byte),
    ("new-files-take-new-node-ids", new_node_ids),
    ("a-running-program-is-not-truncated", running_program),
];

/// The file held open to execute it: a truncating read-only open fails (`ETXTBSY`, as on
/// the source) and leaves it whole; once released it truncates.
fn running_program(g: &mut Guest, w: &World) -> Result<String, String> {
    let (node, fh) = w.running;
    let trunc = abi::fuse_open_in {
        flags: (libc::O_RDONLY | libc::O_TRUNC) as u32,
        open_flags: 0,
    };
    match g.call(opcode::OPEN, node, trunc.as_bytes(), 64) {
        Some((e, _)) if e == -libc::ETXTBSY => {}
        other => return Err(format!("O_TRUNC open of the running program: {other:?}")),
    }
    let open = abi::fuse_open_in::new_zeroed();
    let rfh = handle(&call(g, opcode::OPEN, node, open.as_bytes(), 64)?)?;
    let text = read(g, node, rfh, 0, 4096)?;
    close(g, node, rfh, false)?;
    if text != PROGRAM {
        return Err(format!("the program holds {text:?}"));
    }
    close(g, node, fh, false)?;
    let tfh = handle(&call(g, opcode::OPEN, node, trunc.as_bytes(), 64)?)?;
    close(g, node, tfh, false)?;
    Ok("ETXTBSY while running, truncated once released".into())
}

fn same_attributes(g: &mut Guest, w: &World) -> Result<String, String> {
    let now = getattrs(g, w.nodes.iter().map(|(n, _)| *n))?;
    for ((node, before), now) in w.nodes.iter().zip(now) {
        if *before != now {
            return Err(format!("node {node}: attributes differ"));
        }
    }
    Ok(format!("{} nodes", w.nodes.len()))
}

fn listing_goes_on(g: &mut Guest, w: &World) -> Result<String, String> {
    let (dir, fh, names, listed, mut last) = w.listing.clone();
    let mut seen = listed.clone();
    loop {
        let more = readdir(g, dir, fh, last, 4096)?;
        let Some((_, off)) = more.last() else { break };
        last = *off;
        seen.extend(more.into_iter().map(|(n, _)| n));
    }
    if fh != 0 {
        close(g, dir, fh, true)?;
    }
    let unique: BTreeSet<String> = seen.iter().cloned().collect();
    if unique.len() != seen.len() || unique != names {
        return Err(format!(
            "{} names listed ({} before the move), {} distinct, {} expected",
            seen.len(),
            listed.len(),
            unique.len(),
            names.len()
        ));
    }
    Ok(format!(
        "{} of {} listed before the move",
        listed.len(),
        names.len()
    ))
}

fn writing_goes_on(g: &mut Guest, w: &World) -> Result<String, String> {
    let (node, fh, done) = w.writing;
    let end = done + 2 * MIB as u64;
    let mut buf = vec![0u8; MIB];
    let mut h = FNV;
    for at in (0..end).step_by(MIB) {
        fill(WRITING_SEED, at, &mut buf);
        h = fold(h, &buf);
        if at >= done {
            write(g, node, fh, at, &buf)?;
        }
    }
    let got = checksum(g, node, fh, end)?;
    close(g, node, fh, false)?;
    match got == h {
        true => Ok(String::new()),
        false => Err("its bytes differ".into()),
    }
}

/// The guest's kernel lets go of the unlinked file once it is closed (FORGET): the guest
/// holds it no more.
pub fn forget_unlinked(g: &mut Guest, w: &mut World) {
    if let Some((node, _)) = w.unlinked.take() {
        let f = abi::fuse_forget_in { nlookup: 1 };
        let req = g.fuse(opcode::FORGET, node, f.as_bytes());
        g.request(&req, 64);
        w.nodes.retain(|(n, _)| *n != node);
    }
}

/// Reads the file unlinked while open, and closes it.
pub fn unlinked_reads(g: &mut Guest, w: &World) -> Result<String, String> {
    let Some((node, fh)) = w.unlinked else {
        return Ok("none held any more".into());
    };
    let got = read(g, node, fh, 0, 4096)?;
    close(g, node, fh, false)?;
    match got == b"unlinked but open" {
        true => Ok(String::new()),
        false => Err(format!("read {got:?}")),
    }
}

fn every_byte(g: &mut Guest, w: &World) -> Result<String, String> {
    let mut total = 0;
    let open = abi::fuse_open_in::new_zeroed();
    for &(node, size, want) in &w.big {
        let fh = handle(&call(g, opcode::OPEN, node, open.as_bytes(), 64)?)?;
        if checksum(g, node, fh, size)? != want {
            return Err(format!("node {node}: checksum differs"));
        }
        close(g, node, fh, false)?;
        total += size;
    }
    let opens = w
        .small
        .iter()
        .map(|(n, _)| g.fuse(opcode::OPEN, *n, open.as_bytes()))
        .collect();
    let fhs: Vec<u64> = batch_ok(g, "OPEN", opens, 64)?
        .iter()
        .map(|r| handle(r))
        .collect::<Result<_, _>>()?;
    let reads = w
        .small
        .iter()
        .zip(&fhs)
        .map(|((n, _), fh)| {
            let r = abi::fuse_read_in {
                fh: *fh,
                size: 64 << 10,
                ..FromZeros::new_zeroed()
            };
            g.fuse(opcode::READ, *n, r.as_bytes())
        })
        .collect();
    let data = batch_ok(g, "READ", reads, (64 << 10) + 64)?;
    for (&(node, i), d) in w.small.iter().zip(&data) {
        if *d != small(i) {
            return Err(format!("small file {i} (node {node}) differs"));
        }
        total += d.len() as u64;
    }
    let releases = w
        .small
        .iter()
        .zip(&fhs)
        .map(|((n, _), fh)| release(*n, *fh, g, false))
        .collect();
    batch_ok(g, "RELEASE", releases, 64)?;
    Ok(format!(
        "{} files, {total} bytes",
        w.big.len() + w.small.len()
    ))
}

fn new_node_ids(g: &mut Guest, w: &World) -> Result<String, String> {
    let (node, fh) = create(g, 1, "after")?;
    close(g, node, fh, false)?;
    match w.nodes.iter().any(|(n, _)| *n == node) {
        false => Ok(String::new()),
        true => Err(format!("node {node}, which the guest already holds")),
    }
}

/// The guest goes on working while its VM migrates (pre-copy), with the server's dirty log on:
/// it reads a large file 1 MiB at a time, lists a directory, looks at every node's
/// attributes and writes a new file. Every page of guest memory the server wrote meanwhile
/// (replies, READ data, used ring entries) must be marked in the log, or the VMM would hand
/// the destination those pages as they were before. The attributes the guest then expects
/// are those it saw last (the read moved an atime).
pub fn logged_while_precopy(g: &mut Guest, w: &mut World) -> Result<String, String> {
    let log = g.log_all().map_err(|e| format!("logging: {e}"))?;
    let open = abi::fuse_open_in::new_zeroed();
    let &(node, size, _) = w.big.first().ok_or("no large file")?;
    let fh = handle(&call(g, opcode::OPEN, node, open.as_bytes(), 64)?)?;
    checksum(g, node, fh, size.min(4 * MIB as u64))?;
    close(g, node, fh, false)?;
    let (dir, ..) = w.listing;
    let dfh = match g.call(opcode::OPENDIR, dir, open.as_bytes(), 64) {
        Some((0, r)) => handle(&r)?,
        _ => 0,
    };
    readdir(g, dir, dfh, 0, 4096)?;
    if dfh != 0 {
        close(g, dir, dfh, true)?;
    }
    let (new, nfh) = create(g, 1, "during-precopy")?;
    write(g, new, nfh, 0, b"written while the VM migrates")?;
    close(g, new, nfh, false)?;
    let attrs = getattrs(g, w.nodes.iter().map(|(n, _)| *n))?;
    for ((_, before), now) in w.nodes.iter_mut().zip(attrs) {
        *before = now;
    }
    let (unlogged, marked) = g.unlogged_writes(&log).map_err(|e| e.to_string())?;
    // A 1 MiB READ reply alone spans 257 pages: a log that marks fewer missed some.
    match (unlogged.is_empty(), marked > 256) {
        (true, true) => Ok(format!("{marked} pages marked")),
        (false, _) => Err(format!(
            "{} pages written by the server and not marked, the first at guest address {:#x}",
            unlogged.len(),
            unlogged[0] * memofs_vhost_attack::guest::PAGE
        )),
        (true, false) => Err(format!(
            "only {marked} pages marked for a 1 MiB READ and more"
        )),
    }
}
