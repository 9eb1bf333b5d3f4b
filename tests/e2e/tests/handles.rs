//! File handles (`name_to_handle_at`, `open_by_handle_at`, what NFS export uses) of the mem
//! backend stay valid after the kernel forgets the inodes, as on tmpfs (xfstests'
//! generic/426 and generic/477): the kernel then finds each by its node id.

use std::fs;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use memofs_e2e::sys::cpath;
use memofs_e2e::{is_root, ok, require_mount, skip, Mount};

/// `struct file_handle` with room for any handle.
#[repr(C)]
struct Handle {
    bytes: u32,
    kind: i32,
    data: [u8; 128],
}

fn handle_of(p: &Path) -> Handle {
    let mut h = Handle {
        bytes: 128,
        kind: 0,
        data: [0; 128],
    };
    let mut mount_id = 0;
    let path = cpath(p);
    // SAFETY: `path` is NUL-terminated; `h` has room for `bytes` bytes of handle.
    let r = unsafe {
        libc::syscall(
            libc::SYS_name_to_handle_at,
            libc::AT_FDCWD,
            path.as_ptr(),
            &mut h as *mut Handle,
            &mut mount_id as *mut i32,
            0,
        )
    };
    assert_eq!(
        r,
        0,
        "name_to_handle_at {}: {}",
        p.display(),
        std::io::Error::last_os_error()
    );
    h
}

fn open_by_handle(mount: &fs::File, h: &mut Handle, flags: i32) -> std::io::Result<fs::File> {
    // SAFETY: `mount` is an open descriptor and `h` a handle name_to_handle_at filled.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_by_handle_at,
            mount.as_raw_fd(),
            h as *mut Handle,
            flags,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(fs::File::from(unsafe { OwnedFd::from_raw_fd(fd as i32) }))
}

/// The kernel drops every dentry and inode it can (each memofs inode gets its FORGET).
fn drop_caches() {
    ok!(fs::write("/proc/sys/vm/drop_caches", "2"));
}

#[test]
fn handles_open_files_and_directories_the_kernel_forgot() {
    require_mount!();
    if !is_root() {
        skip!(Root, "open_by_handle_at needs CAP_DAC_READ_SEARCH");
    }
    let m = Mount::mem(&["size=16m"]);
    ok!(fs::create_dir_all(m.join("d/e")));
    ok!(fs::write(m.join("d/e/f"), b"found by handle"));
    ok!(fs::write(m.join("gone"), b"x"));
    let mut file = handle_of(&m.join("d/e/f"));
    let mut dir = handle_of(&m.join("d/e"));
    let mut gone = handle_of(&m.join("gone"));
    ok!(fs::remove_file(m.join("gone")));
    // A rename of a directory on the way does not change what the handles name.
    ok!(fs::rename(m.join("d"), m.join("moved")));
    drop_caches();
    let root = ok!(fs::File::open(m.path()));
    let f = ok!(open_by_handle(&root, &mut file, libc::O_RDONLY));
    assert_eq!(ok!(std::io::read_to_string(f)), "found by handle");
    let d = ok!(open_by_handle(
        &root,
        &mut dir,
        libc::O_RDONLY | libc::O_DIRECTORY
    ));
    // The directory was reconnected to its path: its listing and its `..` work.
    let listed: Vec<_> = ok!(fs::read_dir(format!("/proc/self/fd/{}", d.as_raw_fd())))
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(listed, ["f"]);
    match open_by_handle(&root, &mut gone, libc::O_RDONLY) {
        Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ESTALE), "{e}"),
        Ok(_) => panic!("an unlinked file opened by its handle"),
    }
    // The root's handle, and a `..` lookup of a top-level directory, leave the root usable.
    let mut top = handle_of(&m.join("moved"));
    drop_caches();
    ok!(open_by_handle(
        &root,
        &mut top,
        libc::O_RDONLY | libc::O_DIRECTORY
    ));
    ok!(fs::write(m.join("after"), b"root still works"));
    assert!(ok!(fs::read_dir(m.path())).count() >= 2);
}
