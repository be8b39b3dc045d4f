//! A region of the remote side, decoded from its descriptor.

use super::*;

/// A memory region of the remote side (librpma's `rpma_mr_remote`), decoded
/// from its descriptor.
///
/// ```
/// let desc = [7, 6, 5, 4, 3, 2, 1, 0, 0xf, 0xe, 0xd, 0xc, 0xb, 0xa, 9, 8, 0x13, 0x12, 0x11, 0x10, 0x21];
/// let mr = rpma::MrRemote::from_descriptor(&desc)?;
/// assert_eq!(mr.size(), 0x08090a0b0c0d0e0f);
/// assert_eq!(mr.rkey(), 0x10111213);
/// assert_eq!(mr.flush_type(), rpma::Usage::FLUSH_TYPE_PERSISTENT);
/// # Ok::<(), rpma::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MrRemote {
    addr: u64,
    size: u64,
    rkey: u32,
    usage: Usage,
}

impl MrRemote {
    /// Decodes a descriptor received from the remote side
    /// (`rpma_mr_remote_from_descriptor`). Bytes after the first 21 are
    /// ignored, as librpma does.
    ///
    /// # Errors
    /// [`Error::Inval`] when `desc` is shorter than 21 bytes or its usage
    /// byte is 0.
    pub fn from_descriptor(desc: &[u8]) -> Result<MrRemote> {
        Ok(MrRemote::from_desc(wire::decode_mr(desc)?))
    }

    /// The region a decoded descriptor describes.
    pub(crate) fn from_desc(d: MrDesc) -> MrRemote {
        MrRemote { addr: d.addr, size: d.size, rkey: d.rkey, usage: Usage::from_bits_retain(d.usage as u16) }
    }

    /// Size of the remote region in bytes (`rpma_mr_remote_get_size`).
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The remote address of the region's start.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// The usage the remote side registered it for.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    #[inline]
    pub(crate) fn check_range(&self, what: &str, offset: u64, len: u64) -> Result<()> {
        check_within(what, "remote", offset, len, self.size)
    }

    /// The flush types the region supports, as `Usage` bits
    /// (`rpma_mr_remote_get_flush_type`).
    pub fn flush_type(&self) -> Usage {
        self.usage & (Usage::FLUSH_TYPE_VISIBILITY | Usage::FLUSH_TYPE_PERSISTENT)
    }
}
