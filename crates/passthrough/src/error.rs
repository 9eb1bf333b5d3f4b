//! Errors setting up an export.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Why [`crate::PassthroughFs::new`] failed.
#[derive(Debug)]
pub enum SetupError {
    /// The source directory does not exist.
    SourceMissing(PathBuf),
    /// The source exists but is not a directory.
    NotADirectory(PathBuf),
    /// The source could not be opened or examined.
    CannotOpen {
        /// The source.
        path: PathBuf,
        /// The host's error.
        source: io::Error,
    },
    /// `/proc/self/fd` is not available (procfs not mounted?); the backend needs it to
    /// re-open files by descriptor.
    NoProc(io::Error),
    /// The private copy of the source's mount refused the atime rule asked for.
    NoAtimeRule(String),
    /// The host kernel lacks `openat2` (Linux 5.6+), which confinement relies on.
    NoOpenat2(io::Error),
    /// The change feed `-o changes=` asks for cannot run for this source.
    NoChangeFeed(String),
    /// File handles are mandatory ([`crate::FileHandles::Mandatory`]) and the source's
    /// filesystem cannot have its handles opened here.
    NoFileHandles(String),
}

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetupError::SourceMissing(p) => {
                write!(f, "source directory {} does not exist", p.display())
            }
            SetupError::NotADirectory(p) => write!(f, "source {} is not a directory", p.display()),
            SetupError::CannotOpen { path, source } => {
                write!(f, "cannot open source {}: {source}", path.display())
            }
            SetupError::NoProc(e) => write!(f, "cannot open /proc/self/fd: {e}"),
            SetupError::NoAtimeRule(why) => write!(
                f,
                "the atime option cannot take effect: {why}; mount without it to keep the \
                 host's rule"
            ),
            SetupError::NoOpenat2(e) => {
                write!(f, "openat2 unavailable (Linux 5.6 or later needed): {e}")
            }
            SetupError::NoChangeFeed(why) => write!(f, "changes=: {why}"),
            SetupError::NoFileHandles(why) => write!(
                f,
                "--inode-file-handles=mandatory: the shared directory's file handles cannot be \
                 opened here ({why}); use prefer or never"
            ),
        }
    }
}

impl std::error::Error for SetupError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SetupError::CannotOpen { source, .. } => Some(source),
            SetupError::NoProc(e) | SetupError::NoOpenat2(e) => Some(e),
            SetupError::SourceMissing(_)
            | SetupError::NotADirectory(_)
            | SetupError::NoChangeFeed(_)
            | SetupError::NoAtimeRule(_)
            | SetupError::NoFileHandles(_) => None,
        }
    }
}
