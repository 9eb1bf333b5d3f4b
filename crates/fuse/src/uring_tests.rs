//! Tests of [`super`] (`uring.rs`), kept apart for the length of the module.
use super::*;

#[test]
fn register_entries_carry_the_iovecs_and_len_2() {
    let slot = Slot::new();
    let e = sqe_register(5, 3, &slot, 7);
    // SAFETY: an Entry128 is 128 plain bytes (repr(C) over io_uring_sqe).
    let b: [u8; 128] = unsafe { std::mem::transmute(e) };
    assert_eq!(b[0], 46, "IORING_OP_URING_CMD");
    assert_eq!(i32::from_ne_bytes(b[4..8].try_into().unwrap()), 5);
    assert_eq!(
        u32::from_ne_bytes(b[8..12].try_into().unwrap()),
        CMD_REGISTER
    );
    assert_eq!(
        u32::from_ne_bytes(b[12..16].try_into().unwrap()),
        0,
        "__pad1"
    );
    assert_eq!(
        u64::from_ne_bytes(b[16..24].try_into().unwrap()),
        slot.iov.as_ptr() as u64
    );
    assert_eq!(u32::from_ne_bytes(b[24..28].try_into().unwrap()), 2);
    assert_eq!(u64::from_ne_bytes(b[32..40].try_into().unwrap()), 7);
    let req = abi::fuse_uring_cmd_req::read_from_bytes(&b[48..72]).unwrap();
    assert_eq!((req.qid, req.commit_id), (3, 0));
    assert_eq!(slot.iov[0].iov_len, 288);
    assert_eq!(slot.iov[1].iov_len, PAYLOAD);
}

/// Records the order things are dropped in.
struct Dropped(
    &'static str,
    std::rc::Rc<std::cell::RefCell<Vec<&'static str>>>,
);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.1.borrow_mut().push(self.0);
    }
}

#[test]
fn the_ring_closes_before_its_buffers_are_freed() {
    let log = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let q = Entries::new(
        Dropped("ring", log.clone()),
        Dropped("buffers", log.clone()),
        0,
    );
    drop(q);
    assert_eq!(*log.borrow(), ["ring", "buffers"]);
}

#[test]
fn buffers_the_kernel_may_still_hold_are_never_freed() {
    let log = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let mut q = Entries::new(
        Dropped("ring", log.clone()),
        Dropped("buffers", log.clone()),
        DEPTH,
    );
    q.held -= 1;
    drop(q);
    assert_eq!(*log.borrow(), ["ring"], "an entry was still registered");
}

#[test]
fn a_late_answer_wakes_the_queue_through_a_descriptor_it_holds() {
    let waker = Waker::new().unwrap();
    let job = waker.clone();
    let raw = waker.raw();
    drop(waker);
    // The queue's thread is gone; the number stays the eventfd's while the job holds it.
    // SAFETY: F_GETFD only reads the descriptor's flags.
    assert!(unsafe { libc::fcntl(raw, libc::F_GETFD) } >= 0);
    job.wake();
    let mut buf = [0u8; 8];
    // SAFETY: reads 8 bytes into a live buffer from the eventfd the job holds open.
    assert_eq!(unsafe { libc::read(raw, buf.as_mut_ptr().cast(), 8) }, 8);
    assert_eq!(u64::from_ne_bytes(buf), 1);
}

#[test]
fn answers_from_other_threads_commit_with_the_entrys_commit_id() {
    let (tx, rx) = channel();
    tx.send(Answer {
        slot: 1,
        commit_id: 77,
        unique: 5,
        error: -libc::EIO,
    })
    .unwrap();
    let mut slots: Vec<Slot> = (0..2).map(|_| Slot::new()).collect();
    let mut pending = Vec::new();
    commit_answers(9, 3, &rx, &mut slots, &mut pending);
    // SAFETY: an Entry128 is 128 plain bytes (repr(C) over io_uring_sqe).
    let b: [u8; 128] = unsafe { std::mem::transmute(pending.remove(0)) };
    let req = abi::fuse_uring_cmd_req::read_from_bytes(&b[48..72]).unwrap();
    assert_eq!((req.commit_id, req.qid), (77, 3));
    let out = abi::fuse_out_header::read_from_bytes(&slots[1].header.in_out[..16]).unwrap();
    assert_eq!((out.unique, out.error), (5, -libc::EIO));
}

