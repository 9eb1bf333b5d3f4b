//! The mem backend's state stream: a filesystem written out and read into a new one answers
//! every request as the first did, and a damaged stream is refused.

use memofs_core::atime::AtimeMode;
use memofs_core::migrate::{FrameReader, FrameWriter};
use memofs_core::{Backend, Errno, SetAttr, TimeSet, Timestamp, ROOT_INO};
use memofs_mem::MemFs;

mod common;
use common::{fs, kernel_fs, n, read_all, C};

fn save(fs: &MemFs) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut w = FrameWriter::start(&mut bytes).unwrap();
    fs.migration()
        .expect("the mem backend moves")
        .save(&mut w)
        .unwrap();
    bytes
}

fn load(fs: &MemFs, bytes: &[u8]) -> std::io::Result<()> {
    let mut input = bytes;
    let mut r = FrameReader::start(&mut input)?;
    fs.migration()
        .expect("the mem backend moves")
        .load(&mut r)?;
    r.finish()
}

/// Everything a guest could ask about every inode: attributes, a listing with its offsets,
/// data, xattrs, link targets.
fn everything(fs: &MemFs, inos: &[u64]) -> Vec<String> {
    let mut out = Vec::new();
    for &ino in inos {
        let Ok(a) = fs.getattr(ino) else {
            out.push(format!("{ino}: gone"));
            continue;
        };
        out.push(format!("{a:?}"));
        let xs = fs.listxattr(ino).unwrap();
        let mut names: Vec<&[u8]> = xs.split(|&b| b == 0).filter(|n| !n.is_empty()).collect();
        names.sort();
        for name in names {
            let v = fs.getxattr(ino, std::ffi::OsStr::from_bytes(name)).unwrap();
            out.push(format!("{ino} xattr {name:?}={v:?}"));
        }
        match a.kind {
            memofs_core::FileKind::Directory => {
                fs.readdir(ino, 0, 0, false, &mut |e| {
                    out.push(format!("{ino} entry {} {:?} {}", e.offset, e.name, e.ino));
                    true
                })
                .unwrap();
            }
            memofs_core::FileKind::Regular => {
                let data = read_all(fs, ino);
                out.push(format!("{ino} data {} {:x}", data.len(), checksum(&data)));
                let mut holes = Vec::new();
                let mut at = 0;
                while let Ok(h) = fs.lseek(ino, 0, at, libc::SEEK_HOLE) {
                    holes.push(h);
                    match fs.lseek(ino, 0, h, libc::SEEK_DATA) {
                        Ok(d) => at = d,
                        Err(_) => break,
                    }
                }
                out.push(format!("{ino} holes at {holes:?}"));
            }
            memofs_core::FileKind::Symlink => {
                out.push(format!("{ino} -> {:?}", fs.readlink(ino).unwrap()));
            }
            _ => {}
        }
    }
    out
}

use std::os::unix::ffi::OsStrExt;

