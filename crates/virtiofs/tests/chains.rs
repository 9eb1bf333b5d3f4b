//! Descriptor chains as a guest builds them, good and hostile, served without a VM: a mock
//! split queue in a guest memory of this process (`virtio-queue`'s test utilities).

use std::sync::Arc;

use memofs_core::options::parse_options;
use memofs_core::plan::{BackendKind, MountPlan};
use memofs_core::{Backend, Caller, ROOT_INO};
use memofs_mem::{MemConfig, MemFs};
use memofs_proto::abi;
use memofs_request::Stats;
use memofs_virtiofs::{chain, Buffers, GuestFs, MAX_REQUEST};
use virtio_bindings::bindings::virtio_ring::{VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
use virtio_queue::desc::{split::Descriptor, RawDescriptor};
use virtio_queue::mock::MockSplitQueue;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

/// Guest memory: 1 MiB for the queue, then room for request and reply buffers.
const MEM: usize = 8 << 20;
const REQUEST_AT: u64 = 0x10_0000;
const REPLY_AT: u64 = 0x40_0000;
/// The caller of the backend calls the tests make themselves.
const ROOT: Caller = Caller {
    uid: 0,
    gid: 0,
    pid: 1,
};

fn session() -> GuestFs<MemFs> {
    let opts = parse_options::<String>(&[], 1 << 30).unwrap();
    let plan = MountPlan::new(&opts, BackendKind::Mem, false);
    let fs = MemFs::new(MemConfig::default()).unwrap();
    GuestFs::new(Arc::new(fs), plan, Arc::new(Stats::default()))
}

fn memory() -> GuestMemoryMmap {
    GuestMemoryMmap::from_ranges(&[(GuestAddress(0), MEM)]).unwrap()
}

fn desc(addr: u64, len: u32, flags: u32) -> RawDescriptor {
    RawDescriptor::from(Descriptor::new(addr, len, flags as u16, 0))
}

/// A request: header with `opcode`, `unique` 7, node 1, then `body`.
fn request(opcode: u32, body: &[u8]) -> Vec<u8> {
    let mut h = abi::fuse_in_header::new_zeroed();
    h.len = (std::mem::size_of::<abi::fuse_in_header>() + body.len()) as u32;
    h.opcode = opcode;
    h.unique = 7;
    h.nodeid = 1;
    let mut v = h.as_bytes().to_vec();
    v.extend_from_slice(body);
    v
}

/// Serves one chain made of `descs` after writing `req` at [`REQUEST_AT`]; returns the
/// bytes written and the reply read back from [`REPLY_AT`].
fn serve<B: Backend>(
    s: &GuestFs<B>,
    mem: &GuestMemoryMmap,
    req: &[u8],
    descs: &[RawDescriptor],
) -> (u32, Vec<u8>) {
    mem.write_slice(req, GuestAddress(REQUEST_AT)).unwrap();
    let queue = MockSplitQueue::new(mem, 256);
    let chain = queue.build_desc_chain(descs).unwrap();
    let mut bufs = Buffers::default();
    let n = chain::serve(s, chain, &mut bufs);
    let mut reply = vec![0u8; n as usize];
    mem.read_slice(&mut reply, GuestAddress(REPLY_AT)).unwrap();
    (n, reply)
}

/// The ordinary chain for `req`: one readable descriptor, one writable of `room` bytes.
fn plain(req: &[u8], room: u32) -> Vec<RawDescriptor> {
    vec![
        desc(REQUEST_AT, req.len() as u32, VRING_DESC_F_NEXT),
        desc(REPLY_AT, room, VRING_DESC_F_WRITE),
    ]
}

fn out_header(reply: &[u8]) -> abi::fuse_out_header {
    abi::fuse_out_header::read_from_prefix(reply).unwrap().0
}

fn init<B: Backend>(s: &GuestFs<B>, mem: &GuestMemoryMmap) {
    let mut i = abi::fuse_init_in::new_zeroed();
    i.major = abi::KERNEL_VERSION;
    i.minor = abi::KERNEL_MINOR_VERSION;
    i.max_readahead = 1 << 20;
    let req = request(abi::opcode::INIT, i.as_bytes());
    let (n, reply) = serve(s, mem, &req, &plain(&req, 4096));
    let h = out_header(&reply);
    assert_eq!((h.error, h.unique, h.len), (0, 7, n), "INIT answered");
}

#[test]
fn init_then_a_lookup_miss_gets_a_negative_entry() {
    let (s, mem) = (session(), memory());
    let req = request(abi::opcode::LOOKUP, b"missing\0");
    let (_, reply) = serve(&s, &mem, &req, &plain(&req, 4096));
    assert_eq!(out_header(&reply).error, -libc::EIO, "nothing before INIT");
    init(&s, &mem);
    let (n, reply) = serve(&s, &mem, &req, &plain(&req, 4096));
    let h = out_header(&reply);
    assert_eq!((h.error, h.len), (0, n));
    let entry = abi::fuse_entry_out::read_from_prefix(&reply[16..])
        .unwrap()
        .0;
    assert_eq!(entry.nodeid, 0, "a negative entry");
    assert!(entry.entry_valid > 0, "that the guest may keep");
}

#[test]
fn a_guest_that_mounts_again_holds_none_of_the_earlier_inodes() {
    use memofs_core::Errno;
    let (s, mem) = (session(), memory());
    init(&s, &mem);
    // A file the guest looked up, then deleted while its kernel still held it.
    let fs = s.backend();
    let (attr, o) = fs
        .create(&ROOT, ROOT_INO, "gone".as_ref(), 0o644, 0, libc::O_RDWR)
        .unwrap();
    fs.release(attr.ino, o.fh).unwrap();
    fs.unlink(&ROOT, ROOT_INO, "gone".as_ref()).unwrap();
    assert!(fs.getattr(attr.ino).is_ok());
    init(&s, &mem);
    assert_eq!(
        fs.getattr(attr.ino),
        Err(Errno::ESTALE),
        "freed at the new INIT"
    );
    // DESTROY (an unmount) does the same.
    let (attr, o) = fs
        .create(&ROOT, ROOT_INO, "gone2".as_ref(), 0o644, 0, libc::O_RDWR)
        .unwrap();
    fs.release(attr.ino, o.fh).unwrap();
    fs.unlink(&ROOT, ROOT_INO, "gone2".as_ref()).unwrap();
    let destroy = request(abi::opcode::DESTROY, b"");
    serve(&s, &mem, &destroy, &plain(&destroy, 4096));
    assert_eq!(fs.getattr(attr.ino), Err(Errno::ESTALE), "freed at DESTROY");
}

#[test]
fn files_a_gone_guest_held_open_are_released_with_their_data() {
    use memofs_core::Errno;
    let (s, mem) = (session(), memory());
    let fs = s.backend().clone();
    let used = || fs.usage().bytes_used;
    // Each way the guest's kernel can go: a new INIT (a reboot), DESTROY, a device reset.
    for end in ["init", "destroy", "reset"] {
        init(&s, &mem);
        let empty = used();
        // Open, unlinked while open, and written: only the open keeps it.
        let (attr, o) = fs
            .create(&ROOT, ROOT_INO, "open".as_ref(), 0o644, 0, libc::O_RDWR)
            .unwrap();
        fs.write(attr.ino, o.fh, 0, &vec![7u8; 1 << 20]).unwrap();
        fs.unlink(&ROOT, ROOT_INO, "open".as_ref()).unwrap();
        assert!(used() >= empty + (1 << 20), "{end}: charged while open");
        match end {
            "init" => init(&s, &mem),
            "destroy" => {
                let destroy = request(abi::opcode::DESTROY, b"");
                serve(&s, &mem, &destroy, &plain(&destroy, 4096));
                let lookup = request(abi::opcode::LOOKUP, b"x\0");
                let (_, reply) = serve(&s, &mem, &lookup, &plain(&lookup, 4096));
                assert_eq!(out_header(&reply).error, -libc::EIO, "nothing before INIT");
            }
            _ => s.reset(),
        }
        assert_eq!(fs.getattr(attr.ino), Err(Errno::ESTALE), "{end}: freed");
        assert_eq!(used(), empty, "{end}: its data given back");
    }
}

#[test]
fn a_request_whose_answer_would_not_fit_is_refused_before_its_work() {
    let (s, mem) = (session(), memory());
    init(&s, &mem);
    let mut c = abi::fuse_create_in::new_zeroed();
    c.flags = libc::O_RDWR as u32;
    c.mode = 0o644;
    let mut body = c.as_bytes().to_vec();
    body.extend(b"made\0");
    let create = request(abi::opcode::CREATE, &body);
    // Room for the entry, not for the open that follows it.
    let room = 16 + std::mem::size_of::<abi::fuse_entry_out>() as u32;
    let (_, reply) = serve(&s, &mem, &create, &plain(&create, room));
    assert_eq!(out_header(&reply).error, -libc::EINVAL);
    assert!(
        s.backend()
            .lookup(&ROOT, ROOT_INO, "made".as_ref())
            .is_err(),
        "nothing was created"
    );
    let (_, reply) = serve(&s, &mem, &create, &plain(&create, 4096));
    assert_eq!(out_header(&reply).error, 0, "with room it is");
}

#[test]
fn a_request_split_over_many_descriptors_is_read_whole() {
    let (s, mem) = (session(), memory());
    init(&s, &mem);
    let req = request(abi::opcode::LOOKUP, b"missing\0");
    // One byte per readable descriptor, then the reply split in two.
    let mut descs: Vec<_> = (0..req.len() as u64)
        .map(|i| desc(REQUEST_AT + i, 1, VRING_DESC_F_NEXT))
        .collect();
    descs.push(desc(REPLY_AT, 20, VRING_DESC_F_WRITE | VRING_DESC_F_NEXT));
    descs.push(desc(REPLY_AT + 20, 4000, VRING_DESC_F_WRITE));
    let (n, reply) = serve(&s, &mem, &req, &descs);
    assert_eq!(out_header(&reply).error, 0);
    assert_eq!(n as usize, 16 + std::mem::size_of::<abi::fuse_entry_out>());
}

/// A WRITE of `data` at `offset` of the open file `fh` of `ino`, its data left in guest
/// memory in pieces of the sizes `cuts` gives in turn (the arguments cut the same way).
fn write_chain<B: Backend>(
    s: &GuestFs<B>,
    mem: &GuestMemoryMmap,
    (ino, fh, offset): (u64, u64, u64),
    data: &[u8],
    cuts: &[u64],
) -> (abi::fuse_out_header, u32) {
    let mut w = abi::fuse_write_in::new_zeroed();
    (w.fh, w.offset, w.size) = (fh, offset, data.len() as u32);
    let mut req = request(abi::opcode::WRITE, &[w.as_bytes(), data].concat());
    req[16..24].copy_from_slice(&ino.to_ne_bytes());
    let (mut descs, mut at) = (Vec::new(), 0u64);
    for &cut in cuts.iter().cycle() {
        let n = cut.min(req.len() as u64 - at);
        descs.push(desc(REQUEST_AT + at, n as u32, VRING_DESC_F_NEXT));
        at += n;
        if at == req.len() as u64 {
            break;
        }
    }
    descs.push(desc(REPLY_AT, 4096, VRING_DESC_F_WRITE));
    let reply = serve(s, mem, &req, &descs).1;
    let written = abi::fuse_write_out::read_from_prefix(reply.get(16..).unwrap_or(&[]))
        .map_or(0, |(w, _)| w.size);
    (out_header(&reply), written)
}

/// WRITEs whose data stays in guest memory reach the file whole however the guest cuts
/// them: the passthrough backend writes them to its file from there (`pwritev`), the mem
/// backend copies them out; a WRITE that says more than its chain holds is refused.
fn writes_from_guest_memory<B: Backend>(s: &GuestFs<B>) {
    let mem = memory();
    init(s, &mem);
    let fs = s.backend();
    let (attr, o) = fs
        .create(&ROOT, ROOT_INO, "w".as_ref(), 0o644, 0, libc::O_RDWR)
        .unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    for (offset, cuts) in [
        (0u64, &[1u64, 79, 3, 16384][..]),
        (5000, &[81, 1, 65536, 17]),
    ] {
        let (h, written) = write_chain(s, &mem, (attr.ino, o.fh, offset), &data, cuts);
        assert_eq!(
            (h.error, written as usize),
            (0, data.len()),
            "cuts {cuts:?}"
        );
        let mut back = Vec::new();
        fs.read(attr.ino, o.fh, offset, data.len() as u32, &mut back)
            .unwrap();
        assert!(back == data, "cuts {cuts:?}: the file holds what was sent");
    }
    // A WRITE longer than its chain: the last descriptor is left out.
    let mut w = abi::fuse_write_in::new_zeroed();
    (w.fh, w.size) = (o.fh, 100);
    let mut req = request(abi::opcode::WRITE, &[w.as_bytes(), &[1u8; 100]].concat());
    req[16..24].copy_from_slice(&attr.ino.to_ne_bytes());
    let descs = [
        desc(REQUEST_AT, req.len() as u32 - 10, VRING_DESC_F_NEXT),
        desc(REPLY_AT, 4096, VRING_DESC_F_WRITE),
    ];
    let (_, reply) = serve(s, &mem, &req, &descs);
    assert_eq!(out_header(&reply).error, -libc::EINVAL);
}

#[test]
fn writes_from_guest_memory_reach_the_mem_backend_whole() {
    writes_from_guest_memory(&session());
}

#[test]
fn writes_from_guest_memory_reach_kernel_backed_data_whole() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: kernel-backed data takes root");
        return;
    }
    let opts = parse_options::<String>(&[], 1 << 30).unwrap();
    let plan = MountPlan::new(&opts, BackendKind::Mem, false);
    let config = MemConfig {
        kernel_data: true,
        ..MemConfig::default()
    };
    let fs = MemFs::new(config).unwrap();
    writes_from_guest_memory(&GuestFs::new(
        Arc::new(fs),
        plan,
        Arc::new(Stats::default()),
    ));
}

