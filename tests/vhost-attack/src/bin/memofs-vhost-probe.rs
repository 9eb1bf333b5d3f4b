//! memofs-vhost-probe: what a VMM and a guest's kernel see of a vhost-user-fs server, from
//! outside its process, for the tests of the options VM managers pass (scripts/managers.py).
//!
//! Usage: `memofs-vhost-probe SOCKET [--offer writeback,security_ctx] [--config]
//! [--getattrs N] [--read NAME] [--flags direct|noatime] [--hold] [--atime NAME]`. It connects as a VMM
//! does, sends INIT offering the capabilities named (as a kernel offers them), and prints
//! what it found, one `key=value` a line:
//! - `granted=HEX` and `writeback=yes|no`, `security_ctx=yes|no`: the INIT answer;
//! - `config_tag=TAG` (`--config`: the tag of the device's configuration space) or
//!   `config=none` where the server offers none;
//! - `root=ok`: GETATTR of the root answered (`--getattrs N`: N more, one after another,
//!   each waited for, before anything else);
//! - `read=TEXT` (`--read NAME`: the file NAME in the root, opened with `--flags`, read); with
//!   `--hold` it prints `holding` once the file is open and keeps it so until a line arrives
//!   on its standard input, then reads;
//! - `atime_moved=yes|no` (`--atime NAME`: a new file NAME written, its atime set an hour
//!   back, opened with `--flags`, read, and its atime looked at again).
//!
//! Exits 1 (with `error=WHAT`) where a step fails.

use std::io::BufRead;
use std::process::ExitCode;

use memofs_proto::abi::{self, opcode};
use memofs_vhost_attack::guest::Guest;
use zerocopy::{FromBytes, FromZeros, IntoBytes};

struct Options {
    socket: String,
    offer: u64,
    config: bool,
    read: Option<String>,
    flags: u32,
    hold: bool,
    atime: Option<String>,
    getattrs: u32,
}

