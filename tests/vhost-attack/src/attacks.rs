//! What a hostile guest sends: requests a guest's kernel never would, and descriptor chains
//! and rings no driver would lay out. Each attack returns `Err` with what went wrong on the
//! server's side; the caller checks after each one that the server still answers a valid
//! request and that nothing outside the shared directory changed.

use std::time::Duration;

use memofs_proto::abi::{self, opcode};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

use crate::guest::{split_reply, Desc, Guest, MEM_SIZE, NEXT, QSIZE, REQ, WRITE};

/// An attack: its name and what it does.
pub type Attack = (&'static str, fn(&mut Guest) -> Result<(), String>);

/// Every attack on requests and on chains, in the order they run.
pub const ATTACKS: &[Attack] = &[
    ("lookup-dot-dot-at-root", lookup_dot_dot),
    ("lookup-odd-names", lookup_odd_names),
    ("names-without-nul", names_without_nul),
    ("inodes-never-handed-out", unknown_inodes),
    ("forget-unknown-inodes", forget_unknown),
    ("rename-and-unlink-out-of-the-share", rename_out),
    ("huge-offsets-and-sizes", huge_offsets),
    ("read-into-scattered-buffers", scattered_read),
    ("header-length-disagrees", header_lengths),
    ("descriptor-outside-memory", outside_memory),
    ("zero-length-descriptors", zero_length),
    ("descriptor-near-4-gib", near_4g),
    ("wrong-direction", wrong_direction),
    ("looping-chain", looping_chain),
    ("looping-indirect-table", looping_indirect),
    ("head-outside-the-queue", bad_head),
    ("avail-index-jumps-ahead", avail_jump),
];

/// A descriptor: `addr`, `len`, `flags`, `next`.
fn desc(addr: u64, len: u32, flags: u16, next: u16) -> Desc {
    Desc {
        addr,
        len,
        flags,
        next,
    }
}

/// `name` with its NUL, as FUSE carries names.
fn cstr(name: &[u8]) -> Vec<u8> {
    let mut v = name.to_vec();
    v.push(0);
    v
}

/// The node id an entry reply names (0 for a negative entry), or the error.
fn entry(r: Option<(i32, Vec<u8>)>) -> Result<u64, i32> {
    match r {
        Some((0, body)) => {
            Ok(abi::fuse_entry_out::read_from_prefix(&body).map_or(0, |(e, _)| e.nodeid))
        }
        Some((e, _)) => Err(e),
        None => Err(0),
    }
}

fn lookup(g: &mut Guest, parent: u64, name: &[u8]) -> Result<u64, i32> {
    entry(g.call(opcode::LOOKUP, parent, &cstr(name), 4096))
}

fn lookup_dot_dot(g: &mut Guest) -> Result<(), String> {
    for name in [&b".."[..], b"."] {
        match lookup(g, 1, name) {
            // Answered as the root itself, or refused: never a node above the share.
            Ok(0 | 1) | Err(_) => {}
            Ok(n) => {
                let attr = g.call(
                    opcode::GETATTR,
                    n,
                    abi::fuse_getattr_in::new_zeroed().as_bytes(),
                    4096,
                );
                let root = g.call(
                    opcode::GETATTR,
                    1,
                    abi::fuse_getattr_in::new_zeroed().as_bytes(),
                    4096,
                );
                if attr.map(|a| a.1.get(16..24).map(<[u8]>::to_vec))
                    != root.map(|a| a.1.get(16..24).map(<[u8]>::to_vec))
                {
                    return Err(format!(
                        "LOOKUP {:?} at the root named node {n}, not the root",
                        String::from_utf8_lossy(name)
                    ));
                }
            }
        }
    }
    Ok(())
}

fn lookup_odd_names(g: &mut Guest) -> Result<(), String> {
    let long = vec![b'a'; 256];
    let longer = vec![b'b'; 4096];
    for name in [&b"a/b"[..], b"/etc", b"../canary", &long, &longer, b""] {
        if let Ok(n) = lookup(g, 1, name) {
            if n != 0 {
                return Err(format!(
                    "LOOKUP of a {}-byte odd name found node {n}",
                    name.len()
                ));
            }
        }
        let mkdir = abi::fuse_mkdir_in {
            mode: 0o755,
            umask: 0,
        };
        let mut body = mkdir.as_bytes().to_vec();
        body.extend(cstr(name));
        if let Some((0, _)) = g.call(opcode::MKDIR, 1, &body, 4096) {
            return Err(format!("MKDIR of a {}-byte odd name succeeded", name.len()));
        }
    }
    Ok(())
}

fn names_without_nul(g: &mut Guest) -> Result<(), String> {
    for op in [
        opcode::LOOKUP,
        opcode::UNLINK,
        opcode::RMDIR,
        opcode::SYMLINK,
        opcode::GETXATTR,
    ] {
        if let Some((0, _)) = g.call(op, 1, b"no-terminator", 4096) {
            return Err(format!("opcode {op} with a name without NUL succeeded"));
        }
    }
    Ok(())
}

fn unknown_inodes(g: &mut Guest) -> Result<(), String> {
    for node in [0, 2, 0xdead_beef, u64::MAX, u64::MAX - 1, 1 << 63] {
        let r = g.call(
            opcode::GETATTR,
            node,
            abi::fuse_getattr_in::new_zeroed().as_bytes(),
            4096,
        );
        if let Some((0, _)) = r {
            // The passthrough backend hands out host inode numbers: 2 may exist only
            // if the guest learnt it; nothing else was handed out.
            if node != 2 {
                return Err(format!(
                    "GETATTR of node {node:#x}, never handed out, succeeded"
                ));
            }
        }
        let _ = g.call(opcode::LOOKUP, node, &cstr(b"x"), 4096);
        let _ = g.call(
            opcode::OPENDIR,
            node,
            abi::fuse_open_in::new_zeroed().as_bytes(),
            4096,
        );
    }
    Ok(())
}

fn forget_unknown(g: &mut Guest) -> Result<(), String> {
    for node in [0, 1, 0xdead_beef, u64::MAX] {
        let f = abi::fuse_forget_in { nlookup: u64::MAX };
        let req = g.fuse(opcode::FORGET, node, f.as_bytes());
        g.request(&req, 4096);
    }
    // BATCH_FORGET claiming more entries than it carries.
    let b = abi::fuse_batch_forget_in {
        count: u32::MAX,
        dummy: 0,
    };
    let req = g.fuse(opcode::BATCH_FORGET, 0, b.as_bytes());
    g.request(&req, 4096);
    Ok(())
}

fn rename_out(g: &mut Guest) -> Result<(), String> {
    let _ = g.create("victim");
    let r = abi::fuse_rename_in { newdir: 1 };
    let mut body = r.as_bytes().to_vec();
    body.extend(cstr(b"victim"));
    body.extend(cstr(b"../escaped"));
    if let Some((0, _)) = g.call(opcode::RENAME, 1, &body, 4096) {
        return Err("RENAME victim -> ../escaped succeeded".into());
    }
    if let Some((0, _)) = g.call(opcode::UNLINK, 1, &cstr(b"../canary"), 4096) {
        return Err("UNLINK ../canary succeeded".into());
    }
    let mut body = cstr(b"out");
    body.extend(cstr(b"../canary"));
    g.call(opcode::SYMLINK, 1, &body, 4096);
    if let Ok(n) = lookup(g, 1, b"out") {
        if n != 0 {
            // Following the link is the guest's kernel's job: the server never does it.
            let o = abi::fuse_open_in {
                flags: libc::O_RDWR as u32 | libc::O_TRUNC as u32,
                open_flags: 0,
            };
            if let Some((0, _)) = g.call(opcode::OPEN, n, o.as_bytes(), 4096) {
                return Err("OPEN of a symlink to ../canary succeeded".into());
            }
        }
    }
    Ok(())
}

fn huge_offsets(g: &mut Guest) -> Result<(), String> {
    let (node, fh) = g.create("big").map_err(|e| format!("CREATE big: {e}"))?;
    for (offset, size) in [
        (u64::MAX - 10, 4096u32),
        (i64::MAX as u64, 1),
        (1 << 62, 1 << 20),
        (0, u32::MAX),
        (0, 1 << 21),
    ] {
        let r = abi::fuse_read_in {
            fh,
            offset,
            size,
            ..FromZeros::new_zeroed()
        };
        g.call(opcode::READ, node, r.as_bytes(), 4096);
        let w = abi::fuse_write_in {
            fh,
            offset,
            size: 16,
            ..FromZeros::new_zeroed()
        };
        let mut body = w.as_bytes().to_vec();
        body.extend([7u8; 16]);
        g.call(opcode::WRITE, node, &body, 4096);
        let r = abi::fuse_read_in {
            fh: 0,
            offset,
            size,
            ..FromZeros::new_zeroed()
        };
        g.call(opcode::READDIR, 1, r.as_bytes(), 4096);
        let x = abi::fuse_getxattr_in { size, padding: 0 };
        let mut body = x.as_bytes().to_vec();
        body.extend(cstr(b"user.x"));
        g.call(opcode::GETXATTR, node, &body, 4096);
    }
    // A WRITE whose size claims more than it carries, and a SETXATTR the same way.
    let w = abi::fuse_write_in {
        fh,
        offset: 0,
        size: 1 << 20,
        ..FromZeros::new_zeroed()
    };
    g.call(opcode::WRITE, node, w.as_bytes(), 4096);
    let s = abi::fuse_setxattr_in {
        size: u32::MAX,
        ..FromZeros::new_zeroed()
    };
    let mut body = s.as_bytes().to_vec();
    body.extend(cstr(b"user.x"));
    g.call(opcode::SETXATTR, node, &body, 4096);
    Ok(())
}

/// A READ whose room is many small descriptors, the reply header split across two of them:
/// the data must land in order (a host file's is read straight into them), and a chain whose
/// last writable descriptor leaves guest memory is refused whole.
fn scattered_read(g: &mut Guest) -> Result<(), String> {
    let (node, fh) = g.create("scattered").map_err(|e| format!("CREATE: {e}"))?;
    let data: Vec<u8> = (0..65536u32).map(|i| (i * 7 + i / 251) as u8).collect();
    let w = abi::fuse_write_in {
        fh,
        size: data.len() as u32,
        ..FromZeros::new_zeroed()
    };
    let mut body = w.as_bytes().to_vec();
    body.extend(&data);
    match g.call(opcode::WRITE, node, &body, 4096) {
        Some((0, _)) => {}
        r => return Err(format!("WRITE: {r:?}")),
    }
    let r = abi::fuse_read_in {
        fh,
        size: data.len() as u32,
        ..FromZeros::new_zeroed()
    };
    let req = g.fuse(opcode::READ, node, r.as_bytes());
    g.write(AT, &req);
    // 5 + 13 bytes, then pieces of odd sizes, then the rest.
    let mut sizes = vec![5u32, 13, 1, 4093, 3, 700];
    let room = 16 + data.len() as u32;
    sizes.push(room - sizes.iter().sum::<u32>());
    let mut descs = vec![desc(AT, req.len() as u32, NEXT, 1)];
    let mut at = OUT;
    for (i, &len) in sizes.iter().enumerate() {
        let last = i + 1 == sizes.len();
        let next = if last { 0 } else { i as u16 + 2 };
        descs.push(desc(at, len, WRITE | if last { 0 } else { NEXT }, next));
        // A gap between pieces: nothing may be written there.
        at += len as u64 + 64;
    }
    g.write(OUT, &vec![0xee; (at - OUT) as usize]);
    let n = chain(g, &descs).ok_or("the scattered READ was not answered")?;
    if n != room {
        return Err(format!("the scattered READ wrote {n} bytes of {room}"));
    }
    let mut got = Vec::new();
    let mut at = OUT;
    for &len in &sizes {
        got.extend(g.read(at, len as usize));
        if g.read(at + len as u64, 64) != vec![0xee; 64] {
            return Err("a READ wrote between the chain's descriptors".into());
        }
        at += len as u64 + 64;
    }
    match split_reply(&got) {
        Some((0, body)) if body == data => {}
        Some((0, body)) => {
            let at = body.iter().zip(&data).position(|(a, b)| a != b);
            return Err(format!(
                "READ data differs (length {}, first at {at:?})",
                body.len()
            ));
        }
        r => return Err(format!("READ answered {:?}", r.map(|(e, b)| (e, b.len())))),
    }
    // The same with the last piece outside guest memory: refused, nothing written.
    let last = descs.len() - 1;
    descs[last].addr = MEM_SIZE as u64 + 4096;
    if let Some(n) = chain(g, &descs) {
        if n > 0 {
            return Err(format!(
                "a READ into memory outside the guest wrote {n} bytes"
            ));
        }
    }
    Ok(())
}

fn header_lengths(g: &mut Guest) -> Result<(), String> {
    for len in [0u32, 1, 39, 41, 4096, u32::MAX, (2 << 20) + 1] {
        let mut req = g.fuse(opcode::LOOKUP, 1, &cstr(b"x"));
        req[..4].copy_from_slice(&len.to_le_bytes());
        g.request(&req, 4096);
    }
    // A request shorter than its header.
    g.request(&[1, 2, 3], 4096);
    Ok(())
}

/// Sends one chain made of `descs` (written at descriptors 0..) and waits for it briefly;
/// returns the bytes the server says it wrote, if it returned the chain.
fn chain(g: &mut Guest, descs: &[Desc]) -> Option<u32> {
    for (i, d) in descs.iter().enumerate() {
        g.put_desc(REQ, i as u16, *d);
    }
    g.publish(REQ, &[0]);
    g.wait_used(REQ, 1, Duration::from_millis(500))
        .first()
        .map(|&(_, len)| len)
}

/// A valid LOOKUP at guest address `at` and its length.
fn lookup_at(g: &mut Guest, at: u64) -> u32 {
    let req = g.fuse(opcode::LOOKUP, 1, &cstr(b"missing"));
    g.write(at, &req);
    req.len() as u32
}

const AT: u64 = 0x20_0000;
const OUT: u64 = 0x30_0000;

fn outside_memory(g: &mut Guest) -> Result<(), String> {
    let len = lookup_at(g, AT);
    let beyond = MEM_SIZE as u64 + 4096;
    for descs in [
        vec![desc(beyond, len, NEXT, 1), desc(OUT, 4096, WRITE, 0)],
        vec![desc(AT, len, NEXT, 1), desc(beyond, 4096, WRITE, 0)],
        vec![
            desc(MEM_SIZE as u64 - 8, len, NEXT, 1),
            desc(OUT, 4096, WRITE, 0),
        ],
        vec![desc(u64::MAX - 8, len, NEXT, 1), desc(OUT, 4096, WRITE, 0)],
    ] {
        if let Some(n) = chain(g, &descs) {
            if n > 0 {
                return Err(format!(
                    "a chain reaching outside guest memory was answered with {n} bytes"
                ));
            }
        }
    }
    Ok(())
}

fn zero_length(g: &mut Guest) -> Result<(), String> {
    let len = lookup_at(g, AT);
    chain(g, &[desc(AT, 0, NEXT, 1), desc(OUT, 4096, WRITE, 0)]);
    chain(g, &[desc(AT, len, NEXT, 1), desc(OUT, 0, WRITE, 0)]);
    chain(g, &[desc(AT, len, 0, 0)]);
    Ok(())
}

fn near_4g(g: &mut Guest) -> Result<(), String> {
    lookup_at(g, AT);
    chain(g, &[desc(AT, u32::MAX, NEXT, 1), desc(OUT, 4096, WRITE, 0)]);
    chain(
        g,
        &[desc(AT, 64, NEXT, 1), desc(OUT, u32::MAX - 16, WRITE, 0)],
    );
    Ok(())
}

fn wrong_direction(g: &mut Guest) -> Result<(), String> {
    let len = lookup_at(g, AT);
    // The request in a writable descriptor, the room in a readable one.
    if let Some(n) = chain(g, &[desc(AT, len, WRITE | NEXT, 1), desc(OUT, 4096, 0, 0)]) {
        if n > 0 {
            let reply = g.read(AT, n as usize);
            if split_reply(&reply).is_some_and(|(e, _)| e == 0) {
                return Err("a chain with its request in a writable descriptor was served".into());
            }
        }
    }
    // Readable after writable.
    chain(g, &[desc(OUT, 4096, WRITE | NEXT, 1), desc(AT, len, 0, 0)]);
    Ok(())
}

fn looping_chain(g: &mut Guest) -> Result<(), String> {
    let len = lookup_at(g, AT);
    chain(
        g,
        &[desc(AT, len, NEXT, 1), desc(OUT, 4096, WRITE | NEXT, 0)],
    );
    chain(g, &[desc(AT, len, NEXT, 0)]);
    chain(g, &[desc(AT, len, NEXT, QSIZE + 5)]);
    Ok(())
}

fn looping_indirect(g: &mut Guest) -> Result<(), String> {
    let len = lookup_at(g, AT);
    let table = g.indirect(&[desc(AT, len, NEXT, 1), desc(OUT, 4096, WRITE | NEXT, 0)]);
    chain(g, &[table]);
    // An indirect table naming another.
    let nested = g.indirect(&[desc(0x1_8000, 32, crate::guest::INDIRECT_F, 0)]);
    chain(g, &[nested]);
    // An indirect table of absurd length.
    chain(g, &[desc(0x1_8000, !15, crate::guest::INDIRECT_F, 0)]);
    Ok(())
}

fn bad_head(g: &mut Guest) -> Result<(), String> {
    g.publish(REQ, &[QSIZE, QSIZE + 1, u16::MAX]);
    g.wait_used(REQ, 3, Duration::from_millis(500));
    Ok(())
}

fn avail_jump(g: &mut Guest) -> Result<(), String> {
    let mine = g.avail_index(REQ);
    g.publish_index(REQ, mine.wrapping_add(QSIZE * 4));
    std::thread::sleep(Duration::from_millis(300));
    // Back to where the server is, as a guest that recovers would.
    g.publish_index(REQ, mine);
    Ok(())
}
