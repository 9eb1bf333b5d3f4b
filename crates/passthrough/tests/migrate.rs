//! The passthrough backend's state stream: what a guest holds of an export (node ids, open
//! files, a listing under way) written out and read into a new server of the same tree
//! answers as the first did; a file that cannot be found again, a destination that served
//! already, and a damaged stream are refused.

mod common;

use common::{is_root, n, setup, setup_with, walk};
use memofs_core::migrate::{Choices, FindBy, FrameReader, FrameWriter, OnError};
use memofs_core::{Backend, Caller, ROOT_INO};
use memofs_passthrough::{PassthroughConfig, PassthroughFs};

const ROOT: Caller = Caller::ROOT;

fn save(fs: &PassthroughFs) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    let mut w = FrameWriter::start(&mut bytes)?;
    fs.migration().expect("the backend moves").save(&mut w)?;
    Ok(bytes)
}

fn load(fs: &PassthroughFs, bytes: &[u8]) -> std::io::Result<()> {
    let mut input = bytes;
    let mut r = FrameReader::start(&mut input)?;
    fs.migration().expect("the backend moves").load(&mut r)?;
    r.finish()
}

fn config(find_by: FindBy, verify_handles: bool) -> PassthroughConfig {
    PassthroughConfig {
        migration: Choices {
            find_by,
            verify_handles,
            ..Choices::default()
        },
        ..PassthroughConfig::default()
    }
}

fn names_from(
    fs: &PassthroughFs,
    dir: u64,
    fh: u64,
    offset: u64,
    max: usize,
) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    fs.readdir(dir, fh, offset, false, &mut |e| {
        if out.len() == max {
            return false;
        }
        out.push((e.name.to_string_lossy().into_owned(), e.offset));
        true
    })
    .unwrap();
    out
}

#[test]
fn what_a_guest_holds_moves_to_a_new_server_of_the_same_tree() {
    let (_t, export, a) = setup("migrate-holds");
    std::fs::create_dir(export.join("d")).unwrap();
    for i in 0..20 {
        std::fs::write(export.join(format!("d/f{i:02}")), format!("file {i}")).unwrap();
    }
    let file = walk(&a, "d/f03").unwrap();
    walk(&a, "d/f03").unwrap();
    let dir = walk(&a, "d").unwrap();
    let w = a.open(&ROOT, file.ino, libc::O_RDWR).unwrap();
    a.write(file.ino, w.fh, 6, b", written").unwrap();
    let d = a.opendir(&ROOT, dir.ino, 0).unwrap();
    let first = names_from(&a, dir.ino, d.fh, 0, 5);
    let bytes = save(&a).unwrap();

    let b = PassthroughFs::new(&export, PassthroughConfig::default()).unwrap();
    load(&b, &bytes).unwrap();
    assert_eq!(b.getattr(file.ino).unwrap().ino, file.ino);
    assert_eq!(b.getattr(dir.ino).unwrap(), a.getattr(dir.ino).unwrap());
    // The open file goes on, at its own position and mode.
    b.write(file.ino, w.fh, 15, b"!").unwrap();
    let mut buf = Vec::new();
    b.read(file.ino, w.fh, 0, 64, &mut buf).unwrap();
    assert_eq!(buf, b"file 3, written!");
    // The listing goes on where it was, each name once.
    let rest = names_from(&b, dir.ino, d.fh, first.last().unwrap().1, usize::MAX);
    let mut all: Vec<String> = first.iter().chain(&rest).map(|(n, _)| n.clone()).collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), first.len() + rest.len());
    assert_eq!(all.len(), 22, "{all:?}");
    // New handles are numbered past the moved ones; the references moved (two lookups).
    let again = b.open(&ROOT, file.ino, libc::O_RDONLY).unwrap();
    assert!(again.fh > w.fh);
    b.forget(file.ino, 1);
    assert!(b.getattr(file.ino).is_ok());
    b.release(file.ino, w.fh).unwrap();
    b.release(file.ino, again.fh).unwrap();
    b.releasedir(dir.ino, d.fh).unwrap();
    b.forget(file.ino, 1);
    assert!(
        b.getattr(file.ino).is_err(),
        "the last reference went with the forget"
    );
}

#[test]
fn a_file_deleted_while_held_stops_a_move_by_path_and_moves_by_handle() {
    let (_t, export, a) = setup("migrate-deleted");
    std::fs::write(export.join("gone"), b"still here").unwrap();
    let file = walk(&a, "gone").unwrap();
    // Held open, as the guest holds it.
    let _open = a.open(&ROOT, file.ino, libc::O_RDONLY).unwrap();
    a.unlink(&ROOT, ROOT_INO, n("gone")).unwrap();
    let e = save(&a).unwrap_err().to_string();
    assert!(
        e.contains("deleted while the guest holds it") && e.contains("gone"),
        "{e}"
    );
    if !is_root() {
        eprintln!("skipped: opening file handles takes CAP_DAC_READ_SEARCH");
        return;
    }
    let (_t, export, a) = setup_with("migrate-handles", config(FindBy::FileHandles, false));
    std::fs::write(export.join("gone"), b"still here").unwrap();
    let file = walk(&a, "gone").unwrap();
    let o2 = a.open(&ROOT, file.ino, libc::O_RDONLY).unwrap();
    a.unlink(&ROOT, ROOT_INO, n("gone")).unwrap();
    let bytes = save(&a).unwrap();
    let b = PassthroughFs::new(&export, PassthroughConfig::default()).unwrap();
    load(&b, &bytes).unwrap();
    let mut buf = Vec::new();
    b.read(file.ino, o2.fh, 0, 64, &mut buf).unwrap();
    assert_eq!(buf, b"still here");
}