#[test]
fn writes_from_guest_memory_reach_a_host_file_whole() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: the passthrough backend is tested as root");
        return;
    }
    let dir = std::env::temp_dir().join(format!("memofs-chains-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let opts = parse_options::<String>(&[], 1 << 30).unwrap();
    let plan = MountPlan::new(&opts, BackendKind::Passthrough, false);
    let fs = memofs_passthrough::PassthroughFs::new(&dir, Default::default()).unwrap();
    let s = GuestFs::new(Arc::new(fs), plan, Arc::new(Stats::default()));
    writes_from_guest_memory(&s);
    let on_host = std::fs::read(dir.join("w")).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(on_host.len(), 305_000, "both writes are in the host file");
}

#[test]
fn hostile_chains_get_an_error_or_nothing() {
    let (s, mem) = (session(), memory());
    init(&s, &mem);
    let lookup = request(abi::opcode::LOOKUP, b"x\0");
    // Outside guest memory: refused whole, nothing written.
    let outside = [
        desc(MEM as u64 - 8, 64, VRING_DESC_F_NEXT),
        desc(REPLY_AT, 4096, VRING_DESC_F_WRITE),
    ];
    assert_eq!(serve(&s, &mem, &lookup, &outside).0, 0);
    let wrapping = [
        desc(u64::MAX - 4, 64, VRING_DESC_F_NEXT),
        desc(REPLY_AT, 4096, VRING_DESC_F_WRITE),
    ];
    assert_eq!(serve(&s, &mem, &lookup, &wrapping).0, 0);
    // Shorter than a header: nothing to answer.
    assert_eq!(serve(&s, &mem, &lookup, &plain(&lookup[..20], 4096)).0, 0);
    // A header claiming more than the chain holds, or more than any request: EINVAL.
    let mut long = lookup.clone();
    long[..4].copy_from_slice(&(MAX_REQUEST as u32 + 1).to_ne_bytes());
    let (_, reply) = serve(&s, &mem, &long, &plain(&long, 4096));
    assert_eq!(out_header(&reply).error, -libc::EINVAL);
    long[..4].copy_from_slice(&4000u32.to_ne_bytes());
    let (_, reply) = serve(&s, &mem, &long, &plain(&long, 4096));
    assert_eq!(out_header(&reply).error, -libc::EINVAL);
    // Too little room for the reply: an error that fits, or nothing.
    let (n, reply) = serve(&s, &mem, &lookup, &plain(&lookup, 16));
    assert_eq!((n, out_header(&reply).error), (16, -libc::EINVAL));
    assert_eq!(serve(&s, &mem, &lookup, &plain(&lookup, 8)).0, 0);
    // No room at all (a FORGET-like chain for a request that wants a reply).
    assert_eq!(serve(&s, &mem, &lookup, &plain(&lookup, 0)[..1]).0, 0);
    // A READ for more than the largest request: refused before anything is allocated.
    let mut read = abi::fuse_read_in::new_zeroed();
    read.size = u32::MAX;
    let huge = request(abi::opcode::READ, read.as_bytes());
    let (_, reply) = serve(&s, &mem, &huge, &plain(&huge, 4096));
    assert_eq!(out_header(&reply).error, -libc::EINVAL);
    // An unknown opcode: ENOSYS.
    let odd = request(4242, b"");
    let (_, reply) = serve(&s, &mem, &odd, &plain(&odd, 4096));
    assert_eq!(out_header(&reply).error, -libc::ENOSYS);
}

/// A small deterministic generator (xorshift64*), so a failure names its case.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn random_requests_and_chains_never_panic_or_overrun() {
    let (s, mem) = (session(), memory());
    init(&s, &mem);
    let mut rng = Rng(0x5eed);
    let opcodes = [
        1u32, 2, 3, 4, 9, 10, 14, 15, 16, 21, 24, 27, 28, 36, 42, 44, 4242,
    ];
    let (mut answered, mut ok) = (0, 0);
    for case in 0..3000 {
        // A request with a plausible header over random bytes.
        let body_len = rng.below(300) as usize;
        let body: Vec<u8> = (0..body_len).map(|_| rng.next() as u8).collect();
        let opcode = opcodes[rng.below(opcodes.len() as u64) as usize];
        let mut req = request(opcode, &body);
        req[8..16].copy_from_slice(&rng.next().to_ne_bytes());
        req[16..24].copy_from_slice(&(rng.below(4) + 1).to_ne_bytes());
        if rng.below(4) == 0 {
            let claimed = rng.next() as u32;
            req[..4].copy_from_slice(&claimed.to_ne_bytes());
        }
        // Random splits, sometimes a descriptor out of bounds or a zero length.
        let mut descs = Vec::new();
        let mut at = 0u64;
        while at < req.len() as u64 {
            let len = (rng.below(64) + 1).min(req.len() as u64 - at);
            let addr = match rng.below(50) {
                0 => MEM as u64 + rng.below(1 << 20),
                _ => REQUEST_AT + at,
            };
            descs.push(desc(addr, len as u32, VRING_DESC_F_NEXT));
            at += len;
        }
        let room = rng.below(8192) as u32;
        descs.push(desc(REPLY_AT, room, VRING_DESC_F_WRITE));
        mem.write_slice(&vec![0u8; 8192], GuestAddress(REPLY_AT))
            .unwrap();
        let (n, reply) = serve(&s, &mem, &req, &descs);
        assert!(n <= room, "case {case}: {n} bytes written into {room}");
        if n > 0 {
            let h = out_header(&reply);
            assert_eq!(h.len, n, "case {case}: the header says its length");
            answered += 1;
            ok += usize::from(h.error == 0);
        }
    }
    // The cases reach the request layer: most are answered, some successfully.
    eprintln!("{answered} of 3000 answered, {ok} without error");
    assert!(
        answered > 1500 && ok > 100,
        "{answered} answered, {ok} without error"
    );
}
