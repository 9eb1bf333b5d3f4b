//! Tests of [`super`] (`migrate.rs`), kept apart for the length of the module.
use super::*;

fn inode(ino: Ino, mode: u32, nlink: u32, kind: Kind) -> Record {
    Record::Inode {
        ino,
        mode,
        uid: 0,
        gid: 0,
        nlink,
        flags: 0,
        lookups: 0,
        opens: 0,
        times: [0; 4],
        kind,
    }
}

fn dir(ino: Ino, nlink: u32, parent: Ino) -> Record {
    let kind = Kind::Dir {
        parent,
        next_cookie: 100,
        removed: false,
    };
    inode(ino, libc::S_IFDIR | 0o755, nlink, kind)
}

fn file(ino: Ino, nlink: u32) -> Record {
    inode(ino, libc::S_IFREG | 0o644, nlink, Kind::File { size: 0 })
}

fn entry(cookie: u64, name: &str, ino: Ino, kind: u32) -> Record {
    Record::Entry {
        cookie,
        name: name.as_bytes().to_vec(),
        ino,
        kind,
    }
}

/// Loads the stream of `records` (framed, the filesystem's record first, the end last
/// with `inodes` counted) into a new filesystem: the error, if any.
fn load(records: Vec<Record>, inodes: u64) -> String {
    let mut bytes = Vec::new();
    let mut w = FrameWriter::start(&mut bytes).unwrap();
    let mut buf = Vec::new();
    let fs = Record::Fs {
        next_ino: 100,
        inodes: records
            .iter()
            .filter(|r| matches!(r, Record::Inode { .. }))
            .count() as u64,
        precopy: None,
    };
    let end = Record::End { inodes, bytes: 0 };
    for r in std::iter::once(&fs).chain(&records).chain([&end]) {
        put(&mut w, r, &mut buf).unwrap();
    }
    let target = MemFs::new(crate::MemConfig::default()).unwrap();
    let mut input = &bytes[..];
    let mut r = FrameReader::start(&mut input).unwrap();
    match target.load(&mut r) {
        Ok(()) => String::new(),
        Err(e) => e.to_string(),
    }
}

const DIR: u32 = libc::S_IFDIR;
const REG: u32 = libc::S_IFREG;

#[test]
fn a_consistent_tree_loads() {
    let e = load(
        vec![
            dir(ROOT_INO, 3, ROOT_INO),
            entry(10, "d", 2, DIR),
            entry(11, "f", 3, REG),
            entry(12, "g", 3, REG),
            dir(2, 2, ROOT_INO),
            file(3, 2),
        ],
        4,
    );
    assert_eq!(e, "", "a file with two names, a directory");
}

#[test]
fn directories_in_a_cycle_are_refused() {
    let e = load(
        vec![
            dir(ROOT_INO, 2, ROOT_INO),
            dir(2, 3, 3),
            entry(10, "b", 3, DIR),
            dir(3, 3, 2),
            entry(10, "a", 2, DIR),
        ],
        3,
    );
    assert!(e.contains("cycle"), "{e}");
}

#[test]
fn an_entry_of_another_kind_than_its_inode_is_refused() {
    let e = load(
        vec![
            dir(ROOT_INO, 3, ROOT_INO),
            entry(10, "f", 2, DIR),
            file(2, 1),
        ],
        2,
    );
    assert!(e.contains("which is a Regular"), "{e}");
}

#[test]
fn a_directory_with_two_names_is_refused() {
    let e = load(
        vec![
            dir(ROOT_INO, 4, ROOT_INO),
            entry(10, "a", 2, DIR),
            entry(11, "b", 2, DIR),
            dir(2, 2, ROOT_INO),
        ],
        2,
    );
    assert!(e.contains("named twice"), "{e}");
}

#[test]
fn link_counts_the_names_do_not_make_are_refused() {
    let e = load(
        vec![
            dir(ROOT_INO, 2, ROOT_INO),
            entry(10, "f", 2, REG),
            file(2, 5),
        ],
        2,
    );
    assert!(e.contains("5 links, its names make 1"), "{e}");
}

#[test]
fn a_device_record_of_a_file_or_directory_mode_is_refused() {
    for mode in [REG, DIR] {
        let e = load(
            vec![
                dir(ROOT_INO, 2, ROOT_INO),
                entry(10, "x", 2, mode),
                inode(2, mode | 0o644, 1, Kind::Special { rdev: 0 }),
            ],
            2,
        );
        assert!(e.contains("mode and kind differ"), "{mode:o}: {e}");
    }
}

#[test]
fn a_file_by_data_file_number_is_refused_outside_a_handover() {
    let e = load(
        vec![
            dir(ROOT_INO, 2, ROOT_INO),
            entry(10, "f", 2, REG),
            inode(2, REG | 0o644, 1, Kind::Adopted { data: 0 }),
        ],
        2,
    );
    assert!(e.contains("outside a handover"), "{e}");
}

#[test]
fn pages_allocated_past_the_end_of_no_file_are_refused() {
    let e = load(
        vec![
            dir(ROOT_INO, 2, ROOT_INO),
            Record::Allocated {
                offset: 0,
                len: 4096,
            },
        ],
        1,
    );
    assert!(e.contains("past the end"), "{e}");
}
