//! A read-only export is read-only in the host's kernel: the server's private copy of the
//! source's mount refuses every change (`EROFS`), though the backend itself is asked, as a
//! compromised server would ask it; the host's own mount stays writable.

mod common;

use memofs_core::{Backend, Caller, Errno, ROOT_INO};
use memofs_passthrough::{PassthroughConfig, PassthroughFs};

use common::{n, TempDir};

const ROOT: Caller = Caller::ROOT;

#[test]
fn a_read_only_export_is_refused_changes_by_the_hosts_kernel() {
    let t = TempDir::new("ro");
    std::fs::write(t.join("f"), b"host data").unwrap();
    std::fs::create_dir(t.join("d")).unwrap();
    let config = PassthroughConfig {
        read_only: true,
        ..PassthroughConfig::default()
    };
    let fs = PassthroughFs::new(t.path(), config).unwrap();
    if !fs.private_mount() {
        eprintln!("skipped: no private copy of the mount here (needs CAP_SYS_ADMIN)");
        return;
    }
    assert_eq!(
        fs.create(&ROOT, ROOT_INO, n("new"), 0o644, 0, libc::O_RDWR)
            .err(),
        Some(Errno::EROFS)
    );
    assert_eq!(
        fs.mkdir(&ROOT, ROOT_INO, n("newdir"), 0o755, 0).err(),
        Some(Errno::EROFS)
    );
    assert_eq!(fs.unlink(&ROOT, ROOT_INO, n("f")).err(), Some(Errno::EROFS));
    let f = fs.lookup(&ROOT, ROOT_INO, n("f")).unwrap();
    assert_eq!(
        fs.open(&ROOT, f.ino, libc::O_RDWR).err(),
        Some(Errno::EROFS),
        "an open for writing"
    );
    let o = fs.open(&ROOT, f.ino, libc::O_RDONLY).unwrap();
    let mut buf = Vec::new();
    fs.read(f.ino, o.fh, 0, 100, &mut buf).unwrap();
    assert_eq!(buf, b"host data");
    // The host's own mount is untouched.
    std::fs::write(t.join("g"), b"host").unwrap();
}