fn options() -> Result<Options, String> {
    let mut args = std::env::args().skip(1);
    let mut o = Options {
        socket: args
            .next()
            .ok_or("usage: memofs-vhost-probe SOCKET [options]")?,
        offer: 0,
        config: false,
        read: None,
        flags: libc::O_RDONLY as u32,
        hold: false,
        atime: None,
        getattrs: 0,
    };
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} takes a value"));
        match a.as_str() {
            "--offer" => {
                for f in value()?.split(',') {
                    o.offer |= match f {
                        "writeback" => abi::init::WRITEBACK_CACHE,
                        "security_ctx" => abi::init::SECURITY_CTX,
                        other => return Err(format!("--offer {other}?")),
                    };
                }
            }
            "--config" => o.config = true,
            "--read" => o.read = Some(value()?),
            "--flags" => {
                o.flags |= match value()?.as_str() {
                    "direct" => libc::O_DIRECT as u32,
                    "noatime" => libc::O_NOATIME as u32,
                    other => return Err(format!("--flags {other}?")),
                }
            }
            "--hold" => o.hold = true,
            "--atime" => o.atime = Some(value()?),
            "--getattrs" => {
                o.getattrs = value()?.parse().map_err(|_| "--getattrs takes a count")?
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(o)
}

/// A request's reply body, or what went wrong.
fn call(g: &mut Guest, op: u32, node: u64, body: &[u8], room: u32) -> Result<Vec<u8>, String> {
    match g.call(op, node, body, room) {
        Some((0, r)) => Ok(r),
        Some((e, _)) => Err(format!("opcode {op} on node {node}: error {e}")),
        None => Err(format!("opcode {op} on node {node}: no answer")),
    }
}

fn named(body: impl IntoBytes + zerocopy::Immutable, name: &str) -> Vec<u8> {
    let mut v = body.as_bytes().to_vec();
    v.extend(name.as_bytes());
    v.push(0);
    v
}

fn node_of(entry: &[u8]) -> Result<u64, String> {
    abi::fuse_entry_out::read_from_prefix(entry)
        .map(|(e, _)| e.nodeid)
        .map_err(|_| "short entry".into())
}

fn handle_of(open: &[u8]) -> Result<u64, String> {
    abi::fuse_open_out::read_from_prefix(open)
        .map(|(o, _)| o.fh)
        .map_err(|_| "short open".into())
}

fn open(g: &mut Guest, node: u64, flags: u32) -> Result<u64, String> {
    let o = abi::fuse_open_in {
        flags,
        open_flags: 0,
    };
    handle_of(&call(g, opcode::OPEN, node, o.as_bytes(), 64)?)
}

fn read(g: &mut Guest, node: u64, fh: u64) -> Result<Vec<u8>, String> {
    let r = abi::fuse_read_in {
        fh,
        size: 4096,
        ..FromZeros::new_zeroed()
    };
    call(g, opcode::READ, node, r.as_bytes(), 4096 + 64)
}

fn atime(g: &mut Guest, node: u64) -> Result<u64, String> {
    let a = call(
        g,
        opcode::GETATTR,
        node,
        abi::fuse_getattr_in::new_zeroed().as_bytes(),
        4096,
    )?;
    abi::fuse_attr_out::read_from_prefix(&a)
        .map(|(a, _)| a.attr.atime)
        .map_err(|_| "short attr".into())
}

/// `--atime`: whether a read through an open with `flags` moved the file's atime.
fn atime_moved(g: &mut Guest, name: &str, flags: u32) -> Result<bool, String> {
    let c = abi::fuse_create_in {
        flags: libc::O_RDWR as u32,
        mode: 0o644,
        ..FromZeros::new_zeroed()
    };
    let r = call(g, opcode::CREATE, 1, &named(c, name), 4096)?;
    let (node, fh) = (node_of(&r)?, handle_of(&r[128..])?);
    let w = abi::fuse_write_in {
        fh,
        size: 4,
        ..FromZeros::new_zeroed()
    };
    let mut body = w.as_bytes().to_vec();
    body.extend(b"data");
    call(g, opcode::WRITE, node, &body, 64)?;
    let past = atime(g, node)? - 3600;
    let set = abi::fuse_setattr_in {
        valid: abi::fattr::ATIME,
        atime: past,
        ..FromZeros::new_zeroed()
    };
    call(g, opcode::SETATTR, node, set.as_bytes(), 4096)?;
    let rfh = open(g, node, flags)?;
    read(g, node, rfh)?;
    Ok(atime(g, node)? != past)
}

fn run(o: &Options) -> Result<(), String> {
    let mut g = Guest::connect(std::path::Path::new(&o.socket)).map_err(|e| e.to_string())?;
    if o.config {
        match g.config(40).map_err(|e| format!("GET_CONFIG: {e}"))? {
            Some(c) => {
                let tag = c[..36.min(c.len())]
                    .split(|&b| b == 0)
                    .next()
                    .unwrap_or(&[]);
                println!("config_tag={}", String::from_utf8_lossy(tag));
                let queues = c
                    .get(36..40)
                    .map(|q| u32::from_le_bytes(q.try_into().unwrap()));
                println!("config_queues={}", queues.unwrap_or(0));
            }
            None => println!("config=none"),
        }
    }
    let granted = g.init_offering(o.offer).map_err(|e| e.to_string())?;
    let yes = |bit: u64| if granted & bit != 0 { "yes" } else { "no" };
    println!("granted={granted:#x}");
    println!("writeback={}", yes(abi::init::WRITEBACK_CACHE));
    println!("security_ctx={}", yes(abi::init::SECURITY_CTX));
    for _ in 0..=o.getattrs {
        call(
            &mut g,
            opcode::GETATTR,
            1,
            abi::fuse_getattr_in::new_zeroed().as_bytes(),
            4096,
        )?;
    }
    println!("root=ok");
    if let Some(name) = &o.read {
        let node = node_of(&call(
            &mut g,
            opcode::LOOKUP,
            1,
            &named([0u8; 0], name),
            4096,
        )?)?;
        let fh = open(&mut g, node, o.flags)?;
        if o.hold {
            println!("holding");
            let _ = std::io::stdin().lock().lines().next();
        }
        let data = read(&mut g, node, fh)?;
        println!("read={}", String::from_utf8_lossy(&data).trim_end());
    }
    if let Some(name) = &o.atime {
        let moved = atime_moved(&mut g, name, o.flags)?;
        println!("atime_moved={}", if moved { "yes" } else { "no" });
    }
    Ok(())
}

fn main() -> ExitCode {
    let result = options().and_then(|o| run(&o));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            println!("error={e}");
            ExitCode::FAILURE
        }
    }
}