#[test]
fn replies_land_in_the_slot() {
    let mut slot = Slot::new();
    slot.put_reply(9, -2, &[b"ab", b"cde"]);
    let out = abi::fuse_out_header::read_from_bytes(&slot.header.in_out[..16]).unwrap();
    assert_eq!((out.unique, out.error, out.len), (9, -2, 21));
    assert_eq!(slot.header.ring_ent_in_out.payload_sz, 5);
    assert_eq!(&slot.payload[..5], b"abcde");
    // payload_sz sits at byte 272 of the header, where the kernel reads it.
    assert_eq!(
        u32::from_ne_bytes(slot.header.as_bytes()[272..276].try_into().unwrap()),
        5
    );
}

#[test]
fn ring_polls_only_while_requests_come_quickly() {
    let stats = Stats::new();
    let mut p = RingPoll::new(Duration::from_millis(20), Arc::default());
    // Nothing arrived quickly yet: no poll at all.
    assert!(!p.wait(&stats, || panic!("polled while requests came slowly")));
    p.arrived(false);
    // Within the window of the answer: the next wait looks, and returns at a completion.
    let mut looks = 0;
    assert!(p.wait(&stats, || {
        looks += 1;
        looks == 3
    }));
    assert_eq!(looks, 3);
    p.arrived(true);
    // Nothing comes: the wait ends with the window.
    let t = Instant::now();
    assert!(!p.wait(&stats, || false));
    assert!(t.elapsed() >= Duration::from_millis(20));
    // A request long after the answer turns polling off.
    std::thread::sleep(Duration::from_millis(20 * QUICK as u64 + 10));
    p.arrived(false);
    assert!(!p.wait(&stats, || panic!("polled after a slow request")));
    // busy_poll=0 never polls.
    let mut off = RingPoll::new(Duration::ZERO, Arc::default());
    off.arrived(true);
    assert!(!off.wait(&stats, || panic!("polled with busy_poll=0")));
}

#[test]
fn large_reads_unpin_the_thread_and_other_requests_pin_it_again() {
    let mut p = Placement::pinned();
    assert_eq!(p.next(false), None);
    assert_eq!(p.next(true), Some(true));
    assert_eq!(p.next(true), None, "no system call while large reads go on");
    assert_eq!(p.next(false), Some(false));
    assert_eq!(p.next(false), None);
}

#[test]
fn only_reads_of_64_kib_and_more_are_large() {
    let mut slot = Slot::new();
    let set = |slot: &mut Slot, opcode: u32, size: u32| {
        let h = abi::fuse_in_header {
            len: 80,
            opcode,
            unique: 1,
            nodeid: 2,
            uid: 0,
            gid: 0,
            pid: 0,
            total_extlen: 0,
            padding: 0,
        };
        slot.header.in_out[..40].copy_from_slice(h.as_bytes());
        let mut r = abi::fuse_read_in::new_zeroed();
        r.size = size;
        slot.header.op_in[..40].copy_from_slice(r.as_bytes());
    };
    set(&mut slot, abi::opcode::READ, 128 * 1024);
    assert!(large_read(&slot.header));
    set(&mut slot, abi::opcode::READ, 4096);
    assert!(!large_read(&slot.header));
    set(&mut slot, abi::opcode::WRITE, 128 * 1024);
    assert!(!large_read(&slot.header));
}

#[test]
fn possible_cpus_parse() {
    let cpus = possible_cpus().unwrap();
    assert!(!cpus.is_empty());
    assert_eq!(cpus[0], 0);
}
