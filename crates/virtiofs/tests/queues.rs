//! A queue as the device's thread sees it, driven through the vhost-user backend's own
//! entry point (`handle_event`), with rings a hostile guest laid out: whatever it gets
//! wrong, the thread keeps serving the chains that follow.

use std::sync::Arc;

use memofs_core::options::parse_options;
use memofs_core::plan::{BackendKind, MountPlan};
use memofs_mem::{MemConfig, MemFs};
use memofs_proto::abi;
use memofs_request::Stats;
use memofs_virtiofs::{DeviceOptions, GuestFs, GuestRam, SharedMemory, VirtioFs, Vring};
use vhost_user_backend::{VhostUserBackend, VringT};
use virtio_bindings::bindings::virtio_ring::{VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
use virtio_queue::desc::{split::Descriptor, RawDescriptor};
use virtio_queue::mock::MockSplitQueue;
use vm_memory::{Bytes, GuestAddress, GuestAddressSpace, GuestMemoryAtomic};
use vmm_sys_util::epoll::EventSet;
use zerocopy::{FromBytes, FromZeros, IntoBytes};

const SIZE: u16 = 256;
const REQUEST_AT: u64 = 0x10_0000;
const REPLY_AT: u64 = 0x40_0000;

fn device() -> VirtioFs<MemFs> {
    device_with(&[])
}

/// A device of the mem backend with `options` (as `-o`).
fn device_with(options: &[&str]) -> VirtioFs<MemFs> {
    let opts = parse_options(options, 1 << 30).unwrap();
    let plan = MountPlan::new(&opts, BackendKind::Mem, false);
    let fs = MemFs::new(MemConfig::default()).unwrap();
    VirtioFs::new(
        GuestFs::new(Arc::new(fs), plan, Arc::new(Stats::default())),
        DeviceOptions::default(),
    )
    .unwrap()
}

fn init_request() -> Vec<u8> {
    let mut i = abi::fuse_init_in::new_zeroed();
    i.major = abi::KERNEL_VERSION;
    i.minor = abi::KERNEL_MINOR_VERSION;
    let mut h = abi::fuse_in_header::new_zeroed();
    h.len = (std::mem::size_of::<abi::fuse_in_header>() + i.as_bytes().len()) as u32;
    h.opcode = abi::opcode::INIT;
    h.unique = 9;
    let mut v = h.as_bytes().to_vec();
    v.extend_from_slice(i.as_bytes());
    v
}

/// A queue of [`SIZE`] entries in `mem`, set up as a VMM would set it up.
fn vring(mem: &SharedMemory, q: &MockSplitQueue<GuestRam>) -> Vring {
    let vring = Vring::new(mem.clone(), 1024).unwrap();
    vring.set_queue_size(SIZE);
    vring
        .set_queue_info(q.desc_table_addr().0, q.avail_addr().0, q.used_addr().0)
        .unwrap();
    vring.set_queue_ready(true);
    vring.set_enabled(true);
    vring
}

#[test]
fn a_head_outside_the_queue_is_skipped_and_the_next_chain_served() {
    let mem = GuestMemoryAtomic::new(GuestRam::from_ranges(&[(GuestAddress(0), 8 << 20)]).unwrap());
    let guard = mem.memory();
    let q = MockSplitQueue::new(&*guard, SIZE);
    let dev = device();
    dev.update_memory(mem.clone()).unwrap();
    let vring = vring(&mem, &q);
    // The first available entry names descriptor 5000 of a 256-entry queue; the second is
    // an ordinary INIT.
    q.avail().ring().ref_at(0).unwrap().store(5000);
    q.avail().idx().store(1);
    let req = init_request();
    guard.write_slice(&req, GuestAddress(REQUEST_AT)).unwrap();
    let descs = [
        RawDescriptor::from(Descriptor::new(
            REQUEST_AT,
            req.len() as u32,
            VRING_DESC_F_NEXT as u16,
            1,
        )),
        RawDescriptor::from(Descriptor::new(
            REPLY_AT,
            4096,
            VRING_DESC_F_WRITE as u16,
            0,
        )),
    ];
    q.add_desc_chains(&descs, 0).unwrap();
    assert_eq!(q.avail().idx().load(), 2);
    dev.handle_event(0, EventSet::IN, std::slice::from_ref(&vring), 1)
        .expect("the queue's thread goes on");
    assert_eq!(q.used().idx().load(), 1, "the INIT chain was returned");
    let mut out = vec![0u8; 16];
    guard.read_slice(&mut out, GuestAddress(REPLY_AT)).unwrap();
    let h = abi::fuse_out_header::read_from_prefix(&out).unwrap().0;
    assert_eq!((h.error, h.unique), (0, 9), "INIT answered");
}

#[test]
fn a_kick_before_the_guest_memory_is_known_is_ignored() {
    let mem = GuestMemoryAtomic::new(GuestRam::from_ranges(&[(GuestAddress(0), 8 << 20)]).unwrap());
    let guard = mem.memory();
    let q = MockSplitQueue::new(&*guard, SIZE);
    let dev = device();
    let vring = vring(&mem, &q);
    dev.handle_event(0, EventSet::IN, &[vring], 1)
        .expect("the queue's thread goes on");
}

/// The state moves through a pipe from one device to another; a second load into a filled
/// device, a transfer not started, and a damaged stream are refused through
/// `CHECK_DEVICE_STATE`.
#[test]
fn the_device_state_moves_between_devices_and_damage_is_refused() {
    use std::io::Write;
    use vhost::vhost_user::message::{
        VhostTransferStateDirection as Dir, VhostTransferStatePhase as Phase,
        VhostUserProtocolFeatures,
    };
    let pipe = || {
        let (r, w) = nix::unistd::pipe().unwrap();
        (std::fs::File::from(r), std::fs::File::from(w))
    };
    let (src, dst) = (device(), device());
    assert!(src
        .protocol_features()
        .contains(VhostUserProtocolFeatures::DEVICE_STATE));
    assert!(dst.check_device_state().is_err(), "nothing was started");
    let (r, w) = pipe();
    dst.set_device_state_fd(Dir::LOAD, Phase::STOPPED, r)
        .unwrap();
    src.set_device_state_fd(Dir::SAVE, Phase::STOPPED, w)
        .unwrap();
    src.check_device_state().unwrap();
    dst.check_device_state().unwrap();
    // The destination now holds the source's root; a damaged stream is refused.
    let (r, mut w) = pipe();
    let other = device();
    other
        .set_device_state_fd(Dir::LOAD, Phase::STOPPED, r)
        .unwrap();
    w.write_all(b"memofs-state\x01\0\0\0\x05\0\0\0").unwrap();
    drop(w);
    assert!(other.check_device_state().is_err());
}

/// A destination whose settings a guest could tell apart from the source's (here its atime
/// rule) refuses the state, naming the setting.
#[test]
fn a_destination_with_other_settings_refuses_the_state() {
    use vhost::vhost_user::message::{
        VhostTransferStateDirection as Dir, VhostTransferStatePhase as Phase,
    };
    let (r, w) = nix::unistd::pipe().unwrap();
    let (src, dst) = (device(), device_with(&["noatime"]));
    dst.set_device_state_fd(Dir::LOAD, Phase::STOPPED, std::fs::File::from(r))
        .unwrap();
    src.set_device_state_fd(Dir::SAVE, Phase::STOPPED, std::fs::File::from(w))
        .unwrap();
    src.check_device_state().unwrap();
    let e = dst.check_device_state().unwrap_err().to_string();
    assert!(
        e.contains("atime=") && e.contains("start it with the options"),
        "{e}"
    );
}