/// With `--migration-on-error=guest-error` a file the destination cannot find again does not
/// stop the move: the guest keeps its node id and handle, gets `EIO` for them, and lets go of
/// them as usual; the rest answers as before, and a second move carries the lost ones on.
#[test]
fn a_file_that_cannot_be_found_again_gives_the_guest_errors_with_guest_error() {
    let (_t, export, a) = setup("migrate-guest-error");
    std::fs::write(export.join("kept"), b"kept").unwrap();
    std::fs::write(export.join("lost"), b"lost").unwrap();
    let kept = walk(&a, "kept").unwrap();
    let lost = walk(&a, "lost").unwrap();
    let ko = a.open(&ROOT, kept.ino, libc::O_RDONLY).unwrap();
    let lo = a.open(&ROOT, lost.ino, libc::O_RDONLY).unwrap();
    let bytes = save(&a).unwrap();
    std::fs::remove_file(export.join("lost")).unwrap();
    let abort = PassthroughFs::new(&export, PassthroughConfig::default()).unwrap();
    let e = load(&abort, &bytes).unwrap_err().to_string();
    assert!(e.contains("cannot be found here"), "{e}");
    let guest_error = PassthroughConfig {
        migration: Choices {
            on_error: OnError::GuestError,
            ..Choices::default()
        },
        ..PassthroughConfig::default()
    };
    let b = PassthroughFs::new(&export, guest_error.clone()).unwrap();
    load(&b, &bytes).unwrap();
    let mut buf = Vec::new();
    b.read(kept.ino, ko.fh, 0, 64, &mut buf).unwrap();
    assert_eq!(buf, b"kept");
    assert_eq!(b.getattr(lost.ino).unwrap_err(), memofs_core::Errno::EIO);
    assert_eq!(
        b.read(lost.ino, lo.fh, 0, 64, &mut buf).unwrap_err(),
        memofs_core::Errno::EIO
    );
    // Carried on by the next move, to a server that may abort: they stay lost there too.
    let c = PassthroughFs::new(&export, guest_error).unwrap();
    load(&c, &save(&b).unwrap()).unwrap();
    assert_eq!(c.getattr(lost.ino).unwrap_err(), memofs_core::Errno::EIO);
    c.release(lost.ino, lo.fh).unwrap();
    c.forget(lost.ino, 1);
    assert_eq!(c.getattr(lost.ino).unwrap_err(), memofs_core::Errno::ESTALE);
    let names: Vec<_> = names_from(&c, ROOT_INO, 0, 0, 100)
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert!(names.contains(&"kept".to_string()) && !names.contains(&"lost".to_string()));
}

#[test]
fn a_path_leading_elsewhere_is_caught_with_verify_handles() {
    let (_t, export, a) = setup("migrate-verify");
    std::fs::write(export.join("f"), b"one").unwrap();
    walk(&a, "f").unwrap();
    let bytes = save(&a).unwrap();
    // The name now leads to another file.
    std::fs::rename(export.join("f"), export.join("old")).unwrap();
    std::fs::write(export.join("f"), b"two").unwrap();
    let b = PassthroughFs::new(&export, config(FindBy::Paths, true)).unwrap();
    let e = load(&b, &bytes).unwrap_err().to_string();
    assert!(e.contains("another file here"), "{e}");
}

#[test]
fn a_destination_that_served_or_lacks_a_file_or_a_damaged_stream_is_refused() {
    let (_t, export, a) = setup("migrate-refused");
    std::fs::write(export.join("f"), b"x").unwrap();
    walk(&a, "f").unwrap();
    let bytes = save(&a).unwrap();
    let served = PassthroughFs::new(&export, PassthroughConfig::default()).unwrap();
    walk(&served, "f").unwrap();
    let e = load(&served, &bytes).unwrap_err().to_string();
    assert!(e.contains("served a guest already"), "{e}");
    let (_t2, _other, elsewhere) = setup("migrate-elsewhere");
    let e = load(&elsewhere, &bytes).unwrap_err().to_string();
    assert!(e.contains("cannot be found here") && e.contains('f'), "{e}");
    for cut in [bytes.len() / 2, bytes.len() - 1] {
        let fresh = PassthroughFs::new(&export, PassthroughConfig::default()).unwrap();
        assert!(load(&fresh, &bytes[..cut]).is_err(), "cut at {cut}");
    }
}

#[test]
fn a_file_handle_naming_a_file_outside_the_export_is_refused() {
    if !is_root() {
        eprintln!("skipped: opening file handles takes CAP_DAC_READ_SEARCH");
        return;
    }
    let (t, export, a) = setup_with("migrate-outside", config(FindBy::FileHandles, false));
    std::fs::write(export.join("secret"), b"not for the other export").unwrap();
    walk(&a, "secret").unwrap();
    let bytes = save(&a).unwrap();
    // Another export on the same filesystem, where no path leads to that file.
    let other = t.join("other");
    std::fs::create_dir(&other).unwrap();
    let b = PassthroughFs::new(&other, PassthroughConfig::default()).unwrap();
    let e = load(&b, &bytes).unwrap_err().to_string();
    assert!(e.contains("not in the shared directory"), "{e}");
}
