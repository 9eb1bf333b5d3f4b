//! The error type of every filesystem operation.

use std::fmt;
use std::io;

/// A positive Linux errno value, as returned to the kernel.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

/// Result of a filesystem operation.
pub type Result<T> = std::result::Result<T, Errno>;

macro_rules! errnos {
    ($($name:ident),* $(,)?) => {
        impl Errno {
            $(
                #[doc = concat!("`", stringify!($name), "`")]
                pub const $name: Errno = Errno(libc::$name);
            )*
        }
    };
}

errnos!(
    EPERM,
    ENOENT,
    EIO,
    EBADF,
    EAGAIN,
    ENOMEM,
    EACCES,
    EEXIST,
    EXDEV,
    ENODEV,
    ENOTDIR,
    EISDIR,
    EINVAL,
    ENFILE,
    EMFILE,
    EFBIG,
    ENOSPC,
    ESPIPE,
    EROFS,
    EMLINK,
    ERANGE,
    ENAMETOOLONG,
    ENOSYS,
    ENOTEMPTY,
    ELOOP,
    ENODATA,
    EOPNOTSUPP,
    ENOTSUP,
    ESTALE,
    ENXIO,
    EOVERFLOW,
    E2BIG,
    EBUSY,
    ENOTCONN,
    ENOTTY,
    ETXTBSY,
);

impl Errno {
    /// Reads the calling thread's `errno` after a failed libc call.
    pub fn last() -> Errno {
        Errno::from(io::Error::last_os_error())
    }
}

impl From<io::Error> for Errno {
    /// Only the OS error code is carried over; anything else becomes `EIO`.
    fn from(e: io::Error) -> Errno {
        Errno(e.raw_os_error().unwrap_or(libc::EIO))
    }
}

impl From<Errno> for io::Error {
    fn from(e: Errno) -> io::Error {
        io::Error::from_raw_os_error(e.0)
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Errno({}: {})",
            self.0,
            io::Error::from_raw_os_error(self.0)
        )
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", io::Error::from_raw_os_error(self.0))
    }
}

impl std::error::Error for Errno {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_error_conversion_keeps_os_code_only() {
        assert_eq!(
            Errno::from(io::Error::from_raw_os_error(libc::ENOSPC)),
            Errno::ENOSPC
        );
        assert_eq!(Errno::from(io::Error::other("x")), Errno::EIO);
    }
}