fn checksum(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// A tree with every kind of inode, holes, xattrs, an unlinked open file, a removed
/// directory still referenced, and a listing's worth of removed entries.
fn build(fs: &MemFs) -> Vec<u64> {
    let mut inos = vec![ROOT_INO];
    let d = fs.mkdir(&C, ROOT_INO, n("dir"), 0o750, 0).unwrap().ino;
    inos.push(d);
    for i in 0..50 {
        let (a, o) = fs
            .create(&C, d, n(&format!("f{i}")), 0o644, 0, libc::O_RDWR)
            .unwrap();
        fs.write(
            a.ino,
            o.fh,
            (i * 5000) as u64,
            format!("file {i}").as_bytes(),
        )
        .unwrap();
        fs.release(a.ino, o.fh).unwrap();
        inos.push(a.ino);
    }
    for i in (0..50).step_by(3) {
        fs.unlink(&C, d, n(&format!("f{i}"))).unwrap();
    }
    let (big, o) = fs
        .create(&C, ROOT_INO, n("big"), 0o600, 0, libc::O_RDWR)
        .unwrap();
    let pattern: Vec<u8> = (0..3 << 20).map(|i: u32| (i % 251) as u8).collect();
    fs.write(big.ino, o.fh, 0, &pattern).unwrap();
    fs.write(big.ino, o.fh, 10 << 20, b"after a hole").unwrap();
    let set = SetAttr {
        size: Some(12 << 20),
        ..SetAttr::default()
    };
    fs.setattr(&C, big.ino, &set).unwrap();
    // Room allocated past the end (zeros that count against size=).
    fs.fallocate(big.ino, o.fh, 20 << 20, 3 << 12, libc::FALLOC_FL_KEEP_SIZE)
        .unwrap();
    // A second name: as tmpfs, it counts as an inode.
    fs.link(&C, big.ino, ROOT_INO, n("big-again")).unwrap();
    inos.push(big.ino);
    let (gone, og) = fs
        .create(&C, ROOT_INO, n("gone"), 0o644, 0, libc::O_RDWR)
        .unwrap();
    fs.write(gone.ino, og.fh, 0, b"still open").unwrap();
    fs.unlink(&C, ROOT_INO, n("gone")).unwrap();
    inos.push(gone.ino);
    let l = fs
        .symlink(&C, ROOT_INO, n("link"), n("dir/f1"))
        .unwrap()
        .ino;
    inos.push(l);
    let fifo = fs
        .mknod(&C, ROOT_INO, n("fifo"), libc::S_IFIFO | 0o600, 0, 0)
        .unwrap()
        .ino;
    inos.push(fifo);
    fs.setxattr(&C, d, n("user.colour"), b"blue", 0).unwrap();
    fs.setxattr(&C, big.ino, n("trusted.x"), &[0, 1, 2], 0)
        .unwrap();
    let r = fs.mkdir(&C, ROOT_INO, n("removed"), 0o755, 0).unwrap().ino;
    fs.rmdir(&C, ROOT_INO, n("removed")).unwrap();
    inos.push(r);
    let times = SetAttr {
        atime: Some(TimeSet::At(Timestamp::from_timespec(1_000_000, 5))),
        mtime: Some(TimeSet::At(Timestamp::from_timespec(2_000_000, 7))),
        ..SetAttr::default()
    };
    fs.setattr(&C, l, &times).unwrap();
    fs.setattr(&C, big.ino, &times).unwrap();
    inos.push(9999);
    inos
}

fn round_trip(src: MemFs, dst: MemFs) {
    let inos = build(&src);
    let before = everything(&src, &inos);
    let usage = src.usage();
    let bytes = save(&src);
    load(&dst, &bytes).unwrap();
    let after = everything(&dst, &inos);
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(a, b, "after the move, before it");
    }
    assert_eq!(after.len(), before.len());
    assert_eq!(dst.usage(), usage);
    // New inodes take numbers the source never gave out.
    let fresh = dst.mkdir(&C, ROOT_INO, n("new"), 0o755, 0).unwrap().ino;
    assert!(fresh > *inos.iter().filter(|&&i| i != 9999).max().unwrap());
    // The unlinked file lives while the guest holds it, and goes with its last reference.
    let gone = inos[inos.len() - 5];
    assert_eq!(read_all(&dst, gone), b"still open");
    dst.release(gone, 0).unwrap();
    dst.forget(gone, 1);
    assert_eq!(dst.getattr(gone), Err(Errno::ESTALE));
}

