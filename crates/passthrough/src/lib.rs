//! placeholder: the passthrough backend (work in progress).
