//! Helpers shared by the in-process tests of the mem backend.
#![allow(dead_code)]

use std::ffi::OsStr;

use memofs_core::atime::AtimeMode;
use memofs_core::{AtimePolicy, Backend, Caller};
use memofs_mem::{MemConfig, MemFs};

/// An unprivileged caller.
pub const C: Caller = Caller {
    uid: 1000,
    gid: 1000,
    pid: 1,
};
pub const PAGE: u64 = 4096;

pub fn fs() -> MemFs {
    MemFs::new(MemConfig::default()).unwrap()
}

pub fn n(s: &str) -> &OsStr {
    OsStr::new(s)
}

pub fn names(fs: &MemFs, dir: u64) -> Vec<String> {
    let mut out = Vec::new();
    fs.readdir(dir, 0, 0, false, &mut |e| {
        out.push(e.name.to_string_lossy().into_owned());
        true
    })
    .unwrap();
    out
}

pub fn read_all(fs: &MemFs, ino: u64) -> Vec<u8> {
    let mut buf = Vec::new();
    fs.read(ino, 0, 0, u32::MAX, &mut buf).unwrap();
    buf
}

/// The kernel-backed store (root only): same answers through the trait, data in the kernel.
pub fn kernel_fs(size: u64, atime: AtimeMode) -> Option<MemFs> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        let why = "the kernel-backed store needs root";
        memofs_e2e::skip::report(module_path!(), memofs_e2e::skip::Need::Root, why);
        return None;
    }
    let config = MemConfig {
        size_limit: size,
        kernel_data: true,
        atime: AtimePolicy {
            mode: atime,
            nodiratime: false,
        },
        ..Default::default()
    };
    Some(MemFs::new(config).expect("private tmpfs"))
}