/// A filesystem whose reads move no atime, so that looking at everything changes nothing.
fn quiet() -> MemFs {
    MemFs::new(memofs_mem::MemConfig {
        atime: memofs_core::AtimePolicy {
            mode: AtimeMode::Noatime,
            nodiratime: true,
        },
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn a_filesystem_moves_whole_through_its_state_stream() {
    round_trip(quiet(), quiet());
}

#[test]
fn kernel_backed_data_moves_whole_too() {
    let (Some(src), Some(dst)) = (
        kernel_fs(0, AtimeMode::Noatime),
        kernel_fs(0, AtimeMode::Noatime),
    ) else {
        return;
    };
    round_trip(src, dst);
}

#[test]
fn a_handover_takes_the_data_files_where_they_are() {
    let Some(src) = kernel_fs(0, AtimeMode::Noatime) else {
        return;
    };
    let inos = build(&src);
    let before = everything(&src, &inos);
    let mut bytes = Vec::new();
    let mut w = FrameWriter::start(&mut bytes).unwrap();
    src.save_handover(&mut w).unwrap();
    let (root, next, until) = src.store_handover().unwrap().unwrap();
    // The data is not in the stream: each file names its data file.
    assert!(bytes.len() < 64 << 10, "{} bytes", bytes.len());
    // A plain load takes no file by number.
    assert!(load(&kernel_fs(0, AtimeMode::Noatime).unwrap(), &bytes).is_err());
    let store = memofs_mem::kernel_data::BackingStore::adopt(root, next, until).unwrap();
    let config = memofs_mem::MemConfig {
        kernel_data: true,
        atime: memofs_core::AtimePolicy {
            mode: AtimeMode::Noatime,
            nodiratime: false,
        },
        ..Default::default()
    };
    let dst = MemFs::adopting(config, store);
    let mut input = &bytes[..];
    let mut r = FrameReader::start(&mut input).unwrap();
    dst.load_handover(&mut r).unwrap();
    r.finish().unwrap();
    // The old server's process ends by executing the new one: nothing of it unlinks data.
    std::mem::forget(src);
    let after = everything(&dst, &inos);
    assert!(after == before, "the handed-over filesystem differs");
    // New files take data file numbers the old server never gave.
    let (a, o) = dst
        .create(&C, ROOT_INO, n("new"), 0o644, 0, libc::O_RDWR)
        .unwrap();
    dst.write(a.ino, o.fh, 0, b"new data").unwrap();
    assert_eq!(read_all(&dst, a.ino), b"new data");
}

#[test]
fn a_damaged_stream_or_a_full_destination_is_refused() {
    let src = fs();
    build(&src);
    let bytes = save(&src);
    for cut in [20, bytes.len() / 2, bytes.len() - 1] {
        let e = load(&fs(), &bytes[..cut]).unwrap_err();
        assert!(e.to_string().contains("state stream"), "{e}");
    }
    let mut extra = bytes.clone();
    extra.push(0);
    assert!(load(&fs(), &extra).is_err());
    let busy = fs();
    busy.mkdir(&C, ROOT_INO, n("x"), 0o755, 0).unwrap();
    let e = load(&busy, &bytes).unwrap_err();
    assert!(e.to_string().contains("already holds files"), "{e}");
    let small = MemFs::new(memofs_mem::MemConfig {
        size_limit: 1 << 20,
        ..Default::default()
    })
    .unwrap();
    let e = load(&small, &bytes).unwrap_err();
    assert!(
        e.to_string().contains("No space") || e.to_string().contains("ENOSPC"),
        "{e}"
    );
}

/// Pre-copy: `src` sends its data over a pipe to `dst` while it keeps changing (writes into
/// sent chunks, a truncate, a punched hole, a new file, a file deleted); once stopped, the
/// state carries only what changed since the last round, and `dst` ends with what `src` has.
fn precopy_round_trip(src: MemFs, dst: MemFs) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let inos = build(&src);
    let (big, fh) = (inos[inos.len() - 6], 0);
    let (mut r, mut w) = std::io::pipe().unwrap();
    let stop = AtomicBool::new(false);
    let (rounds_tx, rounds_rx) = std::sync::mpsc::channel();
    // What the state carries without pre-copy.
    let full = save(&src);
    std::thread::scope(|s| {
        let (src, stop) = (&src, &stop);
        let sender = s.spawn(move || {
            let sent =
                src.migration()
                    .unwrap()
                    .precopy()
                    .unwrap()
                    .send(&mut w, stop, &mut |bytes| {
                        let _ = rounds_tx.send(bytes);
                    });
            drop(w);
            sent
        });
        let receiver = s.spawn(|| dst.migration().unwrap().precopy().unwrap().receive(&mut r));
        assert!(
            rounds_rx.recv().unwrap() > 3 << 20,
            "the first round sends the data"
        );
        // Changes after the first round: each must reach `dst` by the channel or the state.
        src.write(big, fh, 1 << 20, b"changed after it was sent")
            .unwrap();
        let cut = SetAttr {
            size: Some(11 << 20),
            ..SetAttr::default()
        };
        src.setattr(&C, big, &cut).unwrap();
        let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        src.fallocate(big, fh, (1 << 20) + 4096, 8192, punch)
            .unwrap();
        let (late, o) = src
            .create(&C, ROOT_INO, n("late"), 0o644, 0, libc::O_RDWR)
            .unwrap();
        src.write(late.ino, o.fh, 0, &[7u8; 100_000]).unwrap();
        src.release(late.ino, o.fh).unwrap();
        src.unlink(&C, inos[1], n("f1")).unwrap();
        stop.store(true, Ordering::Release);
        let sent = sender.join().unwrap().unwrap();
        assert_eq!(receiver.join().unwrap().unwrap(), sent);
    });
    let mut inos = inos;
    inos.push(src.lookup(&C, ROOT_INO, n("late")).unwrap().ino);
    let before = everything(&src, &inos);
    let usage = src.usage();
    let state = save(&src);
    // One chunk of the large file changed, of three: a third of its data goes again.
    assert!(
        state.len() * 2 < full.len(),
        "the state carries what changed: {} bytes, {} without pre-copy",
        state.len(),
        full.len()
    );
    load(&dst, &state).unwrap();
    let after = everything(&dst, &inos);
    assert_eq!(after, before, "after the move, before it");
    assert_eq!(dst.usage(), usage);
}

#[test]
fn precopy_sends_the_data_ahead_and_the_state_what_changed() {
    precopy_round_trip(quiet(), quiet());
}

#[test]
fn precopy_of_kernel_backed_data() {
    let (Some(src), Some(dst)) = (
        kernel_fs(0, AtimeMode::Noatime),
        kernel_fs(0, AtimeMode::Noatime),
    ) else {
        return;
    };
    precopy_round_trip(src, dst);
}

/// A channel that is not the one the state names (another session, or data changed on the
/// way) is refused, and the load fails.
#[test]
fn precopy_data_altered_on_the_way_is_refused() {
    use std::sync::atomic::AtomicBool;
    let src = quiet();
    build(&src);
    let stop = AtomicBool::new(false);
    let mut channel = Vec::new();
    let pre = src.migration().unwrap().precopy().unwrap();
    pre.send(&mut channel, &stop, &mut |_| {
        stop.store(true, std::sync::atomic::Ordering::Release)
    })
    .unwrap();
    let state = save(&src);
    // One byte of file data changed on the way.
    let at = channel.len() / 2;
    channel[at] ^= 1;
    let dst = quiet();
    // (The middle of the channel is file data: its frames still read.)
    let pre = dst.migration().unwrap().precopy().unwrap();
    pre.receive(&mut &channel[..]).unwrap();
    let e = load(&dst, &state).unwrap_err().to_string();
    assert!(e.contains("other data than the source sent"), "{e}");
}
