//! The device's configuration space, for a VMM that asks the device for it
//! (`VHOST_USER_PROTOCOL_F_CONFIG`, `VHOST_USER_GET_CONFIG`) instead of filling it itself as
//! QEMU's `vhost-user-fs-pci` does: virtio-fs's `struct virtio_fs_config`, the tag the guest
//! mounts (36 bytes, NUL-padded, no terminator at full length) and the number of request
//! queues (little-endian u32).

/// The longest tag (`sizeof(virtio_fs_config.tag)`).
pub const MAX_TAG: usize = 36;
/// The request queues the configuration space announces: one, as virtiofsd's. A VMM that
/// fills the space itself may give the device more (QEMU's `num-request-queues=`), which it
/// serves; one that takes the device's word must set up as many queues as the guest is told.
const ANNOUNCED_QUEUES: u32 = 1;

/// A tag a guest mounts the device by (`mount -t virtiofs TAG DIR`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tag(String);

/// Why a tag was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TagError(String);

impl std::fmt::Display for TagError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for Tag {
    type Err = TagError;

    /// 1 to 36 bytes of UTF-8 without NUL (the guest reads the tag up to the first NUL).
    fn from_str(s: &str) -> Result<Tag, TagError> {
        if s.is_empty() || s.len() > MAX_TAG || s.contains('\0') {
            return Err(TagError(format!(
                "the tag must be 1 to {MAX_TAG} bytes of UTF-8 without NUL, not {} bytes",
                s.len()
            )));
        }
        Ok(Tag(s.to_string()))
    }
}

/// The whole configuration space for `tag`.
fn space(tag: &Tag) -> [u8; MAX_TAG + 4] {
    let mut space = [0u8; MAX_TAG + 4];
    space[..tag.0.len()].copy_from_slice(tag.0.as_bytes());
    space[MAX_TAG..].copy_from_slice(&ANNOUNCED_QUEUES.to_le_bytes());
    space
}

/// `size` bytes of the configuration space from `offset`, zero past its end (as virtiofsd
/// answers); nothing for a size past what a message can carry.
pub(crate) fn read(tag: &Tag, offset: u32, size: u32) -> Vec<u8> {
    let space = space(tag);
    let (offset, size) = (offset as usize, size as usize);
    if size > 256 {
        return Vec::new();
    }
    let mut out: Vec<u8> = space.iter().skip(offset).take(size).copied().collect();
    out.resize(size, 0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_space_holds_the_tag_and_one_request_queue() {
        let tag: Tag = "myfs".parse().unwrap();
        let all = read(&tag, 0, 40);
        assert_eq!(&all[..4], b"myfs");
        assert!(all[4..36].iter().all(|&b| b == 0));
        assert_eq!(&all[36..], &1u32.to_le_bytes());
        assert_eq!(read(&tag, 36, 4), 1u32.to_le_bytes());
        assert_eq!(read(&tag, 38, 4), [0, 0, 0, 0]);
        let full: Tag = "x".repeat(36).parse().unwrap();
        assert_eq!(&read(&full, 0, 36)[..], "x".repeat(36).as_bytes());
    }

    #[test]
    fn tags_that_a_guest_could_not_mount_are_refused() {
        assert!("".parse::<Tag>().is_err());
        assert!("x".repeat(37).parse::<Tag>().is_err());
        assert!("a\0b".parse::<Tag>().is_err());
        assert!("ünïcödé".parse::<Tag>().is_ok());
    }
}
