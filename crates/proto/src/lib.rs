//! memofs's FUSE protocol, apart from any transport that carries it.
//!
//! - [`abi`]: the kernel's structures (`include/uapi/linux/fuse.h`), defined once with size
//!   assertions;
//! - [`decode`]: request bytes into the request layer's [`memofs_request::Request`], with
//!   `ext` reading the extensions a request may carry (a new node's security label);
//! - [`encode`]: the request layer's replies into bytes, through a [`encode::ReplySink`] the
//!   transport supplies;
//! - [`init`]: the INIT negotiation, from the mount plan.
//!
//! Both transports use it: `memofs-fuse` (the kernel's `/dev/fuse` and FUSE-over-io_uring)
//! and `memofs-virtiofs` (a virtual machine's queues). Neither depends on the other.
#![deny(missing_docs)]

pub mod abi;
pub mod decode;
pub mod encode;
mod ext;
pub mod init;
